"""The lookup baseline of transfer to new hardware: rank a program on the new CPU by the
latency the same program (same kernel and sample: its decisions) measured on a configuration
the data already has. A learned model that transfers must beat this reuse of measurements.

Scikit-learn shaped like the other models (``fit`` remembers the source's latencies,
``predict`` scores); it learns nothing, so it is not saved.
"""

from __future__ import annotations

import numpy as np

from .data import CostData
from .models import CostModelError, _Base


class LookupModel(_Base):
    """Score = -log(latency of the same program on ``source``); a program never measured
    there scores below every program that was (its kernel's other programs are still
    ordered among themselves by what was measured)."""

    kind = "lookup"

    def __init__(self, source: str) -> None:
        self.source = source
        self.config = None
        self.latency: dict[tuple[str, int], float] = {}

    def fit(self, data: CostData, index=None) -> LookupModel:
        """Remember the latency of every program among rows ``index`` measured on ``source``."""
        if data.sample is None:
            raise CostModelError("the lookup baseline needs each record's sample index")
        rows = self._rows(data, index)
        rows = rows[data.target[rows] == self.source]
        self.latency = {
            (w, int(s)): float(t)
            for w, s, t in zip(data.workload[rows], data.sample[rows], data.latency[rows],
                               strict=True)
        }  # fmt: skip
        return self

    def _known(self, data: CostData, index) -> list[float | None]:
        rows = self._rows(data, index)
        pairs = zip(data.workload[rows], data.sample[rows], strict=True)
        return [self.latency.get((w, int(s))) for w, s in pairs]

    def found(self, data: CostData, index=None) -> np.ndarray:
        """Whether each row's program was measured on ``source``."""
        return np.asarray([t is not None for t in self._known(data, index)])

    def predict(self, data: CostData, index=None) -> np.ndarray:
        known = self._known(data, index)
        scores = np.asarray([-np.log(t) if t else np.nan for t in known], np.float64)
        floor = np.nanmin(scores) - 1.0 if np.isfinite(scores).any() else 0.0
        return np.where(np.isnan(scores), floor, scores)

    def payload(self) -> dict:
        raise CostModelError("the lookup baseline learns nothing to save")
