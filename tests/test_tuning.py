"""Tuning into the library: budgets, curve, resume after SIGKILL, compile from the library."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from transtune.compile import compile_model
from transtune.library import LibraryError, open_library
from transtune.library.database import LibraryDatabase
from transtune.measure import FLUSH_EVALUATOR, SyncRunner, local_runner
from transtune.targets import get_config
from transtune.tuning import Convergence, Flattening, tail_cut, tune, tune_kernels

TINY = textwrap.dedent(
    """
    import torch
    from transtune.frontend import from_module
    torch.manual_seed(0)
    MODEL = from_module(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval(),
                        (torch.randn(16, 64),), name="tiny_mlp")
    """
)


def tiny_mlp():
    scope: dict = {}
    exec(TINY, scope)
    return scope["MODEL"]


def test_tune_records_every_candidate_and_a_falling_curve(tmp_path):
    model = tiny_mlp()
    with open_library(tmp_path / "lib.db") as lib:
        result = tune(model, lib, "host", trials=16, num_trials_per_iter=8)
        assert result.new_trials == 16
        assert lib.count_records() == 16  # failures included
        trials = [t for t, _, _ in result.curve]
        assert trials[0] == 0 and trials[-1] == 16 and trials == sorted(set(trials))
        seconds = [s for _, s, _ in result.curve]
        assert seconds == sorted(seconds)  # points come as batches are measured, in order
        latencies = [lat for _, _, lat in result.curve]
        assert latencies == sorted(latencies, reverse=True)  # best-so-far never rises
        assert result.estimated_latency < result.untuned_latency / 2
        assert lib.curve(result.run_id) == result.curve
        # The tuned schedules compile into the model and keep its numerics.
        database = LibraryDatabase(lib, get_config("host"))
        compiled = compile_model(model, "host", database)
        assert compiled.missing_records == [] and compiled.applied_records
        expected = model.torch_module(*model.torch_inputs()).detach().numpy()
        np.testing.assert_allclose(compiled.run(model.inputs)[0], expected, rtol=1e-4, atol=1e-5)
        # The budget is met: a second call has nothing left to do.
        again = tune(model, lib, "host", trials=16, num_trials_per_iter=8)
        assert again.new_trials == 0 and again.stopped == "done"


def test_a_given_runner_times_the_candidates_and_keeps_its_own_listeners(tmp_path):
    # The ceiling's evaluator lever: candidates timed cold (caches flushed before each run).
    batches = []
    runner = SyncRunner(local_runner(FLUSH_EVALUATOR), [batches.append])
    with open_library(tmp_path / "lib.db") as lib:
        result = tune(tiny_mlp(), lib, "host", trials=8, num_trials_per_iter=8, runner=runner)
        assert result.new_trials == 8 and result.curve[-1][0] == 8
        assert sum(map(len, batches)) == 1 + 8  # the untuned build, then the candidates
        assert runner.listeners == [batches.append]  # the tuning's own listener is gone
        runs = [r.run_secs for r in lib.records(result.kernels[0].workload_id, ok_only=True)]
        assert runs and all(len(r) == FLUSH_EVALUATOR.repeat for r in runs)


def test_the_kernel_with_the_largest_share_is_tuned_first(tmp_path):
    torch = pytest.importorskip("torch")
    from transtune.frontend import from_module

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2)
    ).eval()  # the first layer has 32x the second's work
    model = from_module(module, (torch.randn(16, 64),), name="wide_mlp")
    with open_library(tmp_path / "lib.db") as lib:
        result = tune(model, lib, "host", trials=8, num_trials_per_iter=8)
    shares = [s.kernel.weight * s.untuned_secs for s in result.kernels]
    assert len(shares) == 2 and shares[1] > 3 * shares[0]  # extracted second, but biggest
    assert [s.trials for s in result.kernels] == [0, 8]  # one batch: it went to the biggest


def test_sigkill_mid_tuning_then_resume_loses_nothing(tmp_path):
    url = f"sqlite:///{tmp_path}/lib.db"
    script = TINY + textwrap.dedent(
        f"""
        from transtune.library import LibraryError, open_library
        from transtune.tuning import tune
        with open_library({url!r}) as lib:
            tune(MODEL, lib, "host", trials=400, num_trials_per_iter=8)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    seen: list[int] = []
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if os.path.exists(tmp_path / "lib.db"):
                with open_library(url) as lib:
                    seen = [r.id for r in lib.records()]
                if len(seen) >= 16:
                    break
        assert proc.poll() is None, "tuning ended before it could be killed"
        with open_library(url) as lib, pytest.raises(LibraryError, match="being run by process"):
            tune(tiny_mlp(), lib, "host", trials=8)  # the same model's run, meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert len(seen) >= 16
    with open_library(url) as lib:
        assert lib._query("PRAGMA integrity_check") == [("ok",)]
        kept = {r.id for r in lib.records()}
        assert set(seen) <= kept
        # The curve counts no trial the library lacks (it is written after the records).
        assert lib._query("SELECT MAX(trials) FROM curve")[0][0] <= len(kept)
        budget = len(kept) + 8
        result = tune(tiny_mlp(), lib, "host", trials=budget, num_trials_per_iter=8)
        assert result.new_trials == 8
        assert lib.count_records() == budget
        assert set(seen) <= {r.id for r in lib.records()}


