"""Records of the schedule library: the :class:`Record` row, the target key that files a
record under its target, hardware id and layout, and the record queries of
:class:`~transtune.library.Library` (a mixin, over its ``_query`` and ``transaction``)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from .backend import LibraryError
from .schema import FAILED_SECONDS, PROVENANCES


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
        for option in ("layout", "prepack"):
            spec.pop(option, None)
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
    schedule does not carry across layouts) and ``"prepack"`` where weights are repacked."""
    hardware, layout, prepack = None, "NCHW", False
    if hasattr(target, "tvm_target"):  # a TargetConfig
        hardware, layout, prepack = target.name, target.layout, target.prepack
        target = target.tvm_target()
    spec = plain(target.export() if hasattr(target, "export") else target)
    spec.pop("host", None)
    if hardware:
        spec["hardware"] = hardware
    if layout != "NCHW":
        spec["layout"] = layout
    if prepack:
        spec["prepack"] = True
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _fingerprint(target: Any) -> str | None:
    fp = getattr(target, "fingerprint", None)
    return json.dumps(fp, sort_keys=True, separators=(",", ":")) if fp else None


def _tvm_version() -> str:
    from importlib import metadata

    return metadata.version("apache-tvm")


class RecordStore:
    """The record queries of a library."""

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
            for rid, wid, key, tr, ai, rs, ms_, pv, dn, run, tv in self._query(sql, params)
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
        rows = self._query(
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
        return [key for (key,) in self._query("SELECT key FROM targets ORDER BY id")]

    def count_records(self, workload_id: int | None = None, target: Any = None) -> int:
        where, params = _record_filter(workload_id, target)
        sql = "SELECT COUNT(*) FROM records r JOIN targets t ON t.id = r.target_id" + where
        return self._query(sql, params)[0][0]


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
