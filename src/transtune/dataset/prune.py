"""Dataset pruning: which measured programs a cost model needs at all.

A *program* is one sampled schedule of one kernel (``(workload, sample)``); it is measured on
every configuration, so pruning programs is what saves measurement time when collecting for
a new configuration. Every strategy is a named function ``(programs, keep, seed) -> mask``
over the programs table (one row per program: workload, sample, class, FLOPs, pack-sum
features, and the normalized throughput on the reference configuration), deterministic in
``seed``; ``keep`` is the fraction of programs to keep.

- ``subsample``: the same random fraction of every kernel's programs;
- ``dedup``: drops programs whose features equal an earlier one's of the same kernel (they
  look identical to a cost model), then subsamples to ``keep``;
- ``kernels``: keeps whole kernels, spread evenly over log FLOPs within each class (drops the
  near-redundant batch-size and width variants of a workload class);
- ``diversity``: per kernel, k-means on the standardized features, keeping the program nearest
  each centroid (``k = keep x programs``);
- ``uncertainty``: active learning. Half of the budget is a random start; a bootstrap ensemble
  of small XGBoost models trained on it scores the rest, and the programs they disagree on
  most (the highest spread of predictions) fill the other half;
- ``exploit``: active learning as a search does it. The same random half and ensemble; then
  each kernel's programs the ensemble predicts fastest fill its other half, so that the data
  hold what a cost model must rank within a search: the near-best programs of each kernel.

Strategies combine with ``+`` (``dedup+diversity``): each one filters what the previous kept,
and the last one brings it to ``keep`` of the original count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..features import FEATURE_DIM
from .store import DatasetError, DatasetStore


@dataclass
class Programs:
    """One row per program of a dataset."""

    workload: np.ndarray  # object
    sample: np.ndarray  # int
    kernel_class: np.ndarray  # object
    flops: np.ndarray  # float
    features: np.ndarray  # (n, 164 + 1) pack-sum and log2 store count
    label: np.ndarray  # normalized throughput on the reference configuration (nan if none)

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index: np.ndarray) -> Programs:
        names = ("workload", "sample", "kernel_class", "flops", "features", "label")
        return Programs(*(getattr(self, name)[index] for name in names))


Strategy = Callable[[Programs, float, int], np.ndarray]


def _by_kernel(programs: Programs):
    for w in np.unique(programs.workload):
        yield np.flatnonzero(programs.workload == w)


def subsample(programs: Programs, keep: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(programs), bool)
    for idx in _by_kernel(programs):
        n = max(1, int(round(keep * len(idx))))
        mask[rng.choice(idx, size=min(n, len(idx)), replace=False)] = True
    return mask


def dedup(programs: Programs, keep: float, seed: int = 0) -> np.ndarray:
    mask = np.zeros(len(programs), bool)
    for idx in _by_kernel(programs):
        _, first = np.unique(np.round(programs.features[idx], 4), axis=0, return_index=True)
        mask[idx[first]] = True
    return _limit(programs, mask, keep, seed)


def kernels(programs: Programs, keep: float, seed: int = 0) -> np.ndarray:
    mask = np.zeros(len(programs), bool)
    for cls in np.unique(programs.kernel_class):
        members = np.unique(programs.workload[programs.kernel_class == cls])
        flops = {w: programs.flops[programs.workload == w][0] for w in members}
        ordered = sorted(members, key=lambda w: (flops[w], w))
        n = max(1, int(round(keep * len(ordered))))
        picks = {ordered[int(round(i))] for i in np.linspace(0, len(ordered) - 1, n)}
        mask |= np.isin(programs.workload, list(picks))
    return mask


def diversity(programs: Programs, keep: float, seed: int = 0) -> np.ndarray:
    mask = np.zeros(len(programs), bool)
    for idx in _by_kernel(programs):
        k = max(1, int(round(keep * len(idx))))
        x = programs.features[idx]
        x = (x - x.mean(0)) / (x.std(0) + 1e-6)
        mask[idx[_kmeans_nearest(x, k, seed)]] = True
    return mask


def _ensemble(programs: Programs, labelled: np.ndarray, rows: np.ndarray, seed: int,
              members: int = 4) -> np.ndarray:  # fmt: skip
    """(members, len(rows)) predictions of a bootstrap ensemble of small XGBoost models
    trained on the ``labelled`` programs."""
    import xgboost as xgb

    rng = np.random.default_rng(seed)
    train = np.flatnonzero(labelled)
    preds = []
    for m in range(members):
        boot = rng.choice(train, size=len(train), replace=True)
        params = {"max_depth": 6, "eta": 0.3, "seed": seed + m, "nthread": 2, "subsample": 0.8}
        booster = xgb.train(
            params, xgb.DMatrix(programs.features[boot], label=programs.label[boot]), 30
        )
        preds.append(booster.predict(xgb.DMatrix(programs.features[rows])))
    return np.asarray(preds)


def uncertainty(programs: Programs, keep: float, seed: int = 0) -> np.ndarray:
    start = subsample(programs, keep / 2, seed)
    labelled = start & ~np.isnan(programs.label)
    budget = int(round(keep * len(programs))) - int(start.sum())
    rest = np.flatnonzero(~start)
    if budget <= 0 or not len(rest):
        return start
    if labelled.sum() < 4:  # too few measured to learn from: a random draw of the whole share
        return subsample(programs, keep, seed)
    spread = _ensemble(programs, labelled, rest, seed).std(axis=0)
    mask = start.copy()
    mask[rest[np.argsort(-spread, kind="stable")[:budget]]] = True
    return mask


def exploit(programs: Programs, keep: float, seed: int = 0) -> np.ndarray:
    start = subsample(programs, keep / 2, seed)
    labelled = start & ~np.isnan(programs.label)
    if labelled.sum() < 4:  # too few measured to learn from: a random draw of the whole share
        return subsample(programs, keep, seed)
    rest = np.flatnonzero(~start)
    predicted = np.full(len(programs), -np.inf)
    predicted[rest] = _ensemble(programs, labelled, rest, seed).mean(axis=0)
    mask = start.copy()
    for idx in _by_kernel(programs):
        n = max(1, int(round(keep * len(idx)))) - int(mask[idx].sum())
        todo = idx[~mask[idx]]
        if n > 0:
            mask[todo[np.argsort(-predicted[todo], kind="stable")[:n]]] = True
    return mask


STRATEGIES: dict[str, Strategy] = {
    "subsample": subsample,
    "dedup": dedup,
    "kernels": kernels,
    "diversity": diversity,
    "uncertainty": uncertainty,
    "exploit": exploit,
}


def select(programs: Programs, strategy: str, keep: float, seed: int = 0) -> np.ndarray:
    """Mask of the programs ``strategy`` (names joined by ``+``) keeps."""
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    names = strategy.split("+")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown pruning strategy {unknown[0]!r}; known: {', '.join(STRATEGIES)}")
    mask = np.ones(len(programs), bool)
    for i, name in enumerate(names):
        idx = np.flatnonzero(mask)
        last = i == len(names) - 1
        share = min(1.0, keep * len(programs) / max(1, len(idx))) if last else 1.0
        sub = STRATEGIES[name](programs.take(idx), share, seed)
        mask = np.zeros(len(programs), bool)
        mask[idx[sub]] = True
    return mask


def load_programs(path: str | Path, reference: str | None = None) -> Programs:
    """The programs of a dataset, labelled on ``reference`` (default: its first target)."""
    store = DatasetStore(path)
    feats = store.read("features").to_pydict()
    workloads = store.read("workloads", ["workload", "kernel_class", "flops"]).to_pydict()
    info = dict(zip(workloads["workload"], zip(workloads["kernel_class"], workloads["flops"],
                                               strict=True), strict=True))  # fmt: skip
    reference = reference or (store.targets() or [None])[0]
    records = store.read("records", ["workload", "sample", "mean_secs", "status"], reference)
    records = records.filter(pc.equal(records["status"], "ok")).to_pydict()
    secs = dict(zip(zip(records["workload"], records["sample"], strict=True),
                    records["mean_secs"], strict=True))  # fmt: skip
    best: dict[str, float] = {}
    for (w, _), t in secs.items():
        best[w] = min(best.get(w, math.inf), t)
    rows = [i for i, w in enumerate(feats["workload"]) if w in info]
    features = np.zeros((len(rows), FEATURE_DIM + 1), np.float32)
    for j, i in enumerate(rows):
        stores = np.asarray(feats["values"][i], np.float32).reshape(-1, FEATURE_DIM)
        features[j, :FEATURE_DIM] = stores.sum(0)
        features[j, FEATURE_DIM] = math.log2(len(stores) + 1)
    workload = np.asarray([feats["workload"][i] for i in rows], dtype=object)
    sample = np.asarray([feats["sample"][i] for i in rows], dtype=np.int64)
    label = [
        best[w] / secs[w, s] if (w, s) in secs else math.nan
        for w, s in zip(workload, sample, strict=True)
    ]
    return Programs(
        workload, sample, np.asarray([info[w][0] for w in workload], dtype=object),
        np.asarray([info[w][1] for w in workload], dtype=np.float64), features,
        np.asarray(label, dtype=np.float32),
    )  # fmt: skip


def prune(src: str | Path, out: str | Path, strategy: str, keep: float, seed: int = 0) -> dict:
    """Write the programs ``strategy`` keeps (on every configuration) as a new dataset."""
    if Path(out).exists() and any(Path(out).iterdir()):  # never append to a dataset
        raise DatasetError(f"{out} exists and is not empty; prune writes a new dataset")
    programs = load_programs(src)
    mask = select(programs, strategy, keep, seed)
    kept = set(zip(programs.workload[mask], programs.sample[mask].tolist(), strict=True))
    workloads = {w for w, _ in kept}
    source = DatasetStore(src)
    target = DatasetStore(out, create=True, meta={**source.meta, "pruned": {
        "from": str(src), "strategy": strategy, "keep": keep, "seed": seed}})  # fmt: skip
    target.write("hardware", source.read("hardware").to_pylist())
    for table in ("workloads", "occurrences", "spaces"):
        rows = source.read(table)
        target.write(
            table, rows.filter(pc.is_in(rows["workload"], pa.array(sorted(workloads)))).to_pylist()
        )
    target.write("features", _programs_of(source.read("features"), kept))
    records = 0
    for name in source.targets():
        rows = _programs_of(source.read("records", target=name).drop_columns(["target"]), kept)
        target.write("records", rows, name)
        records += len(rows)
    return {"programs": int(mask.sum()), "of": len(programs), "records": records}


def _programs_of(table: pa.Table, kept: set) -> list[dict]:
    return [r for r in table.to_pylist() if (r["workload"], r["sample"]) in kept]


def _limit(programs: Programs, mask: np.ndarray, keep: float, seed: int) -> np.ndarray:
    """``mask`` cut down (randomly, per kernel) to ``keep`` of all programs, if above it."""
    idx = np.flatnonzero(mask)
    share = keep * len(programs) / max(1, len(idx))
    if share >= 1:
        return mask
    out = np.zeros(len(programs), bool)
    out[idx[subsample(programs.take(idx), share, seed)]] = True
    return out


def _kmeans_nearest(x: np.ndarray, k: int, seed: int, iters: int = 20) -> np.ndarray:
    """Indices of the points nearest each of ``k`` k-means centroids (k-means++ start)."""
    if k >= len(x):
        return np.arange(len(x))
    rng = np.random.default_rng(seed)
    centers = [x[rng.integers(len(x))]]
    for _ in range(k - 1):
        d = np.min([((x - c) ** 2).sum(1) for c in centers], axis=0)
        centers.append(
            x[rng.choice(len(x), p=d / d.sum())] if d.sum() > 0 else x[rng.integers(len(x))]
        )
    centers = np.asarray(centers)
    for _ in range(iters):
        assign = np.argmin(((x[:, None] - centers[None]) ** 2).sum(2), axis=1)
        for j in range(k):
            if (assign == j).any():
                centers[j] = x[assign == j].mean(0)
    nearest = np.argmin(((x[:, None] - centers[None]) ** 2).sum(2), axis=0)
    return np.unique(nearest)
