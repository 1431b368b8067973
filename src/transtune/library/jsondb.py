"""Import from and export to MetaSchedule ``JSONDatabase`` work dirs.

A work dir holds ``database_workload.json`` (``[shash, base64 IRModule]`` per line) and
``database_tuning_record.json`` (``[workload_index, [trace, run_secs, target, args_info]]``
per line). Import never aborts on a bad line: corrupt or foreign lines are skipped and
reported with their line numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TranstuneError, error_line
from .store import Library, LibraryError, plain, target_key
from .trust import check_trace, trace_problem

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


@dataclass
class ImportReport:
    """What an import took and what it skipped (``(file, line number, reason)``)."""

    workloads: int = 0
    records: int = 0
    duplicates: int = 0  # records the library held already (an import repeated adds nothing)
    skipped: list[tuple[str, int, str]] = field(default_factory=list)

    def summary(self) -> str:
        text = f"imported {self.records} records of {self.workloads} workloads"
        if self.duplicates:
            text += f" ({self.duplicates} held already, not added again)"
        if self.skipped:
            lines = ", ".join(f"{f}:{n}" for f, n, _ in self.skipped[:10])
            more = " ..." if len(self.skipped) > 10 else ""
            text += f"; skipped {len(self.skipped)} bad lines ({lines}{more})"
        return text


def import_json(
    library: Library,
    work_dir: str | Path,
    provenance: str = "imported",
    model: str | None = None,
    run_id: str | None = None,
) -> ImportReport:
    """Add the workloads and records of a MetaSchedule JSON work dir to ``library``."""
    from tvm.s_tir import meta_schedule as ms

    work_dir = Path(work_dir)
    if not (work_dir / WORKLOADS).is_file():
        raise TranstuneError(f"{work_dir} has no {WORKLOADS}: not a MetaSchedule work dir")
    report = ImportReport()
    workloads: dict[int, tuple[int, object]] = {}  # line index -> (library id, Workload)
    for index, (lineno, text) in enumerate(_lines(work_dir / WORKLOADS)):
        try:
            workload = ms.database.Workload.from_json(json.loads(text))
        except Exception as err:
            report.skipped.append((WORKLOADS, lineno, error_line(err, 200)))
            continue
        workloads[index] = (library.add_workload(workload.mod, model=model), workload)
        report.workloads += 1
    path = work_dir / RECORDS
    for lineno, text in _lines(path) if path.is_file() else []:
        try:
            index, record_json = json.loads(text)
            if index not in workloads:
                raise ValueError(f"refers to workload line {index + 1}, which is missing or bad")
            workload_id, workload = workloads[index]
            record = ms.database.TuningRecord.from_json(record_json, workload)  # validates
            trace, run_secs, target, args_info = record.as_json()
            if target is None:
                raise ValueError("record has no target")
            check_trace(plain(trace))
            added = library.add_record(
                workload_id,
                target_key(record.target),
                trace,
                list(run_secs or []),
                args_info,
                provenance=provenance,
                run_id=run_id,
                skip_duplicate=True,
            )
            report.records += added is not None
            report.duplicates += added is None
        except Exception as err:
            report.skipped.append((RECORDS, lineno, error_line(err, 200)))
    return report


def open_json_database(work_dir: str | Path):
    """A MetaSchedule ``JSONDatabase`` of ``work_dir``, its traces checked (see
    :mod:`.trust`): one outside the allowlist is refused with its record number."""
    from tvm.s_tir import meta_schedule as ms

    path = Path(work_dir)
    if not (path / WORKLOADS).is_file():
        raise TranstuneError(f"{work_dir} is not a MetaSchedule JSON database work dir")
    database = ms.database.JSONDatabase(work_dir=str(path), allow_missing=False)
    for i, record in enumerate(database.get_all_tuning_records()):
        problem = trace_problem(plain(record.trace.as_json()))
        if problem is not None:
            raise TranstuneError(f"{work_dir}: tuning record {i + 1}: {problem}")
    return database


def export_json(library: Library, work_dir: str | Path, target=None) -> int:
    """Write the library's records (of one target, or all) as a MetaSchedule work dir.

    Returns the number of records written.
    """
    from tvm.s_tir import meta_schedule as ms

    from ..targets import make_target

    work_dir = Path(work_dir)
    held = [name for name in (WORKLOADS, RECORDS) if (work_dir / name).exists()]
    if held:
        raise LibraryError(f"{work_dir} holds a MetaSchedule database already ({held[0]}); "
                           "export into a new or empty directory")  # fmt: skip
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=True)
    workloads: dict[int, object] = {}
    count = 0
    for record in library.records(target=target):
        if record.workload_id not in workloads:
            workloads[record.workload_id] = database.commit_workload(
                library.workload_mod(record.workload_id)
            )
        trace = record.as_json()
        trace[2] = make_target(record.target).export()
        database.commit_tuning_record(
            ms.database.TuningRecord.from_json(trace, workloads[record.workload_id])
        )
        count += 1
    return count


def _lines(path: Path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                yield lineno, line