@pytest.mark.slow  # about 70 s (make test-slow)
def test_a_resumed_search_never_times_a_stored_schedule_again(tmp_path):
    # MetaSchedule's evolutionary search seeds its population with the database's best
    # schedules but remembers only what it measured itself; a model that scores those best,
    # as a pre-trained one does, would get them timed a second time.
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from transtune.library.database import trace_key

    @derived_object
    class FavoursStored(ms.cost_model.PyCostModel):
        def __init__(self, stored: set[str]) -> None:
            super().__init__()
            self.stored, self.offered = stored, 0

        def load(self, path: str) -> None:
            pass

        def save(self, path: str) -> None:
            pass

        def update(self, context, candidates, results) -> None:
            pass

        def predict(self, context, candidates) -> np.ndarray:
            known = [trace_key(c.sch.trace) in self.stored for c in candidates]
            self.offered += sum(known)
            return np.asarray(known, dtype="float64")

    model = tiny_mlp()
    with open_library(tmp_path / "lib.db") as lib:
        tune(model, lib, "host", trials=16, num_trials_per_iter=8)
        stored = {json.dumps(r.trace) for r in lib.records()}
        favours = FavoursStored(stored)
        result = tune(model, lib, "host", trials=32, num_trials_per_iter=8, cost_model=favours)
        traces = [json.dumps(r.trace) for r in lib.records()]
    assert favours.offered > 0  # the stored schedules were in the search, scored best
    assert result.new_trials == 16 and len(traces) == 32
    assert len(set(traces)) == 32  # and none of them was timed again


def test_flattening_rule_reads_the_last_quarter_of_the_model_curve():
    rule = Flattening(max_seconds=100)  # the last quarter of the time cutting under 2%
    curve = [(0, 0.0, 10.0), (8, 10.0, 5.0), (16, 30.0, 4.0), (24, 60.0, 3.95)]
    points = [(s, lat) for _, s, lat in curve]
    assert tail_cut(points) == pytest.approx(0.05 / 4.0)  # since 45 s: from 4.0 at 30 s
    assert tail_cut(points[1:], tail=0.9) is None and tail_cut([]) is None  # nothing before
    assert rule.reached(curve)
    assert not rule.reached(curve[:-1])  # since 22.5 s: from 5.0 to 4.0
    assert not rule.reached([])


def test_time_budget_stops_tuning_and_a_falling_curve_runs_it_on(tmp_path):
    with open_library(tmp_path / "lib.db") as lib:
        first = tune(tiny_mlp(), lib, "host", num_trials_per_iter=8, time_budget=1.0)
        assert first.stopped == "time" and 8 <= first.new_trials <= 16
        # Never flat (no cut is below 0%): the resumed session goes on past its budget to
        # its cap (seconds in all, the first session's included), a batch at least beyond.
        never = Flattening(max_seconds=2.5 * first.curve[-1][1], tolerance=0.0)
        more = tune(tiny_mlp(), lib, "host", num_trials_per_iter=8, time_budget=1.0,
                    run_on=never)  # fmt: skip
        assert more.stopped == "time" and more.new_trials >= 16
        assert more.curve[-1][1] >= never.max_seconds


def test_convergence_rule_reads_the_last_quarter_of_a_kernel_curve():
    rule = Convergence()  # 256 trials at least; the last quarter improving by under 2%
    flat = [(32 * i, 1.0 if i < 4 else 0.9) for i in range(1, 9)]  # flat since trial 128
    assert rule.reached(flat)
    assert not rule.reached(flat[:-1])  # 224 trials: too few
    falling = [*flat[:-1], (256, 0.87)]  # 3.3% better than at trial 192
    assert not rule.reached(falling)
    assert rule.reached([*falling, (288, 0.87), (320, 0.87), (352, 0.866)])  # 0.5% since 264
    assert not rule.reached([])
    # How many more candidates at least, if none improves the best again:
    assert rule.trials_left(flat) == 0
    assert rule.trials_left(flat[:-1]) == 32  # flat since 128: the 256 minimum is what is left
    assert rule.trials_left(falling) == 342 - 256  # 0.87 since 256, a last quarter from 342
    assert rule.trials_left(falling, cap=300) == 44 and rule.trials_left([]) == 256


