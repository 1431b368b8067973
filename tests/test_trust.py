"""Traces from elsewhere: an annotation that makes TVM link foreign code is refused wherever a
trace enters (import, merge, replay, the database view MetaSchedule and compilation read)."""

import pytest
from test_library import matmul
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from transtune.errors import TranstuneError
from transtune.library import LibraryError, open_library, plain
from transtune.library.database import LibraryDatabase, import_json, open_json_database
from transtune.library.trust import UnsafeTrace, check_trace, trace_problem
from transtune.schedules import postprocessors, replay
from transtune.targets import get_config

EVIL_IR = "define void @evil() { ret void }"


def _schedule(evil: bool) -> Schedule:
    sch = Schedule(matmul(16))
    loop = sch.get_loops(sch.get_sblock("C"))[0]
    sch.parallel(loop)
    if evil:
        sch.annotate(loop, "pragma_import_llvm", EVIL_IR)
    return sch


def test_allowlist():
    check_trace(plain(_schedule(False).trace.as_json()))
    with pytest.raises(UnsafeTrace, match="'pragma_import_llvm' is not allowed"):
        check_trace(plain(_schedule(True).trace.as_json()))
    assert "not an allowed schedule primitive" in trace_problem([[["Exec", [], [], []]], []])
    assert trace_problem({"not": "a trace"}) is not None
    # A weight layout's index map may hold index arithmetic, never a call.
    call = '{"root_index": 1, "nodes": [{"type": "None"}, {"type": "prim.Call"}]}'
    assert "['prim.Call']" in trace_problem([[["TransformLayout", ["b0", call], [], []]], []])
    ok = '{"root_index": 1, "nodes": [{"type": "None"}, {"type": "tirx.IndexMap"}]}'
    assert trace_problem([[["TransformLayout", ["b0", ok], [], []]], []]) is None
    assert "not TVM's JSON" in trace_problem([[["TransformLayout", ["b0", "{bad"], [], []]], []])


def _work_dir(path, evil: tuple[bool, ...]):
    """A MetaSchedule JSON work dir with one matmul record per entry of ``evil``."""
    config = get_config("host")
    path.mkdir()
    database = ms.database.JSONDatabase(work_dir=str(path), allow_missing=True)
    workload = database.commit_workload(matmul(16))
    args = ms.arg_info.ArgInfo.from_prim_func(matmul(16)["main"])
    for bad in evil:
        record = ms.database.TuningRecord(
            _schedule(bad).trace, workload, [1e-3], config.tvm_target(), args
        )
        database.commit_tuning_record(record)
    return path


def test_unsafe_trace_is_refused_on_import(tmp_path):
    work_dir = _work_dir(tmp_path / "ms", (False, True))
    with open_library(tmp_path / "lib.db") as lib:
        report = import_json(lib, work_dir)
        assert report.records == 1 and len(report.skipped) == 1
        assert "pragma_import_llvm" in report.skipped[0][2]


def test_unsafe_trace_is_refused_on_merge_replay_and_read(tmp_path):
    config = get_config("host")
    evil = plain(_schedule(True).trace.as_json())
    with open_library(tmp_path / "a.db") as a, open_library(tmp_path / "b.db") as b:
        wid = a.add_workload(matmul(16), "matmul", model="m")
        a.add_record(wid, config, plain(_schedule(False).trace.as_json()), [2e-3])
        a.add_record(wid, config, evil, [1e-3])  # the fastest, as a lure
        with pytest.raises(LibraryError, match="pragma_import_llvm.*nothing merged"):
            b.merge(a)
        assert b.info()["records"] == 0
        view = LibraryDatabase(a, config)
        (best,) = view.get_top_k(ms.database.Workload(matmul(16)), 1)
        assert float(best.run_secs[0]) == pytest.approx(2e-3)  # the unsafe one is not seen
        assert len(view.get_all_tuning_records()) == 1
    result = replay(evil, matmul(16), postprocessors(matmul(16), config.tvm_target()))
    assert result.schedule is None and "unsafe trace" in result.error


def test_bench_database_skips_a_bad_line_and_refuses_an_unsafe_trace(tmp_path):
    work_dir = _work_dir(tmp_path / "ms", (False,))
    with open(work_dir / "database_tuning_record.json", "a") as f:
        f.write("[0, {not json\n")
    database, report = open_json_database(work_dir)
    assert report.records == 1 and [n for _, n, _ in report.skipped] == [2]
    (best,) = database.get_top_k(ms.database.Workload(matmul(16)), 1)
    assert float(best.run_secs[0]) == pytest.approx(1e-3)
    with pytest.raises(TranstuneError, match="line 2: .*pragma_import_llvm"):
        open_json_database(_work_dir(tmp_path / "evil", (False, True)))
