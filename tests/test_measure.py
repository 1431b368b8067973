"""Runners: the thread count of a target configuration reaches the measuring worker."""

import os
import sys

import cloudpickle

from transtune.measure import EVALUATOR, local_runner

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the worker cannot import tests


def _worker_threads() -> int:
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def test_runner_worker_uses_the_configurations_thread_count():
    cores = len(os.sched_getaffinity(0))
    for threads, expected in ((None, cores), (1, 1), (cores, cores)):
        runner = local_runner(EVALUATOR, num_threads=threads)
        assert runner.pool.submit(_worker_threads).result() == expected
