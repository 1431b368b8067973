"""Train/test splits of a dataset's records (TenSet's strategies and two more).

Each takes the per-record ``workload`` and ``target`` arrays (plus what it needs) and returns
(train indices, test indices), deterministic in ``seed``:

- ``within_task``: a random share of each (kernel, configuration) group's records is held out
  (the model has seen every kernel; TenSet's default evaluation);
- ``by_task``: a random share of the kernels is held out entirely;
- ``by_model``: every kernel that occurs in the held-out networks is held out (TenSet holds
  out ResNet-50, MobileNetV2, ResNeXt-50, BERT-tiny and BERT-base);
- ``by_hardware``: every record of the held-out configurations is held out.

:func:`make` picks one by name (as the CLI and the benchmarks name them).
"""

from __future__ import annotations

import numpy as np

TENSET_HELD_OUT = ("resnet50", "mobilenet_v2", "resnext50_32x4d", "bert_tiny", "bert_base")


def within_task(workload, target, test_share: float = 0.2, seed: int = 0):
    rng = np.random.default_rng(seed)
    keys = np.asarray([f"{w}|{t}" for w, t in zip(workload, target, strict=True)], dtype=object)
    _, group = np.unique(keys, return_inverse=True)
    order = np.argsort(group, kind="stable")
    test = np.zeros(len(keys), dtype=bool)
    for idx in np.split(order, np.flatnonzero(np.diff(group[order])) + 1):
        n = int(round(test_share * len(idx)))
        test[rng.choice(idx, size=n, replace=False)] = True
    return _split(test)


def by_task(workload, test_share: float = 0.2, seed: int = 0):
    rng = np.random.default_rng(seed)
    kernels = np.unique(np.asarray(workload, dtype=object))
    held = set(rng.choice(kernels, size=int(round(test_share * len(kernels))), replace=False))
    return _split(np.asarray([w in held for w in workload]))


def by_model(workload, models: dict[str, list[str]], held_out=TENSET_HELD_OUT):
    held = set(held_out)
    return _split(np.asarray([bool(held.intersection(models.get(w, ()))) for w in workload]))


def by_hardware(target, held_out: list[str]):
    return _split(np.isin(np.asarray(target, dtype=object), list(held_out)))


NAMES = ("within-task", "by-task", "by-model", "by-hardware", "none")


def make(name: str, data, held_out=None, test_share: float = 0.2, seed: int = 0):
    """(train, test) indices of the records of ``data`` (a ``CostData``, or anything with its
    ``workload``, ``target`` and ``models``) by split name; ``held_out``: the models
    (``by-model``, default TenSet's) or configuration names (``by-hardware``) held out;
    ``none``: train and test on everything."""
    if name == "within-task":
        return within_task(data.workload, data.target, test_share, seed)
    if name == "by-task":
        return by_task(data.workload, test_share, seed)
    if name == "by-model":
        return by_model(
            data.workload, data.models, TENSET_HELD_OUT if held_out is None else held_out
        )
    if name == "by-hardware":
        if not held_out:
            raise ValueError("the by-hardware split needs the configurations it holds out")
        return by_hardware(data.target, held_out)
    if name == "none":
        everything = np.arange(len(data.workload))
        return everything, everything
    raise ValueError(f"unknown split {name!r} (one of {', '.join(NAMES)})")


def _split(test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.flatnonzero(~test), np.flatnonzero(test)
