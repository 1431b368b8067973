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
    report = ImportReport()
    workloads = _workloads(work_dir, report)
    ids = {i: library.add_workload(w.mod, model=model) for i, w in workloads.items()}
    report.workloads = len(ids)
    for index, lineno, record in _records(work_dir, workloads, report):
        try:
            trace, run_secs, _, args_info = record.as_json()
            check_trace(plain(trace))
            added = library.add_record(
                ids[index],
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
    """A MetaSchedule database (in memory) of ``work_dir``'s records, and an
    :class:`ImportReport` of the corrupt lines it skipped. Traces are checked (see
    :mod:`.trust`): one outside the allowlist refuses the whole work dir, with its line."""
    from tvm.s_tir import meta_schedule as ms

    report = ImportReport()
    workloads = _workloads(work_dir, report)
    database = ms.database.MemoryDatabase()
    committed = {i: database.commit_workload(w.mod) for i, w in workloads.items()}
    report.workloads = len(committed)
    for index, lineno, record in _records(work_dir, workloads, report):
        problem = trace_problem(plain(record.trace.as_json()))
        if problem is not None:
            raise TranstuneError(f"{work_dir}: {RECORDS} line {lineno}: {problem}")
        database.commit_tuning_record(
            ms.database.TuningRecord(record.trace, committed[index], record.run_secs,
                                     record.target, record.args_info)
        )  # fmt: skip
        report.records += 1
    return database, report


def _workloads(work_dir: str | Path, report: ImportReport) -> dict:
    """Line index -> MetaSchedule ``Workload`` of a work dir; bad lines go to ``report``."""
    from tvm.s_tir import meta_schedule as ms

    path = Path(work_dir) / WORKLOADS
    if not path.is_file():
        raise TranstuneError(f"{work_dir} has no {WORKLOADS}: not a MetaSchedule work dir")
    out = {}
    for index, (lineno, text) in enumerate(_lines(path)):
        try:
            out[index] = ms.database.Workload.from_json(json.loads(text))
        except Exception as err:
            report.skipped.append((WORKLOADS, lineno, error_line(err, 200)))
    return out


def _records(work_dir: str | Path, workloads: dict, report: ImportReport):
    """(workload line index, line number, ``TuningRecord``) of each good record line; bad lines
    go to ``report``."""
    from tvm.s_tir import meta_schedule as ms

    path = Path(work_dir) / RECORDS
    for lineno, text in _lines(path) if path.is_file() else []:
        try:
            index, record_json = json.loads(text)
            if index not in workloads:
                raise ValueError(f"refers to workload line {index + 1}, which is missing or bad")
            record = ms.database.TuningRecord.from_json(record_json, workloads[index])
            if record.target is None:
                raise ValueError("record has no target")
        except Exception as err:
            report.skipped.append((RECORDS, lineno, error_line(err, 200)))
            continue
        yield index, lineno, record


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
