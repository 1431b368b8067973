"""Upgrade a schema-1 library (targets named by alias) to schema 2 (keyed by hardware id).

Schema 1 keyed records by the TVM target alone and named targets by the configuration alias
(``host``), which means another CPU on every machine. Migration needs to be told which CPU the
records were measured on (``cpu``: :meth:`transtune.machine.HostInfo.cpu` of that machine;
this host's by default), derives each target's hardware id and fingerprint from it, adds the
id to the record key and renames run ids (``tune:resnet18:host`` -> ``tune:resnet18:
epyc-znver4-2c``), all in one transaction. A full-ISA target built for another LLVM CPU than
``cpu``'s is refused: its records were not measured on that CPU.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..machine import fingerprint_json
from ..targets import foreign_cpu, hardware_for
from .backend import LibraryError
from .schema import SCHEMA_VERSION
from .store import Library


def migrate_library(url: str | Path, cpu: dict) -> dict[str, str]:
    """Migrate the library at ``url`` in place; returns {old target name or key: hardware id}
    (empty if it is at schema 2 already)."""
    lib = Library.__new__(Library)
    lib._connect(url, 60.0)
    try:
        try:
            (version,) = lib._query("SELECT version FROM schema_version")[0]
        except (IndexError, *lib._backend.errors):
            raise LibraryError(f"{lib.path} is not a transtune library") from None
        if version == SCHEMA_VERSION:
            return {}
        if version != 1:
            raise LibraryError(f"{lib.path}: cannot migrate schema version {version}")
        renamed: dict[str, str] = {}
        with lib.transaction() as cur:
            cur.execute("ALTER TABLE targets ADD COLUMN fingerprint TEXT")
            keys: dict[str, str] = {}
            for tid, key, name in cur.execute("SELECT id, key, name FROM targets").fetchall():
                spec = json.loads(key)
                if spec.get("kind") != "llvm":
                    continue  # not a CPU: its hardware stays unknown
                problem = foreign_cpu(spec, cpu)
                if problem:
                    raise LibraryError(f"{lib.path}: {problem}")
                hw_id, fp = hardware_for(cpu, spec)
                new_key = json.dumps({**spec, "hardware": hw_id}, sort_keys=True,
                                     separators=(",", ":"))  # fmt: skip
                cur.execute(
                    "UPDATE targets SET key = ?, name = ?, fingerprint = ? WHERE id = ?",
                    (new_key, hw_id, fingerprint_json(fp), tid),
                )
                keys[key] = new_key
                renamed[name or key] = hw_id
            aliases = {old: new for old, new in renamed.items() if not old.startswith("{")}
            for run_id, target in cur.execute("SELECT run_id, target FROM runs").fetchall():
                head, _, alias = run_id.rpartition(":")
                new_id = f"{head}:{aliases[alias]}" if head and alias in aliases else run_id
                new_target = keys.get(target, target)
                if new_id == run_id:
                    cur.execute("UPDATE runs SET target = ? WHERE run_id = ?", (new_target, run_id))
                    continue
                cur.execute(
                    "INSERT INTO runs SELECT ?, kind, model, ?, params, started, finished "
                    "FROM runs WHERE run_id = ?",
                    (new_id, new_target, run_id),
                )
                for table in ("curve", "records"):
                    cur.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ?", (new_id, run_id))
                cur.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            cur.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            cur.execute(
                "INSERT INTO meta VALUES ('migrated_from_schema_1', ?)",
                (json.dumps({"at": time.time(), "cpu": cpu}),),
            )
        return renamed
    finally:
        lib.close()