@pytest.mark.slow  # about 55 s; the rule itself is tested just above
def test_tune_until_converged_stops_each_kernel_and_resumes_compacted(tmp_path):
    model = tiny_mlp()
    with open_library(tmp_path / "lib.db") as lib:
        # A per-kernel cap below the trial budget ends the run, and a rerun resumes from it.
        plain = tune(model, lib, "host", trials=64, per_kernel=8, num_trials_per_iter=8)
        assert (plain.stopped, plain.new_trials) == ("budget", 8)
        # Never converges (no improvement is below 0%): the per-kernel cap ends it.
        strict = Convergence(min_trials=8, tail=0.5, tolerance=0.0)
        capped = tune(model, lib, "host", per_kernel=16, num_trials_per_iter=8, until=strict)
        assert (capped.stopped, capped.new_trials) == ("budget", 8)
        # Always converged once 24 trials are in (no change can reach 100%).
        loose = Convergence(min_trials=24, tail=0.5, tolerance=1.0)
        result = tune(model, lib, "host", per_kernel=64, num_trials_per_iter=8, until=loose)
        assert (result.stopped, result.new_trials) == ("converged", 8)
        (state,) = result.kernels
        curves = lib.kernel_curves(result.run_id)
        assert [t for t, _ in curves[state.workload_id]] == [8, 16, 24]
        assert curves[state.workload_id][-1][1] == state.best_secs
        # Compacted to the best record, the library still knows the kernel has converged.
        assert lib.compact(1) == 23 and lib.count_records() == 1
        again = tune(model, lib, "host", per_kernel=64, num_trials_per_iter=8, until=loose)
        assert (again.stopped, again.new_trials, again.kernels[0].trials) == ("done", 0, 24)


@pytest.mark.slow  # about 20 s (make test-slow)
def test_tuning_from_a_worker_thread(tmp_path):
    import threading

    model, done = tiny_mlp(), {}

    def work() -> None:
        with open_library(tmp_path / "lib.db") as lib:
            done["result"] = tune(model, lib, "host", trials=8, num_trials_per_iter=8)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=300)
    assert done["result"].new_trials == 8 and done["result"].stopped == "budget"


def test_tune_needs_a_budget(tmp_path):
    with open_library(tmp_path / "lib.db") as lib, pytest.raises(ValueError, match="budget"):
        tune(tiny_mlp(), lib, "host")


def test_prepacked_weights_tune_store_and_compile_with_the_numerics(tmp_path, tiny_conv):
    import json

    from transtune.frontend import from_module
    from transtune.library import target_key
    from transtune.tasks import extract_kernels

    module, (x,) = tiny_conv
    model = from_module(module, (x,), name="tiny")
    config = get_config("host", "nhwc", prepack=True)
    assert json.loads(target_key(config))["prepack"] is True
    kernels = extract_kernels(model.mod, config)
    convs = [k for k in kernels if k.kernel_class.startswith("conv2d")]  # classes survive
    assert len(convs) == 2 and all("layout_free_buffers" in k.mod.script() for k in convs)
    with open_library(tmp_path / "lib.db") as lib:
        tune_kernels(convs, lib, config, "tiny", trials=16, per_kernel=8, num_trials_per_iter=8)
        # Traces that rewrite a weight's layout are stored (their index map as TVM's JSON),
        # pass the allowlist, and compile with the weights repacked once, into constants.
        rewrites = [r for r in lib.records(target=config, ok_only=True)
                    if any(i[0] == "TransformLayout" for i in r.trace[0])]  # fmt: skip
        assert rewrites
        compiled = compile_model(model, config, LibraryDatabase(lib, config))
        assert not [k for k in compiled.missing_records if k.startswith("fused_conv2d")]
        np.testing.assert_allclose(compiled.run(model.inputs)[0], module(x).detach().numpy(),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        # Transferred onto another batch size: the donors' schedules repack its weights too,
        # pass the numerics check on the same inputs as the naive kernel, and are timed.
        import torch

        from transtune.transfer import transfer_tune

        bigger = from_module(module, (torch.randn(2, 3, 16, 16),), name="tiny_b2")
        result = transfer_tune(bigger, lib, config, sample=0, anchor=False)
        won = [k for k in result.kernels if k.kernel.kernel_class.startswith("conv2d")]
        assert all(k.tried and k.wrong == k.failed == 0 for k in won), [
            (k.kernel.name, k.stage, k.errors) for k in won
        ]
        assert any(k.stage == "transfer" and k.best_secs < k.untuned_secs for k in won)
