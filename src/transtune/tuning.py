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
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from .frontend import ImportedModel
from .library import FAILED_SECONDS, Library, target_key
from .library.database import LibraryDatabase
from .measure import (
    EVALUATOR,
    SyncRunner,
    load_cpu_tensor_intrinsics,
    local_runner,
    measure_modules,
    warm_builder,
)
from .targets import TargetConfig, get_config
from .tasks import Kernel, extract_kernels

GUIDED_SEARCH = {"population_size": 128}
"""Evolutionary search options for a pre-trained cost model (``LearnedCostModel``): a quarter
of MetaSchedule's population of 512. Scoring a candidate costs it about 1.5 ms (features and
trace tokens), and the search scores its whole population five times a round: on MobileNetV2's
largest kernel a round of 16 took 16 s at 512 and 7-8 s at 128, of which about 6 s is building
and timing. A model that already ranks well needs less exploration per round
(``benchmarks/guided.py``)."""


@dataclass(frozen=True)
class Convergence:
    """When a kernel's tuning has converged: at least ``min_trials`` measured candidates, and
    the last ``tail`` of them improved its best latency by less than ``tolerance``."""

    min_trials: int = 256
    tail: float = 0.25
    tolerance: float = 0.02

    def reached(self, curve: list[tuple[int, float]]) -> bool:
        """Whether a kernel's (trials, best seconds) curve, in order, has converged."""
        if not curve or curve[-1][0] < self.min_trials:
            return False
        trials, best = curve[-1]
        before = [b for t, b in curve if t <= trials * (1 - self.tail)]
        return bool(before) and (before[-1] - best) < self.tolerance * before[-1]


@dataclass
class KernelState:
    """Tuning progress of one kernel."""

    kernel: Kernel
    workload_id: int
    untuned_secs: float
    best_secs: float
    trials: int  # measured candidates in the library, this target, all runs
    curve: list[tuple[int, float]] = field(default_factory=list)  # (trials, best) of this run

    @property
    def speedup(self) -> float:
        return self.untuned_secs / self.best_secs if self.best_secs > 0 else float("nan")


@dataclass
class TuneResult:
    """What ``tune`` did: per-kernel states, the curve and the run's totals."""

    model: str
    config: str
    run_id: str
    kernels: list[KernelState]
    curve: list[tuple[int, float, float]]  # (trials, seconds, estimated latency)
    new_trials: int = 0
    seconds: float = 0.0
    stopped: str = "budget"  # "budget", "time", "interrupted", "converged" or "done"
    failures: int = 0

    @property
    def estimated_latency(self) -> float:
        return estimate_latency(self.kernels)

    @property
    def untuned_latency(self) -> float:
        return estimate_latency(self.kernels, "untuned_secs")


def estimate_latency(states: list, field: str = "best_secs") -> float:
    """End-to-end latency estimate: sum over kernels of weight x seconds (``best_secs``)."""
    return sum(s.kernel.weight * getattr(s, field) for s in states)


@derived_object
class BudgetedSearch(ms.search_strategy.PySearchStrategy):
    """Wraps a search strategy with a per-kernel trial cap and a stop signal.

    MetaSchedule has one trial cap for all tasks and no time budget; this caps each kernel at
    what its budget has left (so resumed kernels continue where they stopped) and ends the
    search cleanly, the way a finished strategy does, once ``should_stop()`` is true.
    """

    def __init__(
        self,
        inner,
        max_trials: int,
        should_stop: Callable[[], bool],
        on_generate: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.max_trials = max_trials
        self.should_stop = should_stop
        self.on_generate = on_generate  # told before this task's batch is built and run

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database, cost_model):
        self.inner.pre_tuning(
            min(max_trials, self.max_trials), num_trials_per_iter, design_spaces, database,
            cost_model,
        )  # fmt: skip

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        if self.should_stop():
            return None
        candidates = self.inner.generate_measure_candidates()
        if candidates is not None and self.on_generate is not None:
            self.on_generate()
        return candidates

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return BudgetedSearch(
            self.inner.clone(), self.max_trials, self.should_stop, self.on_generate
        )


