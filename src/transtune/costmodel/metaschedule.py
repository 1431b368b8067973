"""Cost models where they meet MetaSchedule (the only TVM import in :mod:`.costmodel`).

:class:`LearnedCostModel`: a transtune cost model inside MetaSchedule's search, as a
``PyCostModel``. It scores candidates with a trained model (:mod:`.models`) given the hardware
descriptor of the configuration being tuned, and learns online: every measured batch is
kept, and after each one the model learns from what was measured so far in this search (a
torch model takes ``update_steps`` pairwise steps on at most ``update_rows`` of those
records, so an update costs the same late in a search as early; an XGBoost model boosts more
trees on them all).

:class:`MetaScheduleXGB` and :class:`MetaScheduleMLP`: MetaSchedule's own cost models as peers
on a transtune dataset, changed as little as works. Both get exactly what a search would
accumulate through their ``update()``: each record's per-store features, grouped per (kernel,
configuration), with the measured cost; they are then trained once through their own
training functions (``XGBModel._train``: its pack-sum features, squared error on normalized
throughput, early stopping; ``MLPModel``'s ``SegmentSumMLPTrainer.train_full``: LambdaRank, its
own random hold-out of groups) and asked for scores. Neither sees the hardware vector (they
have no input for it). Shims:

- ``SegmentSumMLPTrainer`` passes ``verbose=`` to ``StepLR``, which torch 2.13 removed: the
  scheduler class is wrapped to drop it while it trains (and to make its step size, epochs //
  10, at least 1, so that fewer than 10 epochs work);
- ``MLPModel``'s network is built for 172 inputs (the features with workload features); ours
  have 164 per store, so it gets ``input_dim=164``.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..errors import TranstuneError
from ..features import schedule_tokens, trace_tokens
from .data import CostData, token_arrays
from .models import CostModelError, TorchCostModel, XGBCostModel, _Base, load


@derived_object
class LearnedCostModel(ms.cost_model.PyCostModel):
    """``model`` (or a checkpoint path) scoring candidates for the hardware ``hardware``
    (a :class:`~transtune.hardware.HardwareDescriptor` vector). ``kernel_classes`` maps the
    tuned kernels' workload hashes to their kernel class, when known."""

    def __init__(
        self,
        model,
        hardware: np.ndarray,
        kernel_classes: dict[str, str] | None = None,
        update_steps: int = 20,
        update_rows: int = 512,
    ) -> None:
        super().__init__()
        self.model = load(model) if isinstance(model, str) else model
        if getattr(getattr(self.model, "config", None), "per_task", False):
            # Its scores depend on which rows one call scores; a search compares scores
            # across calls (its population, over generations).
            raise CostModelError("a model with per-task features cannot guide a search")
        self.hardware = np.asarray(hardware, dtype=np.float32)
        self.classes = {w: self.model.class_id(c) for w, c in (kernel_classes or {}).items()}
        self.update_steps, self.update_rows = update_steps, update_rows
        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.seen: list[tuple] = []  # (stores, tokens, seconds, task, *task info)
        self.tasks: dict[str, int] = {}

    @property
    def trained_on(self) -> list[str]:
        """Hardware ids of the records the model was trained on."""
        return list(getattr(self.model, "trained_on", []))

    def load(self, path: str) -> None:
        self.model = load(path)

    def save(self, path: str) -> None:
        self.model.save(path)

    def predict(self, context, candidates) -> np.ndarray:
        info = self._info(context)
        rows = [(s, t, 1.0, 0, *info) for s, t in self._features(context, candidates)]
        return np.asarray(self.model.predict(self._data(rows)), dtype="float64")

    def score_schedules(self, mod, target, schedules: list) -> np.ndarray:
        """Scores (higher: predicted faster) of ``schedules`` of the kernel ``mod`` on
        ``target``, outside a search (e.g. to rank transferred schedules before measuring)."""
        context = ms.TuneContext(mod=mod, target=target, num_threads=1)
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        return self.predict(context, [ms.MeasureCandidate(s, args) for s in schedules])

    def update(self, context, candidates, results) -> None:
        info = self._info(context)
        task = self.tasks.setdefault(info[2], len(self.tasks))
        for (s, t), r in zip(self._features(context, candidates), results, strict=True):
            secs = [float(x) for x in (r.run_secs or [])]
            if secs and max(secs) < 1e9:
                self.seen.append((s, t, sum(secs) / len(secs), task, *info))
        if self.update_steps and len(self.seen) >= 4:
            data = self._data(self.seen)
            if isinstance(self.model, TorchCostModel):
                from .train import train

                rng = np.random.default_rng(len(data))
                rows = np.sort(rng.choice(len(data), min(len(data), self.update_rows), False))
                inputs = self.model._inputs(data, rows)  # as its offline training saw them
                train(self.model.net, inputs, rows, "pairwise", self.update_steps, 64, 1e-4,
                      seed=len(data))  # fmt: skip
            elif isinstance(self.model, XGBCostModel):
                self.model.boost(data, rounds=self.update_steps)

    def _features(self, context, candidates) -> list[tuple[np.ndarray, tuple]]:
        """(per-store features, trace tokens) of each candidate (no tokens for a model that
        does not read them: building them costs about 1 ms a candidate)."""
        stores = [t.numpy() for t in self.extractor.extract_from(context, candidates)]
        none = trace_tokens([], [])
        use = self.model.uses_trace
        tokens = [schedule_tokens(c.sch) if use else none for c in candidates]
        return list(zip(stores, tokens, strict=True))

    def _info(self, context) -> tuple[float, int, str]:
        """(log2 FLOPs, class id, workload hash) of the task being tuned."""
        from tvm.s_tir import analysis

        key = str(ms.database.Workload(context.mod).as_json()[0])
        flops = float(analysis.estimate_tir_flops(context.mod))
        unseen = self.model.class_id("")  # a task whose class is not known: the spare id
        return math.log2(max(flops, 1.0)), self.classes.get(key, unseen), key

    def _data(self, rows: list[tuple]) -> CostData:
        """CostData of (stores, tokens, seconds, group, log2 FLOPs, class id, workload) rows."""
        if not rows:
            raise TranstuneError("no candidates to score")
        stores, tokens, secs, group, log_flops, cls, key = zip(*rows, strict=True)
        latency = np.asarray(secs, dtype=np.float64)
        group = np.asarray(group, dtype=np.int32)
        best = {g: latency[group == g].min() for g in np.unique(group)}
        return CostData(
            stores=np.concatenate(stores).astype(np.float32),
            offsets=np.concatenate([[0], np.cumsum([len(s) for s in stores])]).astype(np.int64),
            hardware=np.tile(self.hardware, (len(rows), 1)),
            log_flops=np.asarray(log_flops, np.float32),
            kernel_class=np.asarray(cls, np.int32),
            latency=latency,
            label=np.asarray(
                [best[g] / t for g, t in zip(group, latency, strict=True)], np.float32
            ),
            group=group,
            workload=np.asarray(key, dtype=object),
            target=np.full(len(rows), "", dtype=object),
            **token_arrays([k for k, _ in tokens], [v for _, v in tokens]),
        )


