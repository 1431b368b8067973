"""Donor policies: which library schedules transfer-tuning tries on each kernel of a model.

A policy sees every kernel of the new model with its pool of candidates (the best record of
each same-class library workload on the target) and picks at most ``limit`` per kernel, most
promising first. The paper picked donor models by hand; these pick without a human:

- ``shape``: closest argument shapes (sum of |log ratio| over every dimension), then FLOPs;
- ``flops``: closest FLOPs (|log ratio|), then the faster donor record;
- ``speed``: donors whose schedule reached the highest GFLOP/s on their own kernel;
- ``coverage``: only the two donor models covering the most of the new model's FLOPs by
  kernel class (the paper's "pick a few similar models"), then ``shape`` within them.

``benchmarks/transfer.py`` measures them against each other on the same candidates.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ..library import Record
from ..tasks import Kernel

DEFAULT_POLICY = "shape"
ANCHOR_MARK = "~anchor"  # ends the donor of a schedule transferred through the anchor block
COVERAGE_MODELS = 2


@dataclass
class Candidate:
    """A donor schedule for one kernel: the best record of library workload ``workload_id``."""

    workload_id: int
    models: tuple[str, ...]  # the donor models this workload occurs in
    flops: float
    record: Record
    fallback: bool = False  # tuned for another target of the same kind (marked in the donor)
    anchor: bool = False  # a kernel of another class with the same anchor block (marked too)

    @property
    def donor(self) -> str:
        spec = self.record.target
        where = f"@{self.record.hardware or spec.get('mcpu', spec.get('kind'))}"
        where = where if self.fallback else ""
        mark = ANCHOR_MARK if self.anchor else ""
        return f"{','.join(self.models) or '?'}#w{self.workload_id}{where}{mark}"

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [tuple(int(d) for d in arg[2]) for arg in self.record.args_info or []]


Policy = Callable[[list[Kernel], list[list[Candidate]], int], list[list[Candidate]]]


def _log_gap(a: float, b: float) -> float:
    return abs(math.log(max(a, 1.0) / max(b, 1.0)))


def shape_distance(shapes: list[tuple[int, ...]], candidate: Candidate) -> float:
    """Sum of |log ratio| over all argument dimensions between a kernel's argument ``shapes``
    and the candidate's; infinite if the signatures differ."""
    theirs = candidate.shapes
    if [len(a) for a in shapes] != [len(b) for b in theirs]:
        return math.inf
    return sum(
        _log_gap(x, y)
        for a, b in zip(shapes, theirs, strict=True)
        for x, y in zip(a, b, strict=True)
    )


Key = Callable[[Kernel, list[tuple[int, ...]], Candidate], tuple]


def _per_kernel(key: Key) -> Policy:
    """A policy that sorts each kernel's pool by ``key(kernel, its arg shapes, candidate)``."""

    def policy(kernels, pools, limit):
        out = []
        for kernel, pool in zip(kernels, pools, strict=True):
            shapes = kernel.arg_shapes
            out.append(sorted(pool, key=lambda c: key(kernel, shapes, c))[:limit])  # noqa: B023
        return out

    return policy


by_shape = _per_kernel(
    lambda k, shapes, c: (shape_distance(shapes, c), _log_gap(c.flops, k.flops), c.record.mean_secs)
)
by_flops = _per_kernel(lambda k, _, c: (_log_gap(c.flops, k.flops), c.record.mean_secs))
by_speed = _per_kernel(lambda _k, _, c: (-c.flops / c.record.mean_secs, c.record.mean_secs))


def by_coverage(kernels: list[Kernel], pools: list[list[Candidate]], limit: int):
    """Candidates from the donor models covering the most kernel FLOPs by class only."""
    covered: dict[str, float] = defaultdict(float)
    for kernel, pool in zip(kernels, pools, strict=True):
        for model in {m for c in pool for m in c.models}:
            covered[model] += kernel.flops * kernel.weight
    chosen = set(sorted(covered, key=lambda m: (-covered[m], m))[:COVERAGE_MODELS])
    pools = [[c for c in pool if chosen.intersection(c.models)] for pool in pools]
    return by_shape(kernels, pools, limit)


POLICIES: dict[str, Policy] = {
    "shape": by_shape,
    "flops": by_flops,
    "speed": by_speed,
    "coverage": by_coverage,
}


def get_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"unknown donor policy {name!r}; choose from {', '.join(POLICIES)}")
    return POLICIES[name]