@derived_object
class _Progress(ms.measure_callback.PyMeasureCallback):
    """Tracks best latency per task, records curve points, enforces budgets and stops."""

    def __init__(self, tuner: _Tuner) -> None:
        super().__init__()
        self.tuner = tuner

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        self.tuner.on_batch(task_id, builder_results, runner_results)


class _Tuner:
    """State of one tuning session (see :func:`tune`)."""

    def __init__(self, library, run_id, states, max_new, on_update, until=None):
        self.library = library
        self.run_id = run_id
        self.states = states  # every kernel of the model
        self.task_states: list[KernelState] = []  # the kernels being tuned, by task id
        self.max_new = max_new
        self.until: Convergence | None = until
        self.deadline: float | None = None
        self.on_update = on_update
        self.new_trials = 0
        self.failures = 0
        self.stop_reason: str | None = None
        self.task = 0  # the task whose batch is being measured
        self.live = False  # batches are counted when measured (see on_measured)
        # Points reach the library only once their batch's records are committed (see flush).
        self.pending: list[tuple[int | None, int, tuple, tuple]] = []
        self.measured: dict[int, int] = {}  # task -> batches counted when measured
        self.joined: dict[int, int] = {}  # task -> batches MetaSchedule has committed
        self.claimed = time.time()
        curve = library.curve(run_id)
        self.trials0 = curve[-1][0] if curve else sum(s.trials for s in states)
        self.seconds0 = curve[-1][1] if curve else 0.0
        self.start = time.perf_counter()
        self.curve = list(curve)
        if not curve:
            point = (self.trials0, 0.0, estimate_latency(states))
            library.add_curve_point(run_id, *point)
            self.curve.append(point)

    def elapsed(self) -> float:
        return self.seconds0 + time.perf_counter() - self.start

    def flush(self) -> None:
        """Write the curve points whose batches MetaSchedule has committed to the library, in
        order: after a kill the curve never counts trials the library lacks."""
        while self.pending:
            task, index, point, kernel_point = self.pending[0]
            if task is not None and index >= self.joined.get(task, 0):
                break
            self.pending.pop(0)
            self.library.add_kernel_point(self.run_id, *kernel_point)
            self.library.add_curve_point(self.run_id, *point)
        if time.time() - self.claimed > 60:
            self.claimed = time.time()
            self.library.claim_run(self.run_id)

    def set_task(self, task_id: int) -> None:
        self.task = task_id

    def on_measured(self, runner_results) -> None:
        """A batch of the current task, as soon as a synchronous runner has timed it (built
        candidates only): counted now, so the curve shows results when they are measured
        rather than when MetaSchedule's scheduler gets round to joining the task."""
        self.live = True
        index = self.measured.get(self.task, 0)
        self.measured[self.task] = index + 1
        self._count(self.task, [None] * len(runner_results), runner_results, index)

    def on_batch(self, task_id, builder_results, runner_results) -> None:
        """A batch joined (its records committed) by MetaSchedule; with a synchronous runner
        only its build failures are new here."""
        self.joined[task_id] = self.joined.get(task_id, 0) + 1
        if self.live:
            failed = [(b, r) for b, r in zip(builder_results, runner_results, strict=True)
                      if b.error_msg is not None]  # fmt: skip
            if failed:
                self._count(task_id, *map(list, zip(*failed, strict=True)))
        else:
            self._count(task_id, builder_results, runner_results)
        self.flush()

    def _count(self, task_id, builder_results, runner_results, index: int | None = None) -> None:
        """Count a batch of task ``task_id`` (its ``index``-th measured batch, or None: one
        committed already)."""
        state = self.task_states[task_id]
        for b, r in zip(builder_results, runner_results, strict=True):
            secs = [float(s) for s in r.run_secs] if r.run_secs is not None else []
            if (b is not None and b.error_msg is not None) or r.error_msg is not None or not secs:
                self.failures += 1
            else:
                state.best_secs = min(state.best_secs, sum(secs) / len(secs))
        state.trials += len(runner_results)
        self.new_trials += len(runner_results)
        state.curve.append((state.trials, state.best_secs))
        point = (self.trials0 + self.new_trials, self.elapsed(), estimate_latency(self.states))
        self.curve.append(point)
        kernel_point = (state.workload_id, state.trials, state.best_secs)
        self.pending.append((None if index is None else task_id, index or 0, point, kernel_point))
        if self.stop_reason is None:
            if self.max_new is not None and self.new_trials >= self.max_new:
                self.stop_reason = "budget"
            elif self.deadline is not None and time.perf_counter() >= self.deadline:
                self.stop_reason = "time"
        if self.on_update is not None:
            self.on_update(self)

    def should_stop(self) -> bool:
        return self.stop_reason is not None

    def task_done(self, task_id: int) -> bool:
        """Whether task ``task_id`` should measure no more: the session stops, or the kernel
        has converged."""
        return self.should_stop() or self.converged(self.task_states[task_id])

    def converged(self, state: KernelState) -> bool:
        return self.until is not None and self.until.reached(state.curve)

    def interrupt(self, *_):
        self.stop_reason = "interrupted"


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
    kernels = extract_kernels(model.mod, config.tvm_target())
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
    cost_model: str | ms.cost_model.CostModel = "xgb",
    search: dict | None = None,
    on_update: Callable | None = None,
    builder=None,
    runner=None,
    device: dict | None = None,
    until: Convergence | None = None,
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
         "until": None if until is None else until.__dict__},
    )  # fmt: skip
    listeners: list[Callable] = []  # told of each batch measured by our synchronous runner
    if runner is None:
        runner = SyncRunner(local_runner(EVALUATOR, num_threads=config.num_threads), listeners)
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
            tuner = _Tuner(library, run_id, states, remaining, on_update, until)
            todo = [
                i
                for i, s in enumerate(states)
                if (per_kernel is None or s.trials < per_kernel) and not tuner.converged(s)
            ]
            todo.sort(key=lambda i: -states[i].kernel.weight * states[i].best_secs)
            listeners.append(tuner.on_measured)
            result = TuneResult(name, config.name, run_id, states, tuner.curve)
            if not todo or remaining == 0:
                result.stopped = "done"
                return result

            load_cpu_tensor_intrinsics()
            tasks, weights = [], []
            rand_states = ms.utils.fork_seed(seed, n=len(todo))
            big = 10**9
            for task_id, (i, rand_state) in enumerate(zip(todo, rand_states, strict=True)):
                k = states[i].kernel
                cap = big if per_kernel is None else per_kernel - states[i].trials
                strategy = BudgetedSearch(
                    ms.search_strategy.SearchStrategy.create("evolutionary", **(search or {})), cap,
                    functools.partial(tuner.task_done, task_id),
                    functools.partial(tuner.set_task, task_id),
                )  # fmt: skip
                tasks.append(
                    ms.TuneContext(
                        mod=k.mod,
                        target=target,
                        space_generator="post-order-apply",
                        search_strategy=strategy,
                        task_name=k.name,
                        rand_state=rand_state,
                        num_threads=config.num_threads,
                    ).clone()
                )
                weights.append(float(k.weight))
            tuner.task_states = [states[i] for i in todo]
            if time_budget is not None:
                tuner.deadline = time.perf_counter() + time_budget
            database = LibraryDatabase(library, config, "tuned", run_id)
            callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _Progress(tuner)]
            model_cost = (
                ms.cost_model.CostModel.create(cost_model, num_tuning_cores=config.num_threads)
                if isinstance(cost_model, str)
                else cost_model
            )
            # Ctrl-C ends the search after the batch in hand; only the main thread can catch it.
            main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGINT, tuner.interrupt) if main else None
            try:
                ms.task_scheduler.TaskScheduler.create("gradient").tune(
                    tasks=tasks,
                    task_weights=weights,
                    max_trials_global=remaining if remaining is not None else big,
                    max_trials_per_task=per_kernel if per_kernel is not None else big,
                    num_trials_per_iter=num_trials_per_iter,
                    builder=builder,
                    runner=runner,
                    measure_callbacks=callbacks,
                    database=database,
                    cost_model=model_cost,
                )
            finally:
                if main:
                    signal.signal(signal.SIGINT, previous)
            library.finish_run(run_id)
            result.new_trials = tuner.new_trials
            result.failures = tuner.failures
            result.seconds = time.perf_counter() - tuner.start
            converged = until is not None and all(tuner.converged(s) for s in states)
            result.stopped = tuner.stop_reason or ("converged" if converged else "budget")
            return result
    finally:
        library.release_run(run_id)
