"""Transfer-tuning (Gibson & Cano, PACT 2022) on MetaSchedule: reuse tuned schedules.

For each kernel of a new model: the pool is the best record of every library kernel of the
same class (see :mod:`transtune.tasks` for classes) on the same target, or, if that target
has none, on other targets of the same kind (marked fallback). A donor policy
(:mod:`.policies`) picks a few per kernel; each is replayed on the kernel
(:mod:`transtune.schedules`), built in parallel and timed on its own; the fastest is checked
against the untuned kernel on random inputs (the next fastest if it is wrong, and so on: a
check compiles the kernel again, so only a would-be winner pays for one). The fastest correct
one wins if it beats the untuned kernel, and is committed to the library as ``transferred``
with its donor. A kernel that no donor schedule improves (a class the library lacks, say)
falls through the rest of the cascade, each stage measured the same way:

- ``anchor``: donors of *other* classes whose anchor block (see :mod:`transtune.schedules`)
  has the same name, e.g. a ``conv2d+add+relu`` schedule on a ``conv2d+add+add+relu``
  kernel, or a ``matmul+add`` one on an exporter's ``matmul+add+add``; committed as
  ``transferred``, the donor marked ``~anchor``;
- ``sampled``: ``sample`` programs drawn from the kernel's own design space, of which the cost
  model's best few (without a cost model: the first few; ``SAMPLES_MEASURED``, or
  ``measure_top`` if more) are timed; committed as ``sampled``. It runs after an anchor win
  too (a schedule traced for another class's shape is weak evidence: on the Zen 3, depthwise
  donors' schedules on ResNeXt-50's grouped convolutions measured up to 3x slower than its
  sampled programs), and wins if it measures faster; and after a win of a schedule tuned
  for another target (a fallback: on the Zen 3, the Zen 4's BERT matmul schedules measured
  about 2x slower than the best of the kernels' own sampled programs).

By default, a cost model trained on the measuring CPU lets only its ``MEASURE_TOP`` best
scored donor schedules of a kernel through to be measured; one that never saw this CPU ranks
them worse than measuring does (``docs/results/hardware.md``), so then every replayed
candidate is measured and the model only ranks the sampled stage (``measure_top`` overrides).

Each kernel reports the stage that won (``transfer``, ``anchor``, ``sampled``, or ``untuned``
when nothing beat TVM's default build, with the reasons in its errors). The model then
compiles with the winners.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..frontend import ImportedModel
from ..library import Library, plain, target_key
from ..machine import cpu_of
from ..measure import (
    EVALUATOR,
    NumericsCheck,
    load_cpu_tensor_intrinsics,
    local_runner,
    measure_modules,
    warm_builder,
)
from ..schedules import anchor_block, postprocessors, replay, replay_anchor, trace_json
from ..targets import TargetConfig, get_config
from ..tasks import Kernel, arg_info_json, extract_kernels
from ..tuning import estimate_latency, measure_untuned
from .policies import ANCHOR_MARK, DEFAULT_POLICY, Candidate, get_policy

RTOL = 1e-3  # a transferred kernel's outputs must be within RTOL x max|reference|
SAMPLES_MEASURED = 4  # sampled programs measured per kernel (at least; or measure_top)
MEASURE_TOP = 2  # donor schedules measured per kernel, of a cost model that knows the CPU


@dataclass
class KernelTransfer:
    """What transfer-tuning did for one kernel."""

    kernel: Kernel
    untuned_secs: float
    best_secs: float
    donor: str | None = None
    tried: int = 0
    replay_failed: int = 0
    refitted: int = 0
    wrong: int = 0  # failed the numerics check
    fallback: int = 0  # candidates tuned for another target
    foreign_win: bool = False  # the winning donor schedule was tuned for another target
    failed: int = 0  # failed to build or run
    ranked_out: int = 0  # replayed, but not measured: the cost model ranked them lower
    errors: list[str] = field(default_factory=list)
    stage: str = "untuned"  # what won: "transfer", "anchor", "sampled" or "untuned" (nothing)
    sampled: int = 0  # programs drawn from the kernel's own design space
    sampled_timed: int = 0  # of those, measured programs that built, ran and were timed
    seconds: float = 0.0  # replay, build, check and measurement time of this kernel
    measured: dict[int, float | None] = field(default_factory=dict)  # donor workload -> s
    chosen: dict[str, list[int]] = field(default_factory=dict)  # policy -> donor workloads

    @property
    def speedup(self) -> float:
        return self.untuned_secs / self.best_secs


@dataclass
class TransferResult:
    model: str
    config: str
    kernels: list[KernelTransfer]
    search_seconds: float  # all of it, setup included
    target_key: str
    setup_seconds: float = 0.0  # extraction, builder start, untuned runs (as before tune's clock)

    @property
    def untuned_latency(self) -> float:
        return estimate_latency(self.kernels, "untuned_secs")

    @property
    def estimated_latency(self) -> float:
        return estimate_latency(self.kernels)

    def fully_tuned(self, library: Library) -> bool:
        """Whether ``library`` holds a tuned (not transferred) record for every kernel."""
        key = self.target_key
        for k in self.kernels:
            wid = library.find_workload(k.kernel.mod)
            if wid is None or not library.records(wid, key, 1, True, ("tuned",)):
                return False
        return True


def find_candidates(library: Library, kernel: Kernel, model: str, key: str) -> list[Candidate]:
    """The pool for ``kernel`` of ``model``: the best record of every same-class workload on
    the target that occurs in another model (an identical kernel of another model included).
    If the target has none, those of other targets of the same kind and layout, marked as
    fallback."""
    found = _pool(library, kernel, model, key)
    if not found:
        for other in _alike_keys(library, key):
            found += _pool(library, kernel, model, other, fallback=True)
    return found


def _alike_keys(library: Library, key: str) -> list[str]:
    """The library's targets other than ``key`` of its kind and layout (whose schedules
    replay on it)."""
    spec = json.loads(key)
    alike = ("kind", "layout", "prepack")
    return [
        other for other in library.target_keys()
        if other != key and all(json.loads(other).get(a) == spec.get(a) for a in alike)
    ]  # fmt: skip


def _pool(library, kernel, model, key, fallback=False) -> list[Candidate]:
    found = []
    for wid, flops, models, record in library.best_by_class(kernel.kernel_class, key):
        donors = tuple(m for m in models.split(",") if m and m != model)
        if donors:
            found.append(Candidate(wid, donors, flops, record, fallback))
    return found


class AnchorDonors:
    """The cascade's ``anchor`` pool: the best record on the target of every library workload
    occurring in a model other than ``model`` or in none (imported from a MetaSchedule work
    dir: no class, donor ``imported``), by the name of the workload's anchor block (one query
    per target; each anchor block found once). For an anchor block the target has none of,
    those of other targets of the same kind and layout, marked as fallback (as
    :func:`find_candidates` does for a class)."""

    def __init__(self, library: Library, key: str, model: str) -> None:
        self.library, self.key, self.model = library, key, model
        self.classes = library.kernel_classes()
        self.by_anchor = self._pool(key)
        self._fallback: dict[str, list] | None = None  # built when an anchor first needs it

    def _pool(self, key: str, fallback: bool = False) -> dict[str, list]:
        """{anchor block: [(class, candidate)]} of the records on ``key``."""
        by_anchor: dict[str, list] = {}
        for wid, flops, models, record in self.library.best_by_class(None, key):
            names = [m for m in models.split(",") if m]
            donors = tuple(m for m in names if m != self.model) if names else ("imported",)
            name = anchor_block(self.library.workload_mod(wid)) if donors else None
            if name is not None:
                candidate = Candidate(wid, donors, flops, record, fallback, anchor=True)
                by_anchor.setdefault(name, []).append((self.classes[wid], candidate))
        return by_anchor

    def candidates(self, kernel: Kernel, limit: int, donors=None) -> list[Candidate]:
        """Donors of other classes with ``kernel``'s anchor block (of the models ``donors``, if
        given), closest FLOPs first."""
        name = anchor_block(kernel.mod) or ""
        found = _other_class(self.by_anchor.get(name, []), kernel, donors)
        if not found:
            if self._fallback is None:
                self._fallback = {}
                for other in _alike_keys(self.library, self.key):
                    for anchor, pool in self._pool(other, fallback=True).items():
                        self._fallback.setdefault(anchor, []).extend(pool)
            found = _other_class(self._fallback.get(name, []), kernel, donors)
        found.sort(key=lambda c: (abs(np.log(max(c.flops, 1.0) / max(kernel.flops, 1.0))),
                                  c.record.mean_secs))  # fmt: skip
        return found[:limit]


def _other_class(pool: list, kernel: Kernel, donors) -> list[Candidate]:
    """The candidates of ``pool`` ((class, candidate) pairs) of a class other than
    ``kernel``'s, of the models ``donors`` if given."""
    return [
        c for cls, c in pool
        if cls != kernel.kernel_class and (not donors or set(donors).intersection(c.models))
    ]  # fmt: skip


