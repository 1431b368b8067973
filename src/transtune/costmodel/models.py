"""Cost models with scikit-learn's shape: ``fit(data, index)``, ``predict(data, index)``
(scores, higher = faster), ``score(data, index)`` (metrics), ``save(path)``, :func:`load`.

- :class:`XGBCostModel`: TenSet/MetaSchedule-style XGBoost over "pack-sum" features (each
  schedule's per-store features summed, plus log store count), with the hardware vector and
  log FLOPs appended; pairwise ranking objective within groups, or regression.
- :class:`TorchCostModel`: a network from :mod:`.nets` (``mlp``: TenSet's segment-sum MLP,
  ``attention``: ours) trained by :mod:`.train`.

Saved files carry the model kind, a format version and the config.
"""

from __future__ import annotations

import copy
import io
import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from ..errors import TranstuneError
from ..files import write_text_atomic
from .data import CostData, standardized_per_group
from .metrics import evaluate

FORMAT_VERSION = 2  # 2: the attention network reads trace tokens


class CostModelError(TranstuneError):
    """A checkpoint that is not a transtune cost model, or of another format version."""


class _Base:
    kind = ""
    uses_trace = False  # whether predictions read the trace tokens

    def _rows(self, data: CostData, index) -> np.ndarray:
        return np.arange(len(data)) if index is None else np.asarray(index, dtype=np.int64)

    def score(self, data: CostData, index=None) -> dict[str, float]:
        rows = self._rows(data, index)
        return evaluate(self.predict(data, rows), data.latency[rows], data.group[rows])

    classes: list[str] = []  # kernel classes of the training data (the class ids' meaning)
    trained_on: list[str] = []  # hardware ids of the records it was trained on

    def class_id(self, kernel_class: str) -> int:
        """The id this model knows ``kernel_class`` by; a class it never saw gets the spare
        id ``len(classes)`` (not 0, which is a real class)."""
        try:
            return self.classes.index(kernel_class)
        except ValueError:
            return len(self.classes)

    def _note_hardware(self, data: CostData, rows: np.ndarray) -> None:
        self.trained_on = sorted(set(self.trained_on) | {str(t) for t in data.target[rows]})

    def _aligned(self, data: CostData) -> CostData:
        """``data`` with its class ids renumbered to mean this model's ``classes`` (a class the
        model never saw gets a spare id); data without a class list is taken as is."""
        if not self.classes or not data.classes or list(data.classes) == self.classes:
            return data
        lookup = np.asarray([self.class_id(c) for c in data.classes], np.int32)
        return replace(data, kernel_class=lookup[data.kernel_class], classes=list(self.classes))

    def _header(self) -> dict:
        return {"kind": self.kind, "format": FORMAT_VERSION, "config": asdict(self.config),
                "classes": self.classes, "trained_on": self.trained_on}  # fmt: skip

    def payload(self) -> dict:
        """What :meth:`save` writes (and :func:`load` reads), as one JSON object."""
        raise CostModelError(f"a {self.kind} model is not saved")

    def save(self, path: str | Path) -> None:
        write_text_atomic(path, json.dumps(self.payload()))


@dataclass
class XGBConfig:
    objective: str = "rank:pairwise"  # or "reg:squarederror" on the normalized throughput
    n_estimators: int = 300
    max_depth: int = 8
    learning_rate: float = 0.1
    subsample: float = 0.8
    seed: int = 0
    threads: int = 2

    def params(self) -> dict:
        """The booster parameters ``xgboost.train`` takes."""
        return {"objective": self.objective, "max_depth": self.max_depth,
                "eta": self.learning_rate, "subsample": self.subsample, "seed": self.seed,
                "nthread": self.threads, "tree_method": "hist"}  # fmt: skip


