"""The lookup baseline of transfer to new hardware: rank a program on the new CPU by the
latency the same program (same kernel and sample: its decisions) measured on a configuration
the data already has. A learned model that transfers must beat this reuse of measurements.

Scikit-learn shaped like the other models (``fit`` remembers the source's latencies,
``predict`` scores); it learns nothing, so it is not saved. :class:`LookupResidualModel`
learns a correction on top of it.
"""

from __future__ import annotations

import numpy as np

from .data import CostData
from .metrics import evaluate
from .models import CostModelError, XGBConfig, _Base, pack_sum


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


class LookupResidualModel(_Base):
    """The lookup baseline plus a correction learned on the new hardware's records, as
    TenSet's local residual: XGBoost ranks each kernel's programs with the lookup score as its
    base margin, from the program features and the program's lookup score relative to its
    kernel's. The number of trees is picked on a validation share of the fitted kernels, and
    refitted on all of them; none (the lookup alone) when no count beats it there, or when
    fewer than two kernels were given."""

    kind = "lookup-residual"

    def __init__(self, source: str, seed: int = 0, validation: float = 0.2) -> None:
        self.source, self.validation = source, validation
        self.config = XGBConfig(n_estimators=200, max_depth=4, learning_rate=0.05, seed=seed)
        self.lookup = LookupModel(source)
        self.booster, self.rounds = None, 0

    def _matrix(self, data: CostData, rows: np.ndarray, margin: np.ndarray, label=None):
        import xgboost as xgb

        _, group = np.unique(data.group[rows], return_inverse=True)
        relative = margin - (np.bincount(group, margin) / np.bincount(group))[group]
        x = np.hstack([pack_sum(data, rows), relative[:, None]])
        matrix = xgb.DMatrix(x, label=label, base_margin=margin)
        if label is not None:
            matrix.set_group(np.unique(data.group[rows], return_counts=True)[1])
        return matrix

    def _train(self, data: CostData, rows: np.ndarray, rounds: int):
        import xgboost as xgb

        rows = rows[np.argsort(data.group[rows], kind="stable")]
        margin = self.lookup.predict(data, rows)
        matrix = self._matrix(data, rows, margin, data.label[rows])
        return xgb.train(self.config.params(), matrix, num_boost_round=rounds)

    def fit(self, data: CostData, index=None) -> LookupResidualModel:
        """Remember the source's latencies among rows ``index``; learn the correction on the
        others whose program the source measured."""
        rows = self._rows(data, index)
        self.lookup.fit(data, rows)
        rows = rows[data.target[rows] != self.source]
        rows = rows[self.lookup.found(data, rows)]
        self._note_hardware(data, rows)
        kernels = np.unique(data.workload[rows])
        self.booster, self.rounds = None, 0
        if len(kernels) < 2:
            return self
        np.random.default_rng(self.config.seed).shuffle(kernels)
        held = kernels[: max(1, round(self.validation * len(kernels)))]
        held = np.isin(data.workload[rows], held)
        booster = self._train(data, rows[~held], self.config.n_estimators)
        val = rows[held]
        margin = self.lookup.predict(data, val)
        matrix = self._matrix(data, val, margin)
        best, best_pca = 0, evaluate(margin, data.latency[val], data.group[val])["pca"]
        for r in range(10, self.config.n_estimators + 1, 10):
            score = booster.predict(matrix, output_margin=True, iteration_range=(0, r))
            pca = evaluate(score, data.latency[val], data.group[val])["pca"]
            if pca > best_pca:
                best, best_pca = r, pca
        if best:
            self.booster, self.rounds = self._train(data, rows, best), best
        return self

    def predict(self, data: CostData, index=None) -> np.ndarray:
        rows = self._rows(data, index)
        margin = self.lookup.predict(data, rows)
        if self.booster is None:
            return margin
        return self.booster.predict(self._matrix(data, rows, margin), output_margin=True)

    def payload(self) -> dict:
        raise CostModelError("the lookup residual model is not saved: it needs the source data")
