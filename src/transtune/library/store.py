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
import sqlite3
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import error_line
from ..tasks import same_kernel, workload_hash, workload_json, workload_mod
from .backend import Cursor, LibraryError, Postgres, SQLite, parse_url, redact
from .maintenance import Maintenance
from .records import Record, RecordStore, _tvm_version, plain, target_key
from .runs import RunLog
from .schema import SCHEMA, SCHEMA_VERSION

__all__ = ["Library", "Record", "open_library", "plain", "target_key"]


class Library(RunLog, RecordStore, Maintenance):
    """A schedule library (SQLite file or PostgreSQL database). Use :func:`open_library`;
    close with :meth:`close`."""

    def __init__(self, url: str | Path, busy_timeout: float = 60.0, read_only: bool = False):
        self._connect(url, busy_timeout, read_only)
        where = self.path
        try:
            if read_only:
                row = self._query("SELECT version FROM schema_version")[:1] or [None]
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

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Raw SQL, for this package's mixins (everyone else calls a named query)."""
        return self._conn.execute(self._backend.sql(sql), params).fetchall()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def tvm_version(self) -> str:
        return self._query("SELECT value FROM meta WHERE key = 'tvm_version'")[0][0]

    def foreign_versions(self) -> dict[str, int]:
        """Record counts by TVM version, for versions other than the installed one."""
        rows = self._query(
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
            rows = self._query("SELECT id, mod_json FROM workloads WHERE shash = ?", (shash,))
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
        (blob,) = self._query("SELECT mod_json FROM workloads WHERE id = ?", (workload_id,))[0]
        return _decode_mod(blob)

    def kernel_classes(self) -> dict[int, str | None]:
        """Kernel class of every stored workload, by id (None: imported without a class)."""
        return dict(self._query("SELECT id, kernel_class FROM workloads"))

    def workloads(self) -> Iterator[tuple[int, Any, str | None, float | None]]:
        """(id, kernel module, class, FLOPs) of every stored workload."""
        for wid, blob, kernel_class, flops in self._query(
            "SELECT id, mod_json, kernel_class, flops FROM workloads"
        ):
            yield wid, _decode_mod(blob), kernel_class, flops


def _decode_mod(blob: bytes):
    return workload_mod(json.loads(zlib.decompress(blob)))


def open_library(url: str | Path = "sqlite:///lib.db", read_only: bool = False) -> Library:
    """Open (creating if needed) the schedule library at ``url``: ``sqlite:///path`` or a path
    (one machine), ``postgresql://user@host/db`` (a team's shared library). ``read_only``:
    for reading, never creating or changing it (a missing file is an error)."""
    return Library(url, read_only=read_only)