def pack_sum(data: CostData, rows: np.ndarray) -> np.ndarray:
    """Per row: the sum of its store features, log2(store count + 1), hardware vector and log
    FLOPs."""
    lengths = np.diff(data.offsets)
    sums = np.zeros((len(data), data.stores.shape[1]), np.float32)
    filled = np.flatnonzero(lengths > 0)
    if len(filled):  # reduceat sums up to the next listed offset: list only non-empty rows
        sums[filled] = np.add.reduceat(data.stores, data.offsets[filled], axis=0)
    return np.hstack(
        [sums[rows], np.log2(lengths[rows] + 1)[:, None], data.hardware[rows],
         data.log_flops[rows, None]]
    ).astype(np.float32)  # fmt: skip


class XGBCostModel(_Base):
    kind = "xgb"

    def __init__(self, config: XGBConfig | None = None) -> None:
        self.config = config or XGBConfig()
        self.booster = None

    def fit(self, data: CostData, index=None, rounds: int | None = None, warm=False):
        import xgboost as xgb

        rows = self._rows(data, index)
        rows = rows[np.argsort(data.group[rows], kind="stable")]  # ranking needs grouped rows
        self.classes = self.classes or list(data.classes)
        self._note_hardware(data, rows)
        c = self.config
        matrix = xgb.DMatrix(pack_sum(data, rows), label=data.label[rows])
        if c.objective.startswith("rank:"):
            matrix.set_group(np.unique(data.group[rows], return_counts=True)[1])
        self.booster = xgb.train(
            c.params(), matrix, num_boost_round=rounds or c.n_estimators,
            xgb_model=self.booster if warm else None,
        )  # fmt: skip
        return self

    def predict(self, data: CostData, index=None) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(pack_sum(data, self._rows(data, index))))

    def boost(self, data: CostData, index=None, rounds: int = 20) -> XGBCostModel:
        """Continue boosting on ``data`` (``rounds`` more trees): online updates in a search."""
        return self.fit(data, index, rounds=rounds, warm=True)

    def payload(self) -> dict:
        return {**self._header(), "booster": self.booster.save_raw("json").decode()}

    @classmethod
    def _from(cls, payload: dict) -> XGBCostModel:
        import xgboost as xgb

        model = cls(XGBConfig(**payload["config"]))
        model.booster = xgb.Booster()
        model.booster.load_model(bytearray(payload["booster"].encode()))
        model.classes = payload.get("classes", [])
        model.trained_on = payload.get("trained_on", [])
        return model


@dataclass
class TorchConfig:
    arch: str = "attention"  # or "mlp"
    loss: str = "pairwise"  # or "lambdarank", "regression"
    epochs: int = 30
    lr: float = 1e-3
    weight_decay: float = 1e-4
    groups_per_batch: int = 16
    seed: int = 0
    net: dict = field(default_factory=dict)  # keyword arguments of the network
    validation: float = 0.0  # share of the kernels (or programs) held out to pick the epoch
    per_task: bool = False  # store features standardized within each group (kernel, config)


