"""MetaSchedule's own cost models as peers on a transtune dataset, changed as little as works.

Both get exactly what a search would accumulate through their ``update()``: each record's
per-store features, grouped per (kernel, configuration), with the measured cost; they are
then trained once through their own training functions (``XGBModel._train``: its pack-sum
features, squared error on normalized throughput, early stopping; ``MLPModel``'s
``SegmentSumMLPTrainer.train_full``: LambdaRank, its own random hold-out of groups) and asked
for scores. Neither sees the hardware vector (they have no input for it). Shims:

- ``SegmentSumMLPTrainer`` passes ``verbose=`` to ``StepLR``, which torch 2.13 removed: the
  scheduler class is wrapped to drop it while it trains (and to make its step size, epochs //
  10, at least 1, so that fewer than 10 epochs work);
- ``MLPModel``'s network is built for 172 inputs (the features with workload features); ours
  have 164 per store, so it gets ``input_dim=164``.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .data import CostData
from .models import _Base


class MetaScheduleXGB(_Base):
    kind = "ms-xgb"

    def __init__(self, threads: int = 2, early_stopping_rounds: int = 50) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.model = ms.cost_model.XGBModel(
            num_tuning_cores=threads, verbose_eval=0, early_stopping_rounds=early_stopping_rounds
        )
        self.config = None

    def fit(self, data: CostData, index=None) -> MetaScheduleXGB:
        rows = self._rows(data, index)
        self.model._train(xs=data.segments(rows), ys=data.label[rows].astype("float32"))
        return self

    def predict(self, data: CostData, index=None) -> np.ndarray:
        return self.model._predict(xs=data.segments(self._rows(data, index)))


class MetaScheduleMLP(_Base):
    kind = "ms-mlp"

    def __init__(self, seed: int = 0, epochs: int | None = None) -> None:
        from tvm.s_tir.meta_schedule.cost_model import mlp_model

        self.seed = seed
        state = mlp_model.State(mlp_model.SegmentSumMLPConfig(input_dim=164))
        config = mlp_model.TrainerConfig()
        if epochs is not None:  # default: MetaSchedule's (50)
            config = config._replace(num_epoch_full=epochs)
        self.trainer = mlp_model.SegmentSumMLPTrainer(config, state)
        self.config = None

    def fit(self, data: CostData, index=None) -> MetaScheduleMLP:
        import random

        import torch

        rows = self._rows(data, index)
        if len(np.unique(data.group[rows])) < 5:
            raise ValueError("MetaSchedule's MLPModel holds out 20% of the groups: give it >= 5")
        for g in np.unique(data.group[rows]):
            members = rows[data.group[rows] == g]
            self.trainer.state.add_to_group(
                data.segments(members), data.latency[members].astype("float32"), str(g)
            )
        random.seed(self.seed)
        torch.manual_seed(self.seed)
        with _step_lr_without_verbose():
            self.trainer.train_full()
        return self

    def predict(self, data: CostData, index=None) -> np.ndarray:
        return self.trainer.predict_incremental(data.segments(self._rows(data, index)))


@contextlib.contextmanager
def _step_lr_without_verbose():
    import torch

    original = torch.optim.lr_scheduler.StepLR

    class StepLR(original):
        def __init__(self, optimizer, step_size, *args, verbose=None, **kwargs):
            super().__init__(optimizer, max(1, step_size), *args, **kwargs)

    torch.optim.lr_scheduler.StepLR = StepLR
    try:
        yield
    finally:
        torch.optim.lr_scheduler.StepLR = original
