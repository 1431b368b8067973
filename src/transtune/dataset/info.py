"""Reading a dataset: records as Arrow tables, a summary, and export to MetaSchedule JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .store import DatasetError, DatasetStore, ReadReport


def load_records(
    path: str | Path, columns: list[str] | None = None, target: str | None = None
) -> tuple[pa.Table, ReadReport]:
    """Records of a dataset (only ``columns``, one ``target`` or all) and what was skipped."""
    report = ReadReport()
    return DatasetStore(path).read("records", columns, target, report), report


def dataset_info(path: str | Path) -> dict[str, Any]:
    """Counts and measurement noise, for ``transtune dataset info``."""
    store = DatasetStore(path)
    report = ReadReport()
    records = store.read(
        "records",
        ["workload", "sample", "run_secs", "status", "collected", "source"],
        report=report,
    )
    feats = store.read("features", ["workload", "sample"], report=report).to_pydict()
    featured = set(zip(feats["workload"], feats["sample"], strict=True))
    programs = set(zip(records["workload"].to_pylist(), records["sample"].to_pylist(),
                       strict=True))  # fmt: skip
    workloads = store.read("workloads", ["workload", "kernel_class"], report=report)
    hardware = store.hardware()
    ok = records.filter(pc.equal(records["status"], "ok"))
    per_target = {}
    for target in store.targets():
        rows = records.filter(pc.equal(records["target"], target))
        d = hardware.get(target, {})
        per_target[target] = {
            "cpu": f"{d.get('device', '?')} ({d.get('fingerprint', {}).get('host_mcpu', '?')})",
            "as": d.get("config"),
            "records": len(rows),
            "ok": int(pc.sum(pc.equal(rows["status"], "ok")).as_py() or 0),
            "kernels": len(pc.unique(rows["workload"])),
        }
    models = sorted({m.split("@")[0] for tags in store.occurrences().values() for m in tags})
    size = sum(p.stat().st_size for p in Path(path).rglob("*.parquet"))
    return {
        "path": str(path),
        "evaluator": store.meta.get("evaluator"),
        "sampling": store.meta.get("sampling"),
        "records": len(records),
        "ok_records": len(ok),
        "by_status": {
            row["values"]: row["counts"] for row in pc.value_counts(records["status"]).to_pylist()
        },
        "by_source": {
            row["values"]: row["counts"] for row in pc.value_counts(records["source"]).to_pylist()
        },
        "kernels": len(pc.unique(records["workload"])) if len(records) else 0,
        "classes": len(pc.unique(workloads["kernel_class"])) if len(workloads) else 0,
        "models": models,
        "by_hardware": per_target,
        "cpus": sorted({d.get("fingerprint", {}).get("host_mcpu", "?") for d in hardware.values()}),
        "hardware": hardware,
        "programs_without_features": len(programs - featured),  # a rerun of collect adds them
        "median_cv": _median_cv(ok["run_secs"]),
        "records_per_minute": _per_minute(*_sessions(records["collected"].to_pylist())),
        "bytes_on_disk": size,
        "skipped": report.summary(),
    }


def collection_rate(path: str | Path, gap: float = 600.0) -> tuple[int, float]:
    """(records, seconds) of the collection sessions that wrote the dataset, from its
    records' write times, split where nothing was written for ``gap`` seconds."""
    table, _ = load_records(path, ["collected"])
    return _sessions(table["collected"].to_pylist(), gap)


def _sessions(collected: list[float], gap: float = 600.0) -> tuple[int, float]:
    times = sorted(collected)
    if not times:
        return 0, 0.0
    seconds, start = 0.0, times[0]
    for before, after in zip(times, times[1:], strict=False):
        if after - before > gap:
            seconds += before - start
            start = after
    return len(times), seconds + times[-1] - start


def _per_minute(records: int, seconds: float) -> float | None:
    return 60.0 * records / seconds if seconds > 0 else None


def _median_cv(run_secs: pa.ChunkedArray) -> float | None:
    """Median over records of the coefficient of variation of their repeats."""
    cvs = []
    for secs in run_secs.to_pylist():
        if secs and len(secs) > 1:
            a = np.asarray(secs, dtype=np.float64)
            cvs.append(a.std() / a.mean())
    return float(np.median(cvs)) if cvs else None


def export_json(
    path: str | Path, work_dir: str | Path, target: str, limit: int | None = None
) -> int:
    """Write one target's measured records (the first ``limit``) as a MetaSchedule JSON
    database work dir (full traces: each schedule is rebuilt and post-processed). Returns the
    number of records written."""
    from ..library.database import WorkDirWriter
    from ..schedules import design_spaces, rebuild
    from ..targets import make_target
    from ..tasks import workload_mod

    store = DatasetStore(path)
    workloads = store.read("workloads", ["workload", "mod"]).to_pydict()
    mods = dict(zip(workloads["workload"], workloads["mod"], strict=True))
    spaces = store.read("spaces").to_pydict()
    insts = {(w, s): i for w, s, i in zip(*spaces.values(), strict=True)}
    hardware = store.read("hardware", ["id", "target"]).to_pydict()
    targets = dict(zip(hardware["id"], hardware["target"], strict=True))
    if target not in targets:
        raise DatasetError(f"{path} has no hardware id {target!r}; it has {', '.join(targets)}")
    tvm_target = make_target(json.loads(targets[target]))
    columns = ["workload", "space", "decisions", "run_secs", "status"]
    records = store.read("records", columns, target).select(columns)
    if limit is not None:
        records = records.slice(0, limit)
    writer = WorkDirWriter(work_dir, DatasetError)
    kernels: dict[str, tuple] = {}
    for w, space, decisions, secs, status in zip(*records.to_pydict().values(), strict=True):
        if w not in mods or (w, space) not in insts:
            continue
        if w not in kernels:
            mod = workload_mod([w, mods[w]])
            kernels[w] = (mod, design_spaces(mod, tvm_target)[1])
        mod, postprocs = kernels[w]
        sch = rebuild(mod, insts[w, space], decisions, postprocs)
        if sch is not None:
            writer.add(mod, sch.trace, secs if status == "ok" else [1e10], tvm_target)
    return writer.count
