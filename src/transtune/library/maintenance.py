"""Whole-library operations of :class:`~transtune.library.Library` (a mixin): merging
another library in, compacting to the best records, and the summaries ``transtune library``
prints."""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from .backend import LibraryError, SQLite
from .schema import FAILED_SECONDS, INSERT_NEW, SCHEMA_VERSION

# Ids of the records beyond the best ``?`` per workload and target (what compaction deletes).
_BEYOND = (
    "SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY workload_id, target_id "
    "ORDER BY mean_secs, id) AS n FROM records) ranked WHERE n > ?"
)


class Maintenance:
    """Merge, compact and summarize a library."""

    def merge(
        self,
        other,
        top_k: int | None = None,
        exclude: Collection[int] = (),
        exclude_models: Collection[str] = (),
    ) -> tuple[int, int]:
        """Copy ``other``'s workloads, their models, runs, curves and records (only the
        ``top_k`` fastest successful ones per workload and target, when given) into this
        library, in one transaction, skipping records it holds already (a merge repeated adds
        nothing), the workloads of ``other`` whose ids are in ``exclude`` (with their
        records), and every workload and run of the models in ``exclude_models`` (a library
        with a model held out). Returns (workloads, records) copied."""
        exclude = {*exclude, *(w for m in exclude_models for w in other.model_weights(m))}
        runs = other._query("SELECT * FROM runs")
        dropped = {r[0] for r in runs if r[2] in exclude_models}
        runs = [r for r in runs if r[0] not in dropped]
        ids: dict[int, int] = {}
        for wid, mod, kernel_class, flops in other.workloads():
            if wid not in exclude:
                ids[wid] = self.add_workload(mod, kernel_class, flops)
        rank = "ROW_NUMBER() OVER (PARTITION BY r.workload_id, t.id ORDER BY r.mean_secs, r.id)"
        rows = other._query(
            f"SELECT * FROM (SELECT r.id, r.workload_id, t.key, t.name, r.trace, r.args_info, "
            f"r.run_secs, r.mean_secs, r.provenance, r.donor, r.run_id, r.tvm_version, "
            f"r.created, {rank} AS n FROM records r JOIN targets t ON t.id = r.target_id"
            + (
                f" WHERE r.mean_secs < {FAILED_SECONDS}) AS ranked WHERE n <= {int(top_k)}"
                if top_k
                else ") AS ranked"
            )
        )
        rows = [row for row in rows if row[1] in ids and row[10] not in dropped]
        from .trust import trace_problem

        for rid, _, _, _, trace, *_ in rows:
            problem = trace_problem(json.loads(trace))
            if problem is not None:
                raise LibraryError(f"{other.path}: record {rid}: {problem}; nothing merged")
        prints = dict(other._query("SELECT key, fingerprint FROM targets"))
        targets = {key: self._target_id(key, name, prints.get(key)) for _, _, key, name, *_ in rows}
        with self.transaction() as cur:
            cur.executemany(
                "INSERT OR REPLACE INTO workload_models VALUES (?, ?, ?, ?)",
                [
                    (ids[w], *rest)
                    for w, *rest in other._query("SELECT * FROM workload_models")
                    if w in ids
                ],
            )
            cur.executemany("INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", runs)
            for run_id, *_ in runs:
                if not cur.execute("SELECT 1 FROM curve WHERE run_id = ?", (run_id,)).fetchone():
                    cur.executemany(
                        "INSERT INTO curve VALUES (?, ?, ?, ?)",
                        other._query("SELECT * FROM curve WHERE run_id = ?", (run_id,)),
                    )
                    cur.executemany(
                        "INSERT INTO kernel_curve VALUES (?, ?, ?, ?)",
                        [(run_id, ids[w], t, b) for w, points in other.kernel_curves(run_id).items()
                         if w in ids for t, b in points],
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
            deleted = cur.execute(f"DELETE FROM records WHERE id IN ({_BEYOND})", (top_k,)).rowcount
        if isinstance(self._backend, SQLite):
            self._query("VACUUM")
            self._query("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    def compactable(self, top_k: int) -> int:
        """How many records ``compact(top_k)`` would delete."""
        return self._query(f"SELECT COUNT(*) FROM ({_BEYOND}) beyond", (top_k,))[0][0]

    def snapshot(self, path: str | Path) -> None:
        """Write a consistent copy of this SQLite library to the new file ``path``."""
        if not isinstance(self._backend, SQLite):
            raise LibraryError("a snapshot is written of a SQLite library only")
        self._query("VACUUM INTO ?", (str(path),))

    def summary(self) -> list[tuple]:
        """Per workload and target: id, class, models, target, record count, best ms, how."""
        rows = self._query(
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
        q = self._query
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