def transfer_tune(
    model: ImportedModel,
    library: Library,
    config: TargetConfig | str | None = None,
    donors: list[str] | None = None,
    max_candidates: int = 8,
    policy: str | Sequence[str] = DEFAULT_POLICY,
    cost_model=None,
    measure_top: int | None = None,
    on_kernel: Callable[[KernelTransfer], None] | None = None,
    builder=None,
    runner=None,
    device: dict | None = None,
    sample: int = 32,
    kernels: list[Kernel] | None = None,
    resume: bool = False,
    anchor: bool = True,
) -> TransferResult:
    """Transfer-tune ``model`` from ``library`` (see the module docstring).

    ``donors``: only schedules of these models; ``policy``: a donor policy name (see
    :mod:`.policies`) or several, whose picks are measured together in one pass and recorded
    per policy in :attr:`KernelTransfer.chosen` (to compare policies on the same measurements).
    ``cost_model``: a :class:`~transtune.costmodel.metaschedule.LearnedCostModel` that ranks
    each kernel's replayed candidates, of which only the ``measure_top`` best scored are built
    and measured (default: ``MEASURE_TOP`` if the model was trained on ``config``'s CPU, else
    all; see :func:`measured_per_kernel`). ``device``: the measuring device's
    hardware descriptor (as a dict), kept with the run. ``sample``: programs drawn for a kernel
    that no donor improved (0: none). ``kernels``: the model's kernels, if extracted already.
    ``resume``: keep the winner an earlier (interrupted) run of the same model on this target
    committed for a kernel, instead of measuring it again. ``anchor``: whether the anchor
    stage runs (with ``sample=0`` and one named donor, what is left is the paper's protocol).
    """
    if not isinstance(config, TargetConfig):
        config = get_config(config)
    names = [policy] if isinstance(policy, str) else list(policy)
    policies = {name: get_policy(name) for name in names}
    measure_top = measured_per_kernel(cost_model, config, measure_top)
    target = config.tvm_target()
    key = target_key(config)
    load_cpu_tensor_intrinsics()
    start = time.perf_counter()
    kernels = kernels if kernels is not None else extract_kernels(model.mod, config)
    extracted = time.perf_counter() - start
    runner = runner or local_runner(EVALUATOR, num_threads=config.num_threads)
    pools, wids = [], []
    for kernel in kernels:
        wids.append(
            library.add_workload(
                kernel.mod, kernel.kernel_class, kernel.flops, model.name, kernel.name,
                kernel.weight,
            )
        )  # fmt: skip
        pool = find_candidates(library, kernel, model.name, key)
        pools.append([c for c in pool if not donors or set(donors).intersection(c.models)])
    picks = {name: p(kernels, pools, max_candidates) for name, p in policies.items()}
    run_id = f"transfer:{model.name}:{config.name}"
    library.start_run(run_id, "transfer", model.name, key, {
        "policy": names, "donors": donors, "max_candidates": max_candidates, "device": device,
        "measure_top": measure_top,
    })  # fmt: skip
    results = []
    anchors: AnchorDonors | None = None  # built when a kernel first needs it
    measuring = time.perf_counter()
    with warm_builder(builder, config.num_threads) as builder:
        untuned = measure_untuned(kernels, target, builder, runner)
        setup = extracted + time.perf_counter() - measuring
        for i, (kernel, wid, base) in enumerate(zip(kernels, wids, untuned, strict=True)):
            outcome = KernelTransfer(kernel, base, base)
            outcome.chosen = {name: [c.workload_id for c in p[i]] for name, p in picks.items()}
            union = {c.workload_id: c for p in picks.values() for c in p[i]}
            t0 = time.perf_counter()
            prior = _won_before(library, wid, config, run_id) if resume else None
            if prior is not None:  # an interrupted run got this far: keep what it found
                outcome.best_secs, outcome.donor = prior.mean_secs, prior.donor
                outcome.stage = _stage(prior)
            elif union:
                _transfer_kernel(kernel, wid, list(union.values()), outcome, library, config,
                                 builder, runner, run_id, cost_model, measure_top)  # fmt: skip
            if prior is None and outcome.donor is None and anchor:
                anchors = anchors or AnchorDonors(library, key, model.name)
                pool = anchors.candidates(kernel, max_candidates, donors)
                if pool:
                    _transfer_kernel(kernel, wid, pool, outcome, library, config, builder,
                                     runner, run_id, cost_model, measure_top)  # fmt: skip
            weak = outcome.stage in ("untuned", "anchor") or outcome.foreign_win
            if prior is None and sample > 0 and weak:
                _sample_kernel(kernel, wid, sample, outcome, library, config, builder, runner,
                               run_id, cost_model, measure_top)  # fmt: skip
            outcome.seconds = time.perf_counter() - t0
            results.append(outcome)
            if on_kernel is not None:
                on_kernel(outcome)
    library.finish_run(run_id)
    return TransferResult(model.name, config.name, results, time.perf_counter() - start, key, setup)


