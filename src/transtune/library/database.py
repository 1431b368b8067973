"""MetaSchedule ``PyDatabase`` over a schedule library, bound to one target (a
:class:`~transtune.targets.TargetConfig`, so one hardware id; or a bare TVM target, which
matches records of unknown hardware only).

MetaSchedule tunes straight into it (every measured candidate is committed, failures with
``1e10`` s) and compilation reads from it. Unlike TVM's ``JSONDatabase``, queries only see
records of the bound target.
"""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from .store import Library, target_key
from .trust import trace_problem


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
        trace, run_secs, _target, args_info = record.as_json()
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
