"""The schedule library: a persistent, target-aware store of tuned schedules.

One SQLite file in WAL mode (one machine), or a PostgreSQL database (several machines, by
URL), with the same tables and SQL. Every write is one transaction, so a killed process
(SIGKILL, Ctrl-C) leaves every committed record and an openable library, and several
processes can write one library at once (writers wait for each other up to ``busy_timeout``).

Records keep MetaSchedule's own JSON forms (workload ``[shash, base64 IRModule]``, trace,
run seconds, target, argument info), so they round-trip with ``JSONDatabase`` work dirs, plus
what transfer-tuning needs: the target key, kernel class, the models a kernel came from, TVM
version, run id, time and how the record was obtained.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import error_line
from ..tasks import same_kernel, workload_hash, workload_json, workload_mod
from .backend import Cursor, LibraryError, Postgres, SQLite, parse_url, redact
from .runs import RunLog
from .schema import FAILED_SECONDS, INSERT_NEW, PROVENANCES, SCHEMA, SCHEMA_VERSION


@dataclass(frozen=True)
class Record:
    """One stored measurement of a schedule on a workload and target."""

    id: int
    workload_id: int
    target_key: str
    trace: Any
    args_info: Any
    run_secs: list[float]
    mean_secs: float
    provenance: str
    donor: str | None
    run_id: str | None
    tvm_version: str

    @property
    def ok(self) -> bool:
        return self.mean_secs < FAILED_SECONDS

    @property
    def hardware(self) -> str | None:
        """The hardware id the record was measured on (None: unknown, e.g. imported)."""
        return json.loads(self.target_key).get("hardware")

    @property
    def target(self) -> dict:
        """The TVM target dict (the key without its hardware id and layout)."""
        spec = json.loads(self.target_key)
        spec.pop("hardware", None)
        spec.pop("layout", None)
        return spec

    def as_json(self) -> list:
        """MetaSchedule's ``TuningRecord.as_json()`` form: [trace, run_secs, target, args]."""
        return [self.trace, self.run_secs, self.target, self.args_info]


def plain(obj: Any) -> Any:
    """A TVM FFI container (Array, Map, String, IntImm) as plain Python, for JSON."""
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    if hasattr(obj, "value") and isinstance(obj.value, int | float):  # IntImm, FloatImm
        return obj.value
    if hasattr(obj, "items"):
        return {str(k): plain(v) for k, v in obj.items()}
    if hasattr(obj, "__iter__"):
        return [plain(v) for v in obj]
    return str(obj)


def target_key(target: Any) -> str:
    """The record key: canonical JSON of a TVM target (its ``export()``, without the host)
    and, for a :class:`~transtune.targets.TargetConfig`, its ``"hardware"`` id, so that two
    CPUs never share records even where their code is built alike (``-mcpu=haswell``), and
    its ``"layout"`` where that is not NCHW (an NHWC kernel is another workload, and a
    schedule does not carry across layouts)."""
    hardware, layout = None, "NCHW"
    if hasattr(target, "tvm_target"):  # a TargetConfig
        hardware, layout, target = target.name, target.layout, target.tvm_target()
    spec = plain(target.export() if hasattr(target, "export") else target)
    spec.pop("host", None)
    if hardware:
        spec["hardware"] = hardware
    if layout != "NCHW":
        spec["layout"] = layout
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _fingerprint(target: Any) -> str | None:
    fp = getattr(target, "fingerprint", None)
    return json.dumps(fp, sort_keys=True, separators=(",", ":")) if fp else None


def _tvm_version() -> str:
    from importlib import metadata

    return metadata.version("apache-tvm")


