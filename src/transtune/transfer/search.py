"""Transfer-tuning (Gibson & Cano, PACT 2022) on MetaSchedule: reuse tuned schedules.

For each kernel of a new model: the candidates are the best records of library kernels of the
same class on the same target (see :mod:`transtune.tasks` for classes), ranked by shape
similarity and capped; each is replayed on the kernel (:mod:`.replay`), built in parallel,
checked against the untuned kernel on random inputs, and timed on its own. The fastest
correct one wins if it beats the untuned kernel, and is committed to the library as
``transferred`` with its donor. The model then compiles with the winners.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from tvm.s_tir import meta_schedule as ms

from ..frontend import ImportedModel
from ..library import Library, Record, plain, target_key
from ..measure import (
    EVALUATOR,
    load_cpu_tensor_intrinsics,
    local_runner,
    measure_modules,
    warm_builder,
)
from ..targets import TargetConfig, get_config
from ..tasks import Kernel, extract_kernels
from ..tuning import estimate_latency, measure_untuned
from .replay import postprocessors, replay

RTOL = 1e-3  # a transferred kernel's outputs must be within RTOL x max|reference|


@dataclass
class Candidate:
    """A donor schedule for one kernel."""

    workload_id: int
    models: str
    flops: float
    record: Record

    @property
    def donor(self) -> str:
        return f"{self.models or '?'}#w{self.workload_id}"


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
    failed: int = 0  # failed to build or run
    errors: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.untuned_secs / self.best_secs


@dataclass
class TransferResult:
    model: str
    config: str
    kernels: list[KernelTransfer]
    search_seconds: float

    @property
    def untuned_latency(self) -> float:
        return estimate_latency(self.kernels, "untuned_secs")

    @property
    def estimated_latency(self) -> float:
        return estimate_latency(self.kernels)


def rank_candidates(kernel: Kernel, candidates: list[Candidate], limit: int) -> list[Candidate]:
    """Most similar first: closest FLOPs (log ratio), then fastest donor record."""

    def distance(c: Candidate) -> tuple[float, float]:
        ratio = (c.flops or 1.0) / (kernel.flops or 1.0)
        return abs(math.log(ratio)) if ratio > 0 else math.inf, c.record.mean_secs

    return sorted(candidates, key=distance)[:limit]


def find_candidates(
    library: Library, kernel: Kernel, workload_id: int, key: str, donors: set[str] | None
) -> list[Candidate]:
    """Best record of every other same-class workload on the target, from ``donors`` models."""
    found = []
    for wid, flops, models, record in library.best_by_class(kernel.kernel_class, key):
        if wid == workload_id:
            continue
        if donors is not None and not donors.intersection(models.split(",")):
            continue
        found.append(Candidate(wid, models, flops, record))
    return found


class _NumericsCheck:
    """Compares a built candidate with the untuned kernel on the same random inputs."""

    def __init__(self, mod, target, seed: int = 0) -> None:
        import tvm

        self.device = tvm.cpu()
        rng = np.random.default_rng(seed)
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        self.inputs = []
        for arg in args:
            shape, dtype = [int(d) for d in arg.shape], str(arg.dtype)
            if np.issubdtype(np.dtype(dtype), np.floating):
                self.inputs.append(rng.standard_normal(shape).astype(dtype))
            else:  # indices: zeros are valid for any gather
                self.inputs.append(np.zeros(shape, dtype=dtype))
        reference = tvm.compile(mod, target=target)
        self.expected = self._run(reference)

    def _run(self, lib) -> list[np.ndarray]:
        import tvm

        tensors = [tvm.runtime.tensor(x, self.device) for x in self.inputs]
        lib["main"](*tensors)
        return [t.numpy() for t in tensors]

    def __call__(self, mod, artifact_path: str) -> str | None:
        import tvm

        got = self._run(tvm.runtime.load_module(artifact_path))
        for out, ref in zip(got, self.expected, strict=True):
            scale = max(float(np.abs(ref).max()), 1e-12) if ref.size else 1.0
            err = float(np.abs(out.astype(np.float64) - ref).max()) / scale if ref.size else 0.0
            if not err <= RTOL:
                return f"numerics differ from the untuned kernel (rel. err {err:.1e})"
        return None


def transfer_tune(
    model: ImportedModel,
    library: Library,
    config: TargetConfig | str | None = None,
    donors: list[str] | None = None,
    max_candidates: int = 8,
    on_kernel: Callable[[KernelTransfer], None] | None = None,
    builder=None,
    runner=None,
) -> TransferResult:
    """Transfer-tune ``model`` from ``library`` (see the module docstring)."""
    if not isinstance(config, TargetConfig):
        config = get_config(config)
    target = config.tvm_target()
    key = target_key(target)
    load_cpu_tensor_intrinsics()
    start = time.perf_counter()
    kernels = extract_kernels(model.mod, target)
    runner = runner or local_runner(EVALUATOR)
    donor_set = set(donors) if donors else None
    results = []
    with warm_builder(builder, config.num_threads) as builder:
        untuned = measure_untuned(kernels, target, builder, runner)
        for kernel, base in zip(kernels, untuned, strict=True):
            wid = library.add_workload(
                kernel.mod, kernel.kernel_class, kernel.flops, model.name, kernel.name,
                kernel.weight,
            )  # fmt: skip
            outcome = KernelTransfer(kernel, base, base)
            candidates = rank_candidates(
                kernel, find_candidates(library, kernel, wid, key, donor_set), max_candidates
            )
            if candidates:
                _transfer_kernel(kernel, wid, candidates, outcome, library, config, builder, runner)
            results.append(outcome)
            if on_kernel is not None:
                on_kernel(outcome)
    return TransferResult(model.name, config.name, results, time.perf_counter() - start)


def _transfer_kernel(kernel, wid, candidates, outcome, library, config, builder, runner) -> None:
    target = config.tvm_target()
    postprocs = postprocessors(kernel.mod, target)
    schedules, donors = [], []
    for candidate in candidates:
        outcome.tried += 1
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
    check = _NumericsCheck(kernel.mod, target)
    measured = measure_modules([s.mod for s in schedules], target, builder, runner, check)
    best = None
    for sch, candidate, m in zip(schedules, donors, measured, strict=True):
        if m.seconds is None:
            if m.error.startswith("numerics"):
                outcome.wrong += 1
            else:
                outcome.failed += 1
            outcome.errors.append(m.error)
        elif m.seconds < outcome.best_secs:
            outcome.best_secs, outcome.donor, best = m.seconds, candidate.donor, (sch, m)
    if best is not None:
        sch, m = best
        args = [a.as_json() for a in ms.arg_info.ArgInfo.from_prim_func(kernel.mod["main"])]
        library.add_record(
            wid, target, plain(sch.trace.as_json()), [m.seconds], plain(args),
            provenance="transferred", donor=outcome.donor, run_id=f"transfer:{config.name}",
            target_name=config.name,
        )  # fmt: skip
