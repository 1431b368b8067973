"""Where a library lives: an SQLite file (WAL mode, ``BEGIN IMMEDIATE`` writers) or a
PostgreSQL database (an advisory lock per write transaction), behind one small interface:
``conn``, ``errors``, ``begin`` statements, ``sql()`` (SQLite's dialect translated) and
``insert()`` (returning the new id)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

from ..errors import TranstuneError


class LibraryError(TranstuneError):
    """A library that cannot be opened or is not a transtune library."""


def parse_url(url: str | Path) -> tuple[str, str]:
    """``(backend, where)``: ``sqlite:///path/lib.db`` or a plain path -> ``("sqlite", path)``;
    ``postgresql://user@host/db`` -> ``("postgresql", url)``."""
    text = str(url)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme in ("postgresql", "postgres"):
            return "postgresql", text
        if scheme != "sqlite":
            raise LibraryError(
                f"unsupported library URL scheme {scheme!r} "
                "(use sqlite:///path or postgresql://user@host/db)"
            )
        text = rest[1:] if rest.startswith("/") else rest
    return "sqlite", text


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


class SQLite:
    """SQLite in WAL mode; ``BEGIN IMMEDIATE`` makes writers wait for each other."""

    TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"

    def __init__(self, path: str, busy_timeout: float, read_only: bool = False) -> None:
        file = Path(path)
        if read_only and not file.is_file():
            raise LibraryError(f"no library at {path}")
        if not read_only:
            file.parent.mkdir(parents=True, exist_ok=True)
        # Read-only: with no write-ahead log beside it (no writer at work), as immutable, so
        # that not even the -wal and -shm files a WAL reader creates are left behind.
        idle = not Path(f"{path}-wal").exists()
        mode = "mode=ro&immutable=1" if idle else "mode=ro"
        target = f"file:{quote(str(file.absolute()))}?{mode}" if read_only else path
        self.conn = sqlite3.connect(
            target, timeout=busy_timeout, isolation_level=None, check_same_thread=False,
            uri=read_only,
        )  # fmt: skip
        tables = {n for (n,) in self.conn.execute("SELECT name FROM sqlite_master")}
        if tables and "schema_version" not in tables:  # before any pragma changes the file
            self.conn.close()
            raise LibraryError(f"{path} is an SQLite database, but not a transtune library")
        pragmas = ("foreign_keys=ON",) if read_only else (
            "journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON")  # fmt: skip
        for pragma in pragmas:
            self.conn.execute(f"PRAGMA {pragma}")
        self.errors = (sqlite3.DatabaseError,)
        self.begin = ["BEGIN IMMEDIATE"]

    def sql(self, text: str) -> str:
        return text

    def insert(self, cur, text: str, params: tuple) -> int:
        cur.execute(text, params)
        return cur.lastrowid


class Postgres:
    """PostgreSQL (``psycopg``): the same SQL, translated; an advisory lock per write
    transaction makes writers wait for each other, as SQLite's ``BEGIN IMMEDIATE`` does."""

    _CONFLICT = {"workload_models": "(workload_id, model) DO UPDATE SET "
                 "kernel_name = EXCLUDED.kernel_name, weight = EXCLUDED.weight"}  # fmt: skip
    TABLES = (
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    )

    def __init__(self, url: str, busy_timeout: float, read_only: bool = False) -> None:
        try:
            import psycopg
        except ImportError:
            raise LibraryError("a PostgreSQL library needs the psycopg package") from None
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=int(busy_timeout))
        except psycopg.Error as err:
            shown = redact(url)
            raise LibraryError(f"cannot connect to {shown}: {str(err).strip()}") from None
        # Bounded waits: for the write lock, and for a client that stalls inside a transaction.
        wait = int(1000 * busy_timeout)
        self.conn.execute(f"SET lock_timeout = '{wait}ms'")
        self.conn.execute(f"SET idle_in_transaction_session_timeout = '{10 * wait}ms'")
        self.errors = (psycopg.Error,)
        self.begin = ["BEGIN", "SELECT pg_advisory_xact_lock(7216)"]

    def sql(self, text: str) -> str:
        text = text.replace("?", "%s").replace("GROUP_CONCAT(model)", "STRING_AGG(model, ',')")
        text = text.replace("INTEGER PRIMARY KEY", "BIGSERIAL PRIMARY KEY")
        text = text.replace("BLOB", "BYTEA").replace(" REAL", " DOUBLE PRECISION")
        for verb, clause in (("INSERT OR IGNORE INTO", None), ("INSERT OR REPLACE INTO", 1)):
            if verb in text:
                table = text.split(verb, 1)[1].split()[0]
                tail = "DO NOTHING" if clause is None else self._CONFLICT[table]
                text = text.replace(verb, "INSERT INTO") + f" ON CONFLICT {tail}"
        return text

    def insert(self, cur, text: str, params: tuple) -> int:
        return cur.execute(text + " RETURNING id", params).fetchone()[0]


class Cursor:
    """A cursor that speaks the library's SQL (SQLite's) on either backend."""

    def __init__(self, cur, backend) -> None:
        self._cur, self._backend = cur, backend

    def execute(self, text: str, params: tuple = ()):
        return self._cur.execute(self._backend.sql(text), params)

    def executemany(self, text: str, rows) -> None:
        self._cur.executemany(self._backend.sql(text), list(rows))

    def insert(self, text: str, params: tuple) -> int:
        """Run an ``INSERT`` and return the new row's id."""
        return self._backend.insert(self._cur, self._backend.sql(text), params)