class Library(RunLog):
    """A schedule library (SQLite file or PostgreSQL database). Use :func:`open_library`;
    close with :meth:`close`."""

    def __init__(self, url: str | Path, busy_timeout: float = 60.0, read_only: bool = False):
        self._connect(url, busy_timeout, read_only)
        where = self.path
        try:
            if read_only:
                row = self.query("SELECT version FROM schema_version")[:1] or [None]
                row = row[0]
            else:
                with self.transaction() as cur:
                    for statement in SCHEMA.split(";"):
                        if statement.strip():
                            cur.execute(statement)
                    row = cur.execute("SELECT version FROM schema_version").fetchone()
                    if row is None:
                        cur.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                        cur.execute(
                            "INSERT INTO meta VALUES ('tvm_version', ?), ('created', ?)",
                            (_tvm_version(), str(time.time())),
                        )
                        row = (SCHEMA_VERSION,)
        except self._backend.errors as err:
            self.close()
            raise LibraryError(f"{where} is not a usable schedule library: {err}") from None
        if row is None or row[0] != SCHEMA_VERSION:
            self.close()
            if row is not None and row[0] == 1:
                raise LibraryError(
                    f"{where}: library schema version 1 (targets without hardware ids); "
                    f"run `transtune library migrate --library {self.url}` once"
                )
            raise LibraryError(
                f"{where}: library schema version {row[0] if row else None}, this transtune "
                f"reads version {SCHEMA_VERSION}"
            )

    def _connect(self, url: str | Path, busy_timeout: float, read_only: bool = False) -> None:
        """Open the backend, without looking at the schema (:mod:`.migrate` starts here)."""
        kind, where = parse_url(url)
        self.url = redact(str(url))  # as shown: a PostgreSQL password is never printed
        self.path = redact(where)  # the file (SQLite) or the connection URL (PostgreSQL)
        self._busy_timeout = busy_timeout
        backend = SQLite if kind == "sqlite" else Postgres
        try:
            self._backend = backend(where, busy_timeout, read_only)
        except sqlite3.DatabaseError as err:
            raise LibraryError(f"{where} is not a usable schedule library: {err}") from None
        self._conn = self._backend.conn
        self._workloads: dict[str, list[tuple[int, Any]]] = {}  # shash -> [(id, IRModule)]
        self._targets: dict[str, tuple[int, str | None]] = {}
        self.skipped_rows = 0  # records whose stored JSON did not parse (see _decoded)

    # -- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One write transaction, writers one at a time: all of it lands, or none of it. A
        writer waits at most the busy timeout for another to finish, then gets a
        ``LibraryError``; so does a commit that fails (the transaction is rolled back)."""
        cur = self._conn.cursor()
        try:
            for statement in self._backend.begin:
                cur.execute(statement)
        except self._backend.errors as err:
            self._rollback(cur)
            raise LibraryError(
                f"{self.path}: no write possible within {self._busy_timeout:.0f} s (another "
                f"writer holds the library?): {error_line(err)}"
            ) from None
        try:
            yield Cursor(cur, self._backend)
        except BaseException:
            self._rollback(cur)
            raise
        try:
            cur.execute("COMMIT")
        except self._backend.errors as err:
            self._rollback(cur)
            raise LibraryError(f"{self.path}: a write did not commit: {error_line(err)}") from None

    def _rollback(self, cur) -> None:
        try:
            cur.execute("ROLLBACK")
        except self._backend.errors:
            pass  # no transaction was open

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self._conn.execute(self._backend.sql(sql), params).fetchall()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def tvm_version(self) -> str:
        return self.query("SELECT value FROM meta WHERE key = 'tvm_version'")[0][0]

    def foreign_versions(self) -> dict[str, int]:
        """Record counts by TVM version, for versions other than the installed one."""
        rows = self.query(
            "SELECT tvm_version, COUNT(*) FROM records WHERE tvm_version != ? GROUP BY 1",
            (_tvm_version(),),
        )
        return dict(rows)

    # -- workloads ---------------------------------------------------------------------------

    def find_workload(self, mod) -> int | None:
        """Id of the stored workload structurally equal to ``mod``, or None."""
        return self._match(workload_hash(mod), mod)

    def _match(self, shash: str, mod) -> int | None:
        if shash not in self._workloads:
            rows = self.query("SELECT id, mod_json FROM workloads WHERE shash = ?", (shash,))
            self._workloads[shash] = [(wid, _decode_mod(blob)) for wid, blob in rows]
        for wid, stored in self._workloads[shash]:
            if same_kernel(stored, mod):
                return wid
        return None

    def add_workload(
        self,
        mod,
        kernel_class: str | None = None,
        flops: float | None = None,
        model: str | None = None,
        kernel_name: str | None = None,
        weight: int = 1,
    ) -> int:
        """Store ``mod`` if new (and its origin ``model``); returns its id."""
        shash, b64 = workload_json(mod)
        wid = self._match(shash, mod)
        if wid is not None and kernel_class is None and model is None:
            return wid
        with self.transaction() as cur:
            if wid is None:
                # Another process may have added it since we looked: check inside the lock.
                for other, blob in cur.execute(
                    "SELECT id, mod_json FROM workloads WHERE shash = ?", (shash,)
                ).fetchall():
                    if same_kernel(_decode_mod(blob), mod):
                        wid = other
                if wid is None:
                    blob = zlib.compress(json.dumps([shash, b64]).encode(), 6)
                    wid = cur.insert(
                        "INSERT INTO workloads (shash, mod_json, kernel_class, flops) "
                        "VALUES (?, ?, ?, ?)",
                        (shash, blob, kernel_class, flops),
                    )
                self._workloads.pop(shash, None)
            if kernel_class is not None:
                cur.execute(
                    "UPDATE workloads SET kernel_class = ?, flops = COALESCE(?, flops) "
                    "WHERE id = ?",
                    (kernel_class, flops, wid),
                )
            if model is not None:
                cur.execute(
                    "INSERT OR REPLACE INTO workload_models VALUES (?, ?, ?, ?)",
                    (wid, model, kernel_name, weight),
                )
        return wid

    def workload_mod(self, workload_id: int):
        (blob,) = self.query("SELECT mod_json FROM workloads WHERE id = ?", (workload_id,))[0]
        return _decode_mod(blob)

    # -- records -----------------------------------------------------------------------------

    def _target_id(self, key: str, name: str | None = None, fingerprint: str | None = None) -> int:
        """The id of target ``key``, added if new. A key whose hardware id is stored with
        another ``fingerprint`` is refused: that id means another CPU in this library."""
        if key not in self._targets:
            with self.transaction() as cur:
                cur.execute(
                    "INSERT OR IGNORE INTO targets (key, name, fingerprint) VALUES (?, ?, ?)",
                    (key, name, fingerprint),
                )
                if name or fingerprint:
                    cur.execute(
                        "UPDATE targets SET name = COALESCE(name, ?), "
                        "fingerprint = COALESCE(fingerprint, ?) WHERE key = ?",
                        (name, fingerprint, key),
                    )
                tid, stored = cur.execute(
                    "SELECT id, fingerprint FROM targets WHERE key = ?", (key,)
                ).fetchone()
            self._targets[key] = (tid, stored)
        tid, stored = self._targets[key]
        if fingerprint and stored and json.loads(stored) != json.loads(fingerprint):
            raise LibraryError(_mixed(self.path, key, stored, fingerprint))
        return tid

    def add_record(
        self,
        workload_id: int,
        target: Any,
        trace: Any,
        run_secs: list[float],
        args_info: Any = None,
        provenance: str = "tuned",
        run_id: str | None = None,
        donor: str | None = None,
        skip_duplicate: bool = False,
    ) -> int | None:
        """Store one measurement (a failed one has ``run_secs`` of ``[1e10]``); returns its id
        (None when ``skip_duplicate`` and the same trace and run times are stored already)."""
        if provenance not in PROVENANCES:
            raise ValueError(f"provenance must be one of {PROVENANCES}")
        key = target if isinstance(target, str) else target_key(target)
        tid = self._target_id(key, json.loads(key).get("hardware"), _fingerprint(target))
        secs = [float(s) for s in run_secs] or [FAILED_SECONDS]
        if not all(math.isfinite(s) and s > 0 for s in secs):
            raise ValueError(f"run times must be positive and finite, got {secs[:4]}")
        mean = math.fsum(secs) / len(secs)
        with self.transaction() as cur:
            if skip_duplicate:
                found = cur.execute(
                    "SELECT id FROM records WHERE workload_id = ? AND target_id = ? AND trace = ? "
                    "AND run_secs = ?", (workload_id, tid, json.dumps(trace), json.dumps(secs)),
                ).fetchone()  # fmt: skip
                if found:
                    return None
            return cur.insert(
                "INSERT INTO records (workload_id, target_id, trace, args_info, run_secs, "
                "mean_secs, provenance, donor, run_id, tvm_version, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    workload_id, tid, json.dumps(trace), json.dumps(args_info), json.dumps(secs),
                    min(mean, FAILED_SECONDS), provenance, donor, run_id, _tvm_version(),
                    time.time(),
                ),
            )  # fmt: skip

    def records(
        self,
        workload_id: int | None = None,
        target: Any = None,
        top_k: int | None = None,
        ok_only: bool = False,
        provenance: tuple[str, ...] | None = None,
    ) -> list[Record]:
        """Records, best first (by mean seconds), filtered by workload, target and how they
        were obtained (``provenance``, e.g. ``("tuned",)``)."""
        sql = (
            "SELECT r.id, r.workload_id, t.key, r.trace, r.args_info, r.run_secs, r.mean_secs, "
            "r.provenance, r.donor, r.run_id, r.tvm_version FROM records r "
            "JOIN targets t ON t.id = r.target_id"
        )
        where, params = _record_filter(workload_id, target, ok_only, provenance)
        sql += where
        sql += " ORDER BY r.mean_secs, r.id"
        if top_k is not None:
            sql += f" LIMIT {int(top_k)}"
        return self._decoded(
            (rid, wid, key, tr, ai, rs, ms_, pv, dn, run, tv)
            for rid, wid, key, tr, ai, rs, ms_, pv, dn, run, tv in self.query(sql, params)
        )

    def _decoded(self, rows) -> list[Record]:
        """Records of raw rows; a row whose JSON does not parse is skipped and counted in
        :attr:`skipped_rows` (one corrupt row must not take every read down with it)."""
        out = []
        for rid, wid, key, tr, ai, rs, ms_, pv, dn, run, tv in rows:
            try:
                out.append(Record(rid, wid, key, json.loads(tr), json.loads(ai), json.loads(rs),
                                  ms_, pv, dn, run, tv))  # fmt: skip
            except (TypeError, ValueError):
                self.skipped_rows += 1
        return out

    def best_by_class(
        self, kernel_class: str | None, target: Any
    ) -> list[tuple[int, float, str, Record]]:
        """Per workload of ``kernel_class`` (None: of every class): (workload id, FLOPs, models,
        its best record) on ``target``, fastest first. Only successful measurements count."""
        key = target if isinstance(target, str) else target_key(target)
        where, params = ("w.kernel_class = ? AND ", (kernel_class,)) if kernel_class else ("", ())
        rows = self.query(
            "SELECT w.id, COALESCE(w.flops, 0), "
            "(SELECT GROUP_CONCAT(model) FROM workload_models m WHERE m.workload_id = w.id), "
            "r.id, r.trace, r.args_info, r.run_secs, r.mean_secs, r.provenance, r.donor, "
            "r.run_id, r.tvm_version "
            "FROM records r JOIN workloads w ON w.id = r.workload_id "
            "JOIN targets t ON t.id = r.target_id "
            f"WHERE {where}t.key = ? AND r.mean_secs < {FAILED_SECONDS} "
            "AND r.id = (SELECT b.id FROM records b WHERE b.workload_id = w.id "
            "  AND b.target_id = t.id ORDER BY b.mean_secs, b.id LIMIT 1) "
            "ORDER BY r.mean_secs",
            (*params, key),
        )
        out = []
        for wid, flops, models, *rest in rows:
            for record in self._decoded([(rest[0], wid, key, *rest[1:])]):
                out.append((wid, flops, models or "", record))
        return out

    def target_keys(self) -> list[str]:
        """The keys of every target the library holds records for (or held)."""
        return [key for (key,) in self.query("SELECT key FROM targets ORDER BY id")]

    def count_records(self, workload_id: int | None = None, target: Any = None) -> int:
        where, params = _record_filter(workload_id, target)
        sql = "SELECT COUNT(*) FROM records r JOIN targets t ON t.id = r.target_id" + where
        return self.query(sql, params)[0][0]

    def merge(self, other: Library, top_k: int | None = None) -> tuple[int, int]:
        """Copy ``other``'s workloads, their models, runs, curves and records (only the
        ``top_k`` fastest successful ones per workload and target, when given) into this
        library, in one transaction, skipping records it holds already (a merge repeated adds
        nothing). Returns (workloads, records) copied."""
        ids: dict[int, int] = {}
        for wid, blob, kernel_class, flops in other.query(
            "SELECT id, mod_json, kernel_class, flops FROM workloads"
        ):
            ids[wid] = self.add_workload(_decode_mod(blob), kernel_class, flops)
        rank = "ROW_NUMBER() OVER (PARTITION BY r.workload_id, t.id ORDER BY r.mean_secs, r.id)"
        rows = other.query(
            f"SELECT * FROM (SELECT r.id, r.workload_id, t.key, t.name, r.trace, r.args_info, "
            f"r.run_secs, r.mean_secs, r.provenance, r.donor, r.run_id, r.tvm_version, "
            f"r.created, {rank} AS n FROM records r JOIN targets t ON t.id = r.target_id"
            + (
                f" WHERE r.mean_secs < {FAILED_SECONDS}) AS ranked WHERE n <= {int(top_k)}"
                if top_k
                else ") AS ranked"
            )
        )
        from .trust import trace_problem

        for rid, _, _, _, trace, *_ in rows:
            problem = trace_problem(json.loads(trace))
            if problem is not None:
                raise LibraryError(f"{other.path}: record {rid}: {problem}; nothing merged")
        prints = dict(other.query("SELECT key, fingerprint FROM targets"))
        targets = {key: self._target_id(key, name, prints.get(key)) for _, _, key, name, *_ in rows}
        with self.transaction() as cur:
            cur.executemany(
                "INSERT OR REPLACE INTO workload_models VALUES (?, ?, ?, ?)",
                [(ids[w], *rest) for w, *rest in other.query("SELECT * FROM workload_models")],
            )
            cur.executemany(
                "INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                other.query("SELECT * FROM runs"),
            )
            for (run_id,) in other.query("SELECT run_id FROM runs"):
                if not cur.execute("SELECT 1 FROM curve WHERE run_id = ?", (run_id,)).fetchone():
                    cur.executemany(
                        "INSERT INTO curve VALUES (?, ?, ?, ?)",
                        other.query("SELECT * FROM curve WHERE run_id = ?", (run_id,)),
                    )
                    cur.executemany(
                        "INSERT INTO kernel_curve VALUES (?, ?, ?, ?)",
                        [(run_id, ids[w], t, b) for w, t, b in other.query(
                            "SELECT workload_id, trials, best FROM kernel_curve WHERE run_id = ?",
                            (run_id,)) if w in ids],
                    )  # fmt: skip
            copied = 0
            for _, w, key, _name, *rest in rows:
                row = (ids[w], targets[key], *rest[:-1])
                copied += cur.execute(INSERT_NEW, row + (row[0], row[1], row[2], row[4])).rowcount
        return len(ids), copied

    def compact(self, top_k: int) -> int:
        """Delete all but the best ``top_k`` records per workload and target (runs and curves
        stay); returns how many were deleted. Shipped libraries are kept this small. A SQLite
        file is vacuumed after."""
        with self.transaction() as cur:
            deleted = cur.execute(
                "DELETE FROM records WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER "
                "(PARTITION BY workload_id, target_id ORDER BY mean_secs, id) AS n FROM records) "
                "ranked WHERE n > ?)",
                (top_k,),
            ).rowcount
        if isinstance(self._backend, SQLite):
            self.query("VACUUM")
            self.query("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    # -- summary -----------------------------------------------------------------------------

    def summary(self) -> list[tuple]:
        """Per workload and target: id, class, models, target, record count, best ms, how."""
        rows = self.query(
            "SELECT w.id, w.kernel_class, "
            "(SELECT GROUP_CONCAT(model) FROM workload_models m WHERE m.workload_id = w.id), "
            "COALESCE(t.name, t.key), COUNT(*), 1e3 * MIN(r.mean_secs), "
            "(SELECT provenance FROM records b WHERE b.workload_id = w.id "
            " AND b.target_id = t.id ORDER BY b.mean_secs LIMIT 1) "
            "FROM records r JOIN workloads w ON w.id = r.workload_id "
            "JOIN targets t ON t.id = r.target_id GROUP BY w.id, t.id ORDER BY w.id"
        )
        return [(*row[:5], round(row[5], 4), row[6]) for row in rows]

    def info(self) -> dict[str, Any]:
        """Counts for ``transtune library info``."""
        q = self.query
        return {
            "path": str(self.path),
            "schema_version": SCHEMA_VERSION,
            "created_by_tvm": self.tvm_version,
            "workloads": q("SELECT COUNT(*) FROM workloads")[0][0],
            "records": q("SELECT COUNT(*) FROM records")[0][0],
            "failed_records": q(
                f"SELECT COUNT(*) FROM records WHERE mean_secs >= {FAILED_SECONDS}"
            )[0][0],
            "models": [m for (m,) in q("SELECT DISTINCT model FROM workload_models ORDER BY 1")],
            "classes": q("SELECT COUNT(DISTINCT kernel_class) FROM workloads")[0][0],
            "by_target": q(
                "SELECT COALESCE(t.name, t.key), COUNT(*) FROM records r "
                "JOIN targets t ON t.id = r.target_id GROUP BY t.id ORDER BY 2 DESC"
            ),
            "by_provenance": q(
                "SELECT provenance, COUNT(*) FROM records GROUP BY 1 ORDER BY 2 DESC"
            ),
            "foreign_tvm_versions": self.foreign_versions(),
            "unreadable_records": self._unreadable(),
        }

    def _unreadable(self) -> int:
        """Records whose trace or run times are not valid JSON."""
        before = self.skipped_rows
        self.records()
        return self.skipped_rows - before


def _record_filter(
    workload_id: int | None,
    target: Any,
    ok_only: bool = False,
    provenance: tuple[str, ...] | None = None,
) -> tuple[str, tuple]:
    """SQL ``WHERE`` clause (over ``records r`` joined with ``targets t``) and its parameters."""
    clauses, params = ["1 = 1"], []
    if workload_id is not None:
        clauses.append("r.workload_id = ?")
        params.append(workload_id)
    if target is not None:
        clauses.append("t.key = ?")
        params.append(target if isinstance(target, str) else target_key(target))
    if ok_only:
        clauses.append(f"r.mean_secs < {FAILED_SECONDS}")
    if provenance:
        clauses.append(f"r.provenance IN ({', '.join('?' * len(provenance))})")
        params.extend(provenance)
    return " WHERE " + " AND ".join(clauses), tuple(params)


def _mixed(where: str, key: str, stored: str, current: str) -> str:
    from ..machine import fingerprint_difference

    hw = json.loads(key).get("hardware")
    diff = fingerprint_difference(json.loads(stored), json.loads(current))
    return (
        f"{where}: hardware id {hw!r} is another CPU in this library ({diff}); "
        "refusing to mix their records"
    )


def _decode_mod(blob: bytes):
    return workload_mod(json.loads(zlib.decompress(blob)))


def open_library(url: str | Path = "sqlite:///lib.db", read_only: bool = False) -> Library:
    """Open (creating if needed) the schedule library at ``url``: ``sqlite:///path`` or a path
    (one machine), ``postgresql://user@host/db`` (a team's shared library). ``read_only``:
    for reading, never creating or changing it (a missing file is an error)."""
    return Library(url, read_only=read_only)
