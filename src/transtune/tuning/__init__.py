"""Resumable MetaSchedule tuning of a whole model into the schedule library.

``tune`` extracts the model's kernels, registers them in the library, and runs MetaSchedule's
task scheduler (evolutionary search, XGBoost cost model by default) with
:class:`~transtune.library.database.LibraryDatabase` as its database, so every measured
candidate is committed as it is measured. Budgets are per model and include what the library
already holds: running again continues where the last run stopped.

Candidates are measured by a synchronous local runner unless another runner is given (an RPC
runner measures elsewhere, asynchronously): nothing is built while a batch is being timed.

Kernels are handed to MetaSchedule's gradient task scheduler largest share of the estimated
latency first (weight x best latency so far): its first round gives every kernel one batch in
task order, so under a time budget the kernels that matter most are not left for last.

The tuning curve (estimated end-to-end latency = sum over kernels of weight x best measured
latency, against wall time and trials) is recorded after every measured batch, and so is each
kernel's own (trials, best latency) curve. Kernels not measured yet count with their untuned
latency, measured once at the start.

With ``until=Convergence()`` each kernel is tuned until its own curve flattens (the converged
reference of the transfer issue): its search ends once it has at least 256 measured candidates
and the last quarter of them improved its best by less than 2%. Kernel curves survive
:meth:`~transtune.library.Library.compact`, so a compacted library resumes with its counts.
With ``run_on=Flattening(max_seconds)`` a session given a time budget goes on past it while
the model's curve still falls (its last quarter of time cut the estimate by 2% or more).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..frontend import ImportedModel
from ..library import FAILED_SECONDS, Library, target_key
from ..library.database import LibraryDatabase
from ..measure import (
    EVALUATOR,
    SyncRunner,
    load_cpu_tensor_intrinsics,
    local_runner,
    measure_modules,
    warm_builder,
)
from ..targets import TargetConfig, get_config
from ..tasks import Kernel, extract_kernels
from .session import BudgetedSearch, _Tuner, search_kernels
from .state import (
    Convergence,
    Flattening,
    KernelState,
    TuneResult,
    estimate_latency,
    tail_cut,
)

GUIDED_SEARCH = {"population_size": 128}
"""Evolutionary search options for a pre-trained cost model (``LearnedCostModel``): a quarter
of MetaSchedule's population of 512. Scoring a candidate costs it about 1.5 ms (features and
trace tokens), and the search scores its whole population five times a round: on MobileNetV2's
largest kernel a round of 16 took 16 s at 512 and 7-8 s at 128, of which about 6 s is building
and timing. A model that already ranks well needs less exploration per round
(``benchmarks/guided.py``)."""


def measure_untuned(kernels: list[Kernel], target, builder, runner) -> list[float]:
    """Seconds per run of each kernel as TVM builds it with no schedule."""
    out = []
    for k, m in zip(kernels, measure_modules([k.mod for k in kernels], target, builder, runner),
                    strict=True):  # fmt: skip
        if m.seconds is None:
            raise RuntimeError(f"untuned kernel {k.name}: {m.error}")
        out.append(m.seconds)
    return out


def tune(
    model: ImportedModel, library: Library, config: TargetConfig | str | None = None, **options
) -> TuneResult:
    """Tune every kernel of ``model`` into ``library`` (options: see :func:`tune_kernels`)."""
    if not isinstance(config, TargetConfig):
        config = get_config(config)
    kernels = extract_kernels(model.mod, config)
    return tune_kernels(kernels, library, config, model.name, **options)


def tune_kernels(
    kernels: list[Kernel],
    library: Library,
    config: TargetConfig,
    name: str,
    trials: int | None = None,
    per_kernel: int | None = None,
    time_budget: float | None = None,
    num_trials_per_iter: int = 32,
    seed: int = 0,
    cost_model: Any = "xgb",  # a MetaSchedule cost model name, or a CostModel
    search: dict | None = None,
    on_update: Callable | None = None,
    builder=None,
    runner=None,
    device: dict | None = None,
    until: Convergence | None = None,
    run_on: Flattening | None = None,
) -> TuneResult:
    """Tune ``kernels`` (of the model ``name``) into ``library``; see the module docstring.

    ``trials``: total measured candidates for these kernels (library included);
    ``per_kernel``: cap per kernel (default: ``trials``); ``time_budget``: seconds for this
    session. At least one of ``trials`` and ``time_budget`` must be given. ``cost_model``: a
    MetaSchedule cost model name or object (e.g. a
    :class:`~transtune.costmodel.metaschedule.LearnedCostModel`). ``search``: options of
    MetaSchedule's evolutionary search (e.g. :data:`GUIDED_SEARCH`). ``device``: the measuring
    device's hardware descriptor (``HardwareDescriptor.as_dict()``), kept with the run.
    ``until``: tune each kernel until it converges (``per_kernel`` then caps it).
    ``run_on``: with ``time_budget``, go on past it until the model's curve has flattened.
    """
    if trials is None and time_budget is None and until is None:
        raise ValueError("give a trial budget, a time budget, a convergence rule, or several")
    target = config.tvm_target()
    key = target_key(config)
    run_id = f"tune:{name}:{config.name}"
    library.start_run(
        run_id, "tune", name, key,
        {"trials": trials, "per_kernel": per_kernel, "seed": seed,
         "cost_model": cost_model if isinstance(cost_model, str) else type(cost_model).__name__,
         "search": search, "device": device,
         "until": None if until is None else until.__dict__,
         "run_on": None if run_on is None else run_on.__dict__},
    )  # fmt: skip
    if runner is None:
        runner = SyncRunner(local_runner(EVALUATOR, num_threads=config.num_threads))
    # Told of each batch as soon as our synchronous runner has timed it (another runner's
    # batches are counted when MetaSchedule joins them).
    listeners: list[Callable] = runner.listeners if isinstance(runner, SyncRunner) else []
    on_measured = None
    library.claim_run(run_id)  # a second tune of this model here is refused meanwhile
    try:
        with warm_builder(builder, config.num_threads) as builder:
            states: list[KernelState] = []
            curves = library.kernel_curves(run_id)
            for k in kernels:
                wid = library.add_workload(k.mod, k.kernel_class, k.flops, name, k.name, k.weight)
                best = library.records(wid, key, top_k=1, ok_only=True)
                curve = curves.get(wid, [])
                count = max(library.count_records(wid, key), curve[-1][0] if curve else 0)
                states.append(
                    KernelState(k, wid, float("nan"), best[0].mean_secs if best else FAILED_SECONDS,
                                count, curve)
                )  # fmt: skip
            for state, secs in zip(
                states, measure_untuned(kernels, target, builder, runner), strict=True
            ):
                state.untuned_secs = secs
                state.best_secs = min(state.best_secs, secs)

            done_trials = sum(s.trials for s in states)
            per_kernel = per_kernel if per_kernel is not None else trials
            remaining = None if trials is None else max(0, trials - done_trials)
            tuner = _Tuner(library, run_id, states, remaining, on_update, until, run_on)
            todo = [
                i
                for i, s in enumerate(states)
                if (per_kernel is None or s.trials < per_kernel) and not tuner.converged(s)
            ]
            todo.sort(key=lambda i: -states[i].kernel.weight * states[i].best_secs)
            on_measured = tuner.on_measured
            listeners.append(on_measured)  # removed again below: a runner may be reused
            result = TuneResult(name, config.name, run_id, states, tuner.curve)
            if not todo or remaining == 0:
                result.stopped = "done"
                return result

            load_cpu_tensor_intrinsics()
            if time_budget is not None:
                tuner.deadline = time.perf_counter() + time_budget
            database = LibraryDatabase(library, config, "tuned", run_id)
            search_kernels(
                tuner, [states[i] for i in todo], config, database, builder, runner, per_kernel,
                remaining, num_trials_per_iter, seed, cost_model, search,
            )  # fmt: skip
            library.finish_run(run_id)
            result.new_trials = tuner.new_trials
            result.failures = tuner.failures
            result.seconds = time.perf_counter() - tuner.start
            converged = until is not None and all(tuner.converged(s) for s in states)
            result.stopped = tuner.stop_reason or ("converged" if converged else "budget")
            return result
    finally:
        if on_measured in listeners:
            listeners.remove(on_measured)
        library.release_run(run_id)


__all__ = [
    "GUIDED_SEARCH",
    "BudgetedSearch",
    "Convergence",
    "Flattening",
    "KernelState",
    "TuneResult",
    "estimate_latency",
    "measure_untuned",
    "tail_cut",
    "tune",
    "tune_kernels",
]
