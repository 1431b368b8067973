"""MetaSchedule's databases, where they meet the schedule library (the only TVM import in
:mod:`transtune.library`).

:class:`LibraryDatabase` is a MetaSchedule ``PyDatabase`` over a library, bound to one target
(a :class:`~transtune.targets.TargetConfig`, so one hardware id; or a bare TVM target, which
matches records of unknown hardware only). MetaSchedule tunes straight into it (every
measured candidate is committed, failures with ``1e10`` s) and compilation reads from it.
Unlike TVM's ``JSONDatabase``, queries only see records of the bound target.

MetaSchedule ``JSONDatabase`` work dirs are imported and exported here too. A work dir holds
``database_workload.json`` (``[shash, base64 IRModule]`` per line) and
``database_tuning_record.json`` (``[workload_index, [trace, run_secs, target, args_info]]``
per line). Import never aborts on a bad line: corrupt or foreign lines are skipped and
reported with their line numbers. :class:`WorkDirWriter` writes one (the library's export and
the dataset's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..errors import TranstuneError, error_line
from ..schedules import trace_json
from ..tasks import arg_info_json
from .backend import LibraryError
from .store import Library, plain, target_key
from .trust import check_trace, trace_problem

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


@derived_object
class LibraryDatabase(ms.database.PyDatabase):
    """A view of ``library`` for one target; new records get ``provenance`` and ``run_id``.

    ``read``: only records of these provenances are visible to queries (e.g. ``("tuned",)``
    to compile a model with its fully tuned schedules only)."""

    def __init__(
        self,
        library: Library,
        target,
        provenance: str = "tuned",
        run_id: str | None = None,
        read: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__()
        self.library = library
        self.target = target
        self.target_key = target_key(target)
        self.provenance = provenance
        self.run_id = run_id
        self.read = read
        self.committed = 0

    def has_workload(self, mod) -> bool:
        return self.library.find_workload(mod) is not None

    def commit_workload(self, mod):
        self.library.add_workload(mod)
        return ms.database.Workload(mod)

    def commit_tuning_record(self, record) -> None:
        trace, run_secs, args_info = _record_json(record)
        workload_id = self.library.add_workload(record.workload.mod)
        self.library.add_record(
            workload_id,
            self.target,
            trace,
            list(run_secs) if run_secs is not None else [],
            args_info,
            provenance=self.provenance,
            run_id=self.run_id,
        )
        self.committed += 1

    def get_top_k(self, workload, top_k: int) -> list:
        workload_id = self.library.find_workload(workload.mod)
        if workload_id is None:
            return []
        # A few more than asked, so that unsafe traces skipped leave ``top_k`` (they are rare).
        records = self.library.records(
            workload_id, self.target_key, top_k + 8, ok_only=True, provenance=self.read
        )
        safe = [r for r in records if trace_problem(r.trace) is None][:top_k]
        return [ms.database.TuningRecord.from_json(r.as_json(), workload) for r in safe]

    def measured_traces(self, workload_id: int) -> set[str]:
        """The traces (as :func:`trace_key` gives them) of every visible record of
        ``workload_id`` on this target, failed ones included."""
        records = self.library.records(workload_id, self.target_key, provenance=self.read)
        return {json.dumps(r.trace) for r in records}

    def get_all_tuning_records(self) -> list:
        workloads: dict[int, object] = {}
        out = []
        for r in self.library.records(target=self.target_key, provenance=self.read):
            if trace_problem(r.trace) is not None:
                continue
            if r.workload_id not in workloads:
                workloads[r.workload_id] = ms.database.Workload(
                    self.library.workload_mod(r.workload_id)
                )
            out.append(ms.database.TuningRecord.from_json(r.as_json(), workloads[r.workload_id]))
        return out

    def __len__(self) -> int:
        return self.library.count_records(target=self.target_key)


def trace_key(trace) -> str:
    """A MetaSchedule trace as the text a record of it stores (equal for the same schedule)."""
    return json.dumps(trace_json(trace))


def _record_json(record) -> tuple[list, list[float], list]:
    """(trace, run seconds, argument info) of a MetaSchedule ``TuningRecord``, plain Python
    (its own ``as_json`` cannot convert a layout-rewriting trace's index map)."""
    run_secs = [float(s) for s in record.run_secs] if record.run_secs is not None else []
    args = [plain(a.as_json()) for a in record.args_info] if record.args_info else None
    return trace_json(record.trace), run_secs, args


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
            trace, run_secs, args_info = _record_json(record)
            check_trace(trace)
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
        problem = trace_problem(trace_json(record.trace))
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


class WorkDirWriter:
    """A new MetaSchedule JSON work dir at ``work_dir``, written one record at a time.

    Refuses a directory that holds a database already (MetaSchedule would append to it, and
    every record would then be there twice), with ``error`` (a :class:`TranstuneError` type).
    """

    def __init__(self, work_dir: str | Path, error: type[TranstuneError] = LibraryError) -> None:
        work_dir = Path(work_dir)
        held = [name for name in (WORKLOADS, RECORDS) if (work_dir / name).exists()]
        if held:
            raise error(f"{work_dir} holds a MetaSchedule database already ({held[0]}); "
                        "export into a new or empty directory")  # fmt: skip
        work_dir.mkdir(parents=True, exist_ok=True)
        self.database = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=True)
        self._workloads: dict[int, object] = {}  # id(mod) -> committed workload
        self.count = 0

    def add(self, mod, trace, run_secs: list[float], target) -> None:
        """Add a record of kernel ``mod``: ``trace`` (a ``Trace``, or its JSON), measured
        seconds, and the TVM target (a ``Target`` or a dict)."""
        from ..targets import make_target

        workload = self._workloads.get(id(mod))
        if workload is None:
            workload = self._workloads[id(mod)] = self.database.commit_workload(mod)
        target = make_target(target) if isinstance(target, dict) else target
        args = arg_info_json(mod)
        trace = trace_json(trace) if hasattr(trace, "as_json") else trace
        record = [trace, list(run_secs), target.export(), args]
        self.database.commit_tuning_record(ms.database.TuningRecord.from_json(record, workload))
        self.count += 1


def export_json(library: Library, work_dir: str | Path, target=None) -> int:
    """Write the library's records (of one target, or all) as a MetaSchedule work dir.

    Returns the number of records written.
    """
    writer = WorkDirWriter(work_dir)
    mods: dict[int, object] = {}
    for record in library.records(target=target):
        if record.workload_id not in mods:
            mods[record.workload_id] = library.workload_mod(record.workload_id)
        writer.add(mods[record.workload_id], record.trace, record.run_secs, record.target)
    return writer.count


def _lines(path: Path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                yield lineno, line