def measured_per_kernel(cost_model, config: TargetConfig, measure_top: int | None) -> int | None:
    """Donor schedules measured per kernel (None: every replayed one): ``measure_top`` if
    given, else ``MEASURE_TOP`` with a cost model trained on ``config``'s CPU (on any of its
    configurations: thread counts, ISA levels)."""
    if measure_top is not None or cost_model is None:
        return measure_top
    known = {cpu_of(i) for i in getattr(cost_model, "trained_on", ())}
    return MEASURE_TOP if cpu_of(config.name) in known else None


def _stage(record) -> str:
    """The cascade stage that committed ``record``."""
    if record.provenance == "sampled":
        return "sampled"
    return "anchor" if (record.donor or "").endswith(ANCHOR_MARK) else "transfer"


def _won_before(library: Library, wid: int, config: TargetConfig, run_id: str):
    """The record an earlier session of ``run_id`` committed for workload ``wid``, or None."""
    found = library.records(wid, config, ok_only=True, provenance=("transferred", "sampled"))
    return next((r for r in found if r.run_id == run_id), None)


def _transfer_kernel(
    kernel, wid, candidates, outcome, library, config, builder, runner, run_id, cost_model,
    measure_top,
) -> None:  # fmt: skip
    target = config.tvm_target()
    postprocs = postprocessors(kernel.mod, target)
    schedules, donors = [], []
    for candidate in candidates:
        outcome.tried += 1
        outcome.fallback += candidate.fallback
        outcome.measured[candidate.workload_id] = None
        if candidate.anchor:
            donor_mod = library.workload_mod(candidate.workload_id)
            result = replay_anchor(candidate.record.trace, donor_mod, kernel.mod, target, postprocs)
        else:
            result = replay(candidate.record.trace, kernel.mod, postprocs)
        outcome.refitted += result.refitted
        if result.schedule is None:
            outcome.replay_failed += 1
            outcome.errors.append(result.error)
            continue
        schedules.append(result.schedule)
        donors.append(candidate)
    if not schedules:
        return
    if cost_model is not None and measure_top is not None and len(schedules) > measure_top:
        scores = cost_model.score_schedules(kernel.mod, target, schedules)
        keep = set(np.argsort(-scores, kind="stable")[:measure_top].tolist())
        for i, candidate in enumerate(donors):
            if i not in keep:
                outcome.ranked_out += 1
                del outcome.measured[candidate.workload_id]
        schedules = [s for i, s in enumerate(schedules) if i in keep]
        donors = [c for i, c in enumerate(donors) if i in keep]
    check = NumericsCheck(kernel.mod, target, RTOL)
    measured = measure_modules([s.mod for s in schedules], target, builder, runner, check, False)
    best = None
    for sch, candidate, m in zip(schedules, donors, measured, strict=True):
        outcome.measured[candidate.workload_id] = m.seconds
        if m.seconds is None:
            if m.status == "rejected":  # by the numerics check
                outcome.wrong += 1
            else:
                outcome.failed += 1
            outcome.errors.append(m.error)
        elif m.seconds < outcome.best_secs:
            outcome.best_secs, outcome.donor, best = m.seconds, candidate.donor, (sch, m)
            outcome.foreign_win = bool(candidate.fallback)
    if best is not None:
        outcome.stage = "anchor" if outcome.donor.endswith(ANCHOR_MARK) else "transfer"
        _commit(library, kernel, wid, config, best, "transferred", outcome.donor, run_id)