class TorchCostModel(_Base):
    kind = "torch"

    def __init__(self, config: TorchConfig | None = None) -> None:
        from .nets import NETS

        self.config = config or TorchConfig()
        if self.config.arch not in NETS:
            raise CostModelError(f"unknown architecture {self.config.arch!r}")
        import torch

        with torch.random.fork_rng():  # seeded weights; the caller's RNG stays as it was
            torch.manual_seed(self.config.seed)
            self.net = NETS[self.config.arch](**self.config.net)
        self.history: dict = {}

    @property
    def uses_trace(self) -> bool:
        return bool(getattr(self.net, "trace", False))

    def fit(self, data: CostData, index=None, on_epoch=None) -> TorchCostModel:
        from .train import train

        c = self.config
        self.classes = self.classes or list(data.classes)
        rows = self._rows(data, index)
        inputs = self._inputs(data, rows)
        train_rows, held = _hold_out(data, rows, c.validation, c.seed)
        self.history = train(
            self.net, inputs, train_rows, c.loss, c.epochs, c.groups_per_batch, c.lr,
            c.weight_decay, c.seed, on_epoch, held,
        )  # fmt: skip
        if self.history.get("best_epoch") != -1:  # -1: the weights it started from were kept
            self._note_hardware(data, rows)
        return self

    def fine_tuned(self, data: CostData, index=None) -> TorchCostModel:
        """A copy adapted to rows ``index`` (a few records of a new CPU, say): a third of
        training's epochs (at least 5) at a tenth of the learning rate, the epoch picked on a
        fifth of the kernels held out; the starting weights are kept when no epoch beats them
        on those (and ``trained_on`` then stays as it was, as after any such ``fit``)."""
        tuned = copy.deepcopy(self)
        c = tuned.config
        c.epochs, c.lr, c.validation = max(5, c.epochs // 3), c.lr / 10, 0.2
        return tuned.fit(data, index)

    def predict(self, data: CostData, index=None) -> np.ndarray:
        from .train import predict

        rows = self._rows(data, index)
        return predict(self.net, self._inputs(data, rows), rows)

    def _inputs(self, data: CostData, rows: np.ndarray) -> CostData:
        """What the network reads of rows ``rows``: class ids in this model's meaning, and
        with ``per_task`` the store features standardized within each group."""
        data = self._aligned(data)
        return standardized_per_group(data, rows) if self.config.per_task else data

    def payload(self) -> dict:
        import torch

        buffer = io.BytesIO()
        torch.save(self.net.state_dict(), buffer)
        state = buffer.getvalue().hex()
        return {**self._header(), "state": state}

    @classmethod
    def _from(cls, payload: dict) -> TorchCostModel:
        import torch

        model = cls(TorchConfig(**payload["config"]))
        state = torch.load(io.BytesIO(bytes.fromhex(payload["state"])), weights_only=True)
        model.net.load_state_dict(state)
        model.classes = payload.get("classes", [])
        model.trained_on = payload.get("trained_on", [])
        return model


def _hold_out(data: CostData, rows: np.ndarray, share: float, seed: int):
    """(training rows, validation rows): ``share`` of the kernels (workloads) held out, so
    that the epoch is picked on kernels the model does not train on; with fewer than 5
    kernels, ``share`` of each kernel's programs instead (None: no validation)."""
    if share <= 0:
        return rows, None
    kernels = np.unique(data.workload[rows])
    rng = np.random.default_rng(seed)
    if len(kernels) >= 5:
        held = rng.choice(kernels, max(1, round(share * len(kernels))), replace=False)
        mask = np.isin(data.workload[rows], held)
    else:
        mask = rng.random(len(rows)) < share
    return rows[~mask], rows[mask]


class EnsembleModel(_Base):
    """Several cost models as one: a row's score is the weighted mean of its members' scores,
    each standardized within the row's group (within a group only the order means anything,
    and members score on different scales)."""

    kind = "ensemble"

    def __init__(self, members: list, weights: list[float] | None = None) -> None:
        self.members = members
        self.weights = list(weights or [1.0] * len(members))
        self.config = None

    @property
    def uses_trace(self) -> bool:
        return any(m.uses_trace for m in self.members)

    def fit(self, data: CostData, index=None) -> EnsembleModel:
        for m in self.members:
            m.fit(data, index)
        self.classes, self.trained_on = self.members[0].classes, self.members[0].trained_on
        return self

    def predict(self, data: CostData, index=None) -> np.ndarray:
        rows = self._rows(data, index)
        group = data.group[rows]
        total = np.zeros(len(rows))
        for m, w in zip(self.members, self.weights, strict=True):
            total += w * _standardized(np.asarray(m.predict(data, rows), float), group)
        return total / sum(self.weights)

    def payload(self) -> dict:
        return {"kind": self.kind, "format": FORMAT_VERSION, "weights": self.weights,
                "members": [m.payload() for m in self.members]}  # fmt: skip

    @classmethod
    def _from(cls, payload: dict) -> EnsembleModel:
        members = [KINDS[p["kind"]]._from(p) for p in payload["members"]]
        model = cls(members, payload["weights"])
        model.classes, model.trained_on = members[0].classes, members[0].trained_on
        return model


def _standardized(score: np.ndarray, group: np.ndarray) -> np.ndarray:
    """``score`` minus its group's mean, over its group's standard deviation (0 if constant)."""
    out = np.zeros_like(score)
    for g in np.unique(group):
        s = score[group == g]
        std = s.std()
        out[group == g] = (s - s.mean()) / (std if std > 0 else 1.0)
    return out


KINDS = {"xgb": XGBCostModel, "torch": TorchCostModel, "ensemble": EnsembleModel}
NAMES = ("xgb", "mlp", "attention", "ms-xgb", "ms-mlp", "lookup", "lookup-residual", "ensemble")


def _options_of(name: str, options: dict) -> dict:
    """The ``options`` that configure a member ``name`` (its config's fields)."""
    config = {"xgb": XGBConfig, "mlp": TorchConfig, "attention": TorchConfig}.get(name)
    known = {f.name for f in fields(config)} if config else set()
    return {k: v for k, v in options.items() if k in known}


def create(name: str, seed: int = 0, epochs: int | None = None, **options) -> _Base:
    """A new, untrained cost model by name (as TVM's ``CostModel.create``): ``xgb``, ``mlp``
    or ``attention`` (ours; ``options`` are :class:`XGBConfig` or :class:`TorchConfig`
    fields, e.g. ``net={"trace": False}``), ``ms-xgb`` or ``ms-mlp`` (MetaSchedule's own, as
    peers; they import TVM), ``lookup`` (the cross-hardware baseline; ``source=`` the
    hardware id whose latencies it reuses), ``lookup-residual`` (the lookup plus a learned
    correction; ``source=``), ``ensemble`` (``members=`` names, default
    attention and xgb; ``weights=``). ``epochs``: of the torch models (None: their
    default)."""
    torch_epochs = {} if epochs is None else {"epochs": epochs}
    if name == "xgb":
        return XGBCostModel(XGBConfig(seed=seed, **options))
    if name in ("mlp", "attention"):
        return TorchCostModel(TorchConfig(arch=name, seed=seed, **torch_epochs, **options))
    if name in ("ms-xgb", "ms-mlp"):
        from .metaschedule import MetaScheduleMLP, MetaScheduleXGB

        if name == "ms-xgb":
            return MetaScheduleXGB(**options)
        return MetaScheduleMLP(seed=seed, epochs=epochs)
    if name == "lookup":
        from .lookup import LookupModel

        return LookupModel(**options)
    if name == "lookup-residual":
        from .lookup import LookupResidualModel

        return LookupResidualModel(seed=seed, **options)
    if name == "ensemble":  # members=("attention", "xgb"), weights=None, each created by name
        members = options.pop("members", ("attention", "xgb"))
        weights = options.pop("weights", None)
        made = [create(m, seed=seed, epochs=epochs, **_options_of(m, options)) for m in members]
        return EnsembleModel(made, weights)
    raise CostModelError(f"unknown cost model {name!r} (one of {', '.join(NAMES)})")


def load(path: str | Path) -> XGBCostModel | TorchCostModel:
    """A saved cost model (checks kind and format version)."""
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CostModelError(f"{path} is not a transtune cost model: {err}") from None
    if not isinstance(payload, dict) or payload.get("kind") not in KINDS:
        raise CostModelError(f"{path} is not a transtune cost model")
    if payload.get("format") != FORMAT_VERSION:
        found = payload.get("format")
        raise CostModelError(f"{path}: cost model format {found}, this reads {FORMAT_VERSION}")
    try:
        return KINDS[payload["kind"]]._from(payload)
    except Exception as err:  # a valid header over a damaged body
        raise CostModelError(f"{path}: a damaged {payload['kind']} cost model: {err}") from None
