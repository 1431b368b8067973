"""The pieces plugged into MetaSchedule's task scheduler: a search strategy with per-kernel
budgets and a stop signal, and the measure callback that counts batches, records the curves
and enforces the budgets; and stock MetaSchedule (:func:`stock_tune`), run as TVM ships it,
for the benchmarks that compare against it."""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..library.database import trace_key
from .state import Convergence, Flattening, KernelState, estimate_latency

SEARCH_AGAIN = 4  # times a batch of only stored schedules is searched again


@derived_object
class BudgetedSearch(ms.search_strategy.PySearchStrategy):
    """Wraps a search strategy with a per-kernel trial cap and a stop signal.

    MetaSchedule has one trial cap for all tasks and no time budget; this caps each kernel at
    what its budget has left (so resumed kernels continue where they stopped) and ends the
    search cleanly, the way a finished strategy does, once ``should_stop()`` is true.

    It also drops candidates whose trace is in ``measured`` (the records the database held
    before this session, as :func:`~transtune.library.database.trace_key` gives them):
    MetaSchedule's evolutionary search remembers only what it measured itself, so a resumed
    or transfer-seeded search would time the database's best schedules, which it puts in its
    population, once more.
    """

    def __init__(
        self,
        inner,
        max_trials: int,
        should_stop: Callable[[], bool],
        on_generate: Callable[[], None] | None = None,
        measured: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.inner = inner
        self.max_trials = max_trials
        self.should_stop = should_stop
        self.on_generate = on_generate  # told before this task's batch is built and run
        self.measured = measured

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
        for attempt in range(SEARCH_AGAIN + 1):
            if self.should_stop():
                return None
            candidates = self.inner.generate_measure_candidates()
            if candidates is None:
                return None
            batch = list(candidates)
            if self.measured:
                fresh = [c for c in batch if trace_key(c.sch.trace) not in self.measured]
                if not fresh and attempt < SEARCH_AGAIN:  # only known schedules: search again
                    continue
                batch = fresh or batch  # still only known ones: measure them after all
            break
        if self.on_generate is not None:
            self.on_generate()
        return batch

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self):
        return BudgetedSearch(
            self.inner.clone(), self.max_trials, self.should_stop, self.on_generate,
            self.measured,
        )  # fmt: skip


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

    def __init__(self, library, run_id, states, max_new, on_update, until=None, run_on=None):
        self.library = library
        self.run_id = run_id
        self.states = states  # every kernel of the model
        self.task_states: list[KernelState] = []  # the kernels being tuned, by task id
        self.max_new = max_new
        self.until: Convergence | None = until
        self.run_on: Flattening | None = run_on
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
            elif (self.deadline is not None and time.perf_counter() >= self.deadline
                  and not self.falling()):  # fmt: skip
                self.stop_reason = "time"
        if self.on_update is not None:
            self.on_update(self)

    def falling(self) -> bool:
        """Whether the ``run_on`` rule keeps the session going past its deadline."""
        rule = self.run_on
        return (
            rule is not None and self.elapsed() < rule.max_seconds and not rule.reached(self.curve)
        )

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


def search_kernels(
    tuner: _Tuner,
    states: list[KernelState],
    config,
    database,
    builder,
    runner,
    per_kernel: int | None,
    remaining: int | None,
    num_trials_per_iter: int,
    seed: int,
    cost_model,
    search: dict | None,
) -> None:
    """Run MetaSchedule's gradient task scheduler over ``states``' kernels (largest share
    first, as given), each with a :class:`BudgetedSearch` of evolutionary search, committing
    into ``database`` and reporting to ``tuner``. Ctrl-C ends the search after the batch in
    hand; only the main thread can catch it."""
    tasks, weights = [], []
    big = 10**9
    rand_states = ms.utils.fork_seed(seed, n=len(states))
    for task_id, (state, rand_state) in enumerate(zip(states, rand_states, strict=True)):
        k = state.kernel
        cap = big if per_kernel is None else per_kernel - state.trials
        strategy = BudgetedSearch(
            ms.search_strategy.SearchStrategy.create("evolutionary", **(search or {})), cap,
            functools.partial(tuner.task_done, task_id),
            functools.partial(tuner.set_task, task_id),
            frozenset(database.measured_traces(state.workload_id)),
        )  # fmt: skip
        context = ms.TuneContext(
            mod=k.mod, target=config.tvm_target(), space_generator="post-order-apply",
            search_strategy=strategy, task_name=k.name, rand_state=rand_state,
            num_threads=config.num_threads,
        )  # fmt: skip
        tasks.append(context.clone())
        weights.append(float(k.weight))
    tuner.task_states = states
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _Progress(tuner)]
    model_cost = (
        ms.cost_model.CostModel.create(cost_model, num_tuning_cores=config.num_threads)
        if isinstance(cost_model, str)
        else cost_model
    )
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


def stock_tune(
    kernels: list,
    config,
    work_dir: str,
    per_kernel: int,
    num_trials_per_iter: int,
    runner,
    seed: int | None = None,
    strategy: str = "evolutionary",
    cost_model: str = "xgb",
):
    """Stock ``ms.tune_tasks`` over ``kernels`` (weighted by their weights) into a JSON
    database in ``work_dir``, ``per_kernel`` trials each; returns the database. Task random
    states: forked from ``seed``, or the kernel's index when None."""
    n = len(kernels)
    states = ms.utils.fork_seed(seed, n=n) if seed is not None else list(range(n))
    tasks = [
        ms.TuneContext(
            mod=k.mod, target=config.tvm_target(), space_generator="post-order-apply",
            search_strategy=strategy, task_name=k.name, rand_state=rs,
            num_threads=config.num_threads,
        ).clone()
        for k, rs in zip(kernels, states, strict=True)
    ]  # fmt: skip
    return ms.tune_tasks(
        tasks=tasks, task_weights=[float(k.weight) for k in kernels], work_dir=work_dir,
        max_trials_global=per_kernel * n, max_trials_per_task=per_kernel,
        num_trials_per_iter=num_trials_per_iter, cost_model=cost_model, runner=runner,
    )  # fmt: skip
