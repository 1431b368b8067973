"""What a tuning session tracks and returns: per-kernel state, the convergence rule, the
result, the end-to-end latency estimate."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..tasks import Kernel


def tail_cut(points: Iterable[tuple[float, float]], tail: float = 0.25) -> float | None:
    """The share by which y fell over the last ``tail`` of x along (x, y) points in x order
    (from y at the last point at or before ``(1 - tail)`` of the final x); None when no point
    lies there. Both stopping rules read their curve so: a kernel's (trials, best seconds),
    a model's (seconds, estimated latency)."""
    points = list(points)
    if not points:
        return None
    end, now = points[-1]
    before = [y for x, y in points if x <= (1 - tail) * end]
    if not before:
        return None
    return (before[-1] - now) / before[-1] if before[-1] > 0 else 0.0


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
        cut = tail_cut(curve, self.tail)
        return cut is not None and cut < self.tolerance

    def trials_left(self, curve: list[tuple[int, float]], cap: int | None = None) -> int:
        """The fewest more candidates after which the rule can hold (all of them, if none
        improves the best again), at most up to ``cap`` candidates in all."""
        if self.reached(curve):
            return 0
        trials, best = curve[-1] if curve else (0, 0.0)
        # The rule holds at n once the best at n x (1 - tail) was already within tolerance.
        within = next((t for t, b in curve if b * (1 - self.tolerance) < best), trials)
        need = max(self.min_trials, math.ceil(within / (1 - self.tail)), trials + 1)
        return max(0, (min(need, cap) if cap is not None else need) - trials)


@dataclass(frozen=True)
class Flattening:
    """When a model's tuning curve has flattened: the last ``tail`` of its seconds cut its
    estimated latency by less than ``tolerance``. A session given it runs on past its time
    budget until it holds, for at most ``max_seconds`` of tuning in all."""

    max_seconds: float
    tail: float = 0.25
    tolerance: float = 0.02

    def reached(self, curve: list[tuple[int, float, float]]) -> bool:
        """Whether a (trials, seconds, estimated latency) curve has flattened."""
        cut = tail_cut(((s, lat) for _, s, lat in curve), self.tail)
        return cut is not None and cut < self.tolerance


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