def _sample_kernel(
    kernel, wid, count, outcome, library, config, builder, runner, run_id, cost_model,
    measure_top,
) -> None:  # fmt: skip
    """The cascade's zero-search stage: the best measured of a few programs drawn from the
    kernel's own design space (ranked by ``cost_model`` when there is one)."""
    measured, errors, drawn = _measure_samples(kernel, count, config, builder, runner,
                                               cost_model, measure_top)  # fmt: skip
    outcome.sampled = drawn
    outcome.errors += errors
    outcome.failed += sum(m.seconds is None for _, m in measured)
    outcome.sampled_timed = sum(m.seconds is not None for _, m in measured)
    best = None
    for sch, m in measured:
        if m.seconds is not None and m.seconds < outcome.best_secs:
            outcome.best_secs, best = m.seconds, (sch, m)
    if best is not None:
        outcome.stage, outcome.donor = "sampled", None
        _commit(library, kernel, wid, config, best, "sampled", None, run_id)


def _measure_samples(kernel, count, config, builder, runner, cost_model, measure_top):
    """([(schedule, measurement)] of the few programs the sampled stage times, [errors],
    programs drawn)."""
    from ..schedules import design_spaces, kernel_seed
    from ..schedules import sample as draw

    target = config.tvm_target()
    spaces, postprocs = design_spaces(kernel.mod, target)
    if not spaces:
        return [], ["no design space to sample"], 0
    samples = draw(kernel.mod, spaces, postprocs, count, kernel_seed(kernel.workload_hash, 0))
    schedules = [s.schedule for s in samples]
    if cost_model is not None:
        scores = cost_model.score_schedules(kernel.mod, target, schedules)
        schedules = [schedules[i] for i in np.argsort(-scores, kind="stable")]
    schedules = schedules[: max(measure_top or 0, SAMPLES_MEASURED)]
    check = NumericsCheck(kernel.mod, target, RTOL)
    measured = measure_modules([s.mod for s in schedules], target, builder, runner, check, False)
    errors = [m.error for m in measured if m.seconds is None]
    return list(zip(schedules, measured, strict=True)), errors, len(samples)


def zero_measurement_seconds(
    kernels: list[Kernel],
    config: TargetConfig,
    untuned: list[float],
    sample: int = 32,
    cost_model=None,
    measure_top: int | None = None,
    builder=None,
    runner=None,
) -> list[float]:
    """Per kernel, the best of its ``untuned`` time and the sampled stage's programs: the
    "default schedule" baseline, what a kernel gets without any search or donor (the
    transfer benchmark's second definition of the untuned model). Nothing is recorded."""
    runner = runner or local_runner(EVALUATOR, num_threads=config.num_threads)
    out = []
    with warm_builder(builder, config.num_threads) as builder:
        for kernel, base in zip(kernels, untuned, strict=True):
            measured, _, _ = _measure_samples(kernel, sample, config, builder, runner,
                                              cost_model, measure_top)  # fmt: skip
            times = [m.seconds for _, m in measured if m.seconds is not None]
            out.append(min([base, *times]))
    return out


def _commit(library, kernel, wid, config, best, provenance, donor, run_id) -> None:
    sch, m = best
    args = arg_info_json(kernel.mod)
    library.add_record(
        wid, config, trace_json(sch.trace), [m.seconds], plain(args),
        provenance=provenance, donor=donor, run_id=run_id,
    )  # fmt: skip