class MetaScheduleXGB(_Base):
    kind = "ms-xgb"

    def __init__(self, threads: int = 2, early_stopping_rounds: int = 50) -> None:
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
        with _seeded(seed):  # the network's initial weights
            state = mlp_model.State(mlp_model.SegmentSumMLPConfig(input_dim=164))
        config = mlp_model.TrainerConfig()
        if epochs is not None:  # default: MetaSchedule's (50)
            config = config._replace(num_epoch_full=epochs)
        self.trainer = mlp_model.SegmentSumMLPTrainer(config, state)
        self.config = None

    def fit(self, data: CostData, index=None) -> MetaScheduleMLP:
        rows = self._rows(data, index)
        if len(np.unique(data.group[rows])) < 5:
            raise ValueError("MetaSchedule's MLPModel holds out 20% of the groups: give it >= 5")
        for g in np.unique(data.group[rows]):
            members = rows[data.group[rows] == g]
            self.trainer.state.add_to_group(
                data.segments(members), data.latency[members].astype("float32"), str(g)
            )
        with _seeded(self.seed), _step_lr_without_verbose():
            self.trainer.train_full()
        return self

    def predict(self, data: CostData, index=None) -> np.ndarray:
        return self.trainer.predict_incremental(data.segments(self._rows(data, index)))


@contextlib.contextmanager
def _seeded(seed: int):
    """Python's and torch's global generators seeded with ``seed`` inside, the caller's states
    given back after (MetaSchedule's MLP draws from both)."""
    import random

    import torch

    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            random.seed(seed)
            torch.manual_seed(seed)
            yield
    finally:
        random.setstate(state)


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
