"""Runners: the thread count of a target configuration reaches the measuring worker; the
synchronous runner has measured everything when it returns; the watchdog kills a worker that
stays silent and the next candidate is timed; a check after timing sees the fastest modules
first and stops at the first that passes."""

import os
import sys
import time

import cloudpickle
from tvm import te
from tvm.s_tir import meta_schedule as ms

from transtune.measure import (
    EVALUATOR,
    SyncRunner,
    WatchedRunner,
    local_runner,
    measure_modules,
    warm_builder,
)
from transtune.targets import get_config

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the worker cannot import tests


def _worker_threads() -> int:
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def test_runner_worker_uses_the_configurations_thread_count():
    cores = len(os.sched_getaffinity(0))
    for threads, expected in ((None, cores), (1, 1), (cores, cores)):
        runner = local_runner(EVALUATOR, num_threads=threads)
        assert runner.runner.pool.submit(_worker_threads).result() == expected


def test_sync_runner_returns_once_the_batch_is_measured():
    mod = ms.tune_context._normalize_mod(te.create_prim_func(_matmul(32)))
    target = get_config("host").tvm_target()
    with warm_builder() as builder:
        built = builder.build([ms.builder.BuilderInput(mod, target)] * 3)
        inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu",
                                        ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
                  for b in built]  # fmt: skip
        futures = SyncRunner(local_runner(EVALUATOR)).run(inputs)
        assert all(f.done() for f in futures)  # nothing left running when run() returns
        results = [f.result() for f in futures]
    assert all(r.error_msg is None and len(r.run_secs) == EVALUATOR.repeat for r in results)


def test_watchdog_kills_a_silent_worker_and_the_next_candidate_is_timed():
    mods = [
        ms.tune_context._normalize_mod(te.create_prim_func(f)) for f in (_endless(), _matmul(8))
    ]
    target = get_config("host").tvm_target()
    # The worker's own timer would answer after 600 s; the watchdog acts after 15 (which the
    # next candidate's fresh worker needs to start and import TVM).
    runner = WatchedRunner(ms.runner.LocalRunner(timeout_sec=600, evaluator_config=EVALUATOR),
                           limit=15)  # fmt: skip
    with warm_builder() as builder:
        built = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
        inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu",
                                        ms.arg_info.ArgInfo.from_prim_func(m["main"]))
                  for m, b in zip(mods, built, strict=True)]  # fmt: skip
        start = time.perf_counter()
        hung, timed = [f.result() for f in runner.run(inputs)]
    assert time.perf_counter() - start < 90
    assert "watchdog" in hung.error_msg and hung.run_secs is None
    assert timed.error_msg is None and len(timed.run_secs) == EVALUATOR.repeat


def test_check_after_timing_goes_fastest_first_and_stops_at_a_pass():
    mods = [ms.tune_context._normalize_mod(te.create_prim_func(_matmul(n))) for n in (96, 8, 48)]
    target, runner = get_config("host").tvm_target(), local_runner(EVALUATOR)
    seen = []

    def verdict(answer):
        return lambda mod, path: seen.append(mods.index(mod)) or answer

    with warm_builder() as builder:
        passed = measure_modules(mods, target, builder, runner, verdict(None), check_all=False)
        assert seen == [1] and all(m.status == "ok" for m in passed)  # 8x8: the fastest
        seen.clear()
        failed = measure_modules(mods, target, builder, runner, verdict("wrong"), check_all=False)
    assert seen == [1, 2, 0]  # every module, fastest first, as none passes
    assert all(m.status == "rejected" and m.seconds is None for m in failed)


def _matmul(n: int):
    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    r = te.reduce_axis((0, n), name="k")
    return [a, b, te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")]


def _endless():
    """A kernel that runs for hours: 2^40 dependent float additions."""
    a = te.placeholder((16,), name="A")
    i, j = te.reduce_axis((0, 1 << 20), name="i"), te.reduce_axis((0, 1 << 20), name="j")
    return [a, te.compute((1,), lambda _: te.sum(a[(i + j) % 16], axis=[i, j]), name="C")]
