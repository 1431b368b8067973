"""Training data for cost models, from a dataset directory.

One row per successfully measured (kernel, schedule, target configuration): the schedule's
per-store program features (a variable number of 164-dim rows), its schedule-primitive tokens
(:mod:`transtune.features.trace`, a variable number), the configuration's hardware descriptor
vector, and workload features (log2 FLOPs, kernel class id). The label follows
TenSet: within each group (one kernel on one configuration) the normalized throughput
``best latency in the group / latency``, in (0, 1], 1 for the group's fastest schedule
(random samples and search-trajectory programs alike; ``source`` tells them apart).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..dataset.store import DatasetStore, ReadReport
from ..features import FEATURE_DIM, TRACE_DIM, trace_tokens
from ..hardware import HardwareDescriptor


@dataclass
class CostData:
    """Arrays of one dataset (see the module docstring); row ``i``'s store features are
    ``stores[offsets[i]:offsets[i + 1]]``, its trace tokens likewise ``token_kind`` and
    ``token_values`` between ``token_offsets[i]`` and ``token_offsets[i + 1]`` (no tokens
    when those are ``None``)."""

    stores: np.ndarray  # (total stores, 164) float32
    offsets: np.ndarray  # (n + 1,) int64
    hardware: np.ndarray  # (n, len(HardwareDescriptor.FEATURES)) float32
    log_flops: np.ndarray  # (n,) float32
    kernel_class: np.ndarray  # (n,) int32, index into ``classes``
    latency: np.ndarray  # (n,) float64 seconds
    label: np.ndarray  # (n,) float32 normalized throughput
    group: np.ndarray  # (n,) int32: one id per (workload, target)
    workload: np.ndarray  # (n,) object: workload hash
    target: np.ndarray  # (n,) object: configuration name
    models: dict[str, list[str]] = field(default_factory=dict)  # workload -> model names
    weights: dict[str, int] = field(default_factory=dict)  # workload -> occurrences
    classes: list[str] = field(default_factory=list)
    sample: np.ndarray | None = None  # (n,) int: the schedule's index in its kernel's samples
    token_kind: np.ndarray | None = None  # (total tokens,) int64
    token_values: np.ndarray | None = None  # (total tokens, TRACE_DIM) float32
    token_offsets: np.ndarray | None = None  # (n + 1,) int64
    source: np.ndarray | None = None  # (n,) object: "random" sample or search "trajectory"

    def __len__(self) -> int:
        return len(self.latency)

    def take(self, index: np.ndarray) -> CostData:
        """The rows ``index`` (groups keep their ids; labels are not renormalized)."""
        index = np.asarray(index, dtype=np.int64)
        rows, offsets = _ragged_take(self.offsets, index)
        tokens = {}
        if self.token_offsets is not None:
            trows, toffsets = _ragged_take(self.token_offsets, index)
            tokens = {"token_kind": self.token_kind[trows], "token_values":
                      self.token_values[trows], "token_offsets": toffsets}  # fmt: skip
        return CostData(
            self.stores[rows], offsets, self.hardware[index],
            self.log_flops[index], self.kernel_class[index], self.latency[index],
            self.label[index], self.group[index], self.workload[index], self.target[index],
            self.models, self.weights, self.classes,
            None if self.sample is None else self.sample[index], **tokens,
            source=None if self.source is None else self.source[index],
        )  # fmt: skip

    def segments(self, index: np.ndarray) -> list[np.ndarray]:
        return [self.stores[self.offsets[i] : self.offsets[i + 1]] for i in index]

    def tokens(self, index: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(kind ids, values) of each row's trace tokens."""
        if self.token_offsets is None:
            return [trace_tokens([], [])] * len(index)
        o = self.token_offsets
        return [(self.token_kind[o[i] : o[i + 1]], self.token_values[o[i] : o[i + 1]])
                for i in index]  # fmt: skip


def standardized_per_group(data: CostData, rows: np.ndarray) -> CostData:
    """``data`` with the store features of rows ``rows`` standardized within each group (one
    kernel on one configuration: mean 0, standard deviation 1 per feature over the group's
    stores among ``rows``; a constant feature becomes 0), so that a model compares a kernel's
    schedules with each other rather than kernels by their scale. Other rows keep theirs."""
    lengths = np.diff(data.offsets)
    owner = np.repeat(np.arange(len(data)), lengths)  # the record of each store row
    chosen = np.zeros(len(data), bool)
    chosen[rows] = True
    picked = np.flatnonzero(chosen[owner])
    stores = data.stores.copy()
    groups = data.group[owner[picked]]
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    for part in np.split(picked[order], bounds):
        x = stores[part]
        std = x.std(0)
        stores[part] = (x - x.mean(0)) / np.where(std > 0, std, 1.0)
    return replace(data, stores=stores)


def _ragged_take(offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The flat positions of rows ``index`` of a ragged array, and their new offsets."""
    starts, ends = offsets[index], offsets[index + 1]
    rows = (
        np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)])
        if len(index)
        else np.zeros(0, np.int64)
    )
    return rows, np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)


def load_cost_data(
    path: str | Path,
    targets: list[str] | None = None,
    report: ReadReport | None = None,
    collected_before: float | None = None,
) -> CostData:
    """Successful records of the dataset at ``path`` (of ``targets``, or all; collected before
    the Unix time ``collected_before``, or all) as arrays."""
    store = DatasetStore(path)
    report = report if report is not None else ReadReport()
    records = store.read(
        "records",
        ["workload", "sample", "space", "decisions", "mean_secs", "status", "source", "collected"],
        report=report,
    )  # fmt: skip
    records = records.filter(pc.equal(records["status"], "ok"))
    if collected_before is not None:
        records = records.filter(pc.less(records["collected"], collected_before))
    if targets:
        wanted = pa.array(targets, pa.string())
        records = records.filter(pc.is_in(records["target"], value_set=wanted))
    feats = store.read("features", report=report).to_pydict()
    by_sample = {
        (w, s): (n, v)
        for w, s, n, v in zip(feats["workload"], feats["sample"], feats["n_stores"],
                              feats["values"], strict=True)
    }  # fmt: skip
    wl = store.read("workloads", ["workload", "kernel_class", "flops"]).to_pydict()
    classes = sorted(set(wl["kernel_class"]))
    info = {
        w: (classes.index(c), f)
        for w, c, f in zip(wl["workload"], wl["kernel_class"], wl["flops"], strict=True)
    }
    sp = store.read("spaces", report=report).to_pydict()
    spaces = {(w, i): t for w, i, t in zip(sp["workload"], sp["space"], sp["insts"], strict=True)}
    hw_vec = {i: HardwareDescriptor.from_dict(d).vector() for i, d in store.hardware().items()}
    stores, lengths, keep, kinds, token_values = [], [], [], [], []
    parsed: dict[tuple[str, int], list] = {}  # a space's instructions, parsed once
    rows = records.to_pydict()
    for i, (w, s, t, space, decisions) in enumerate(
        zip(*(rows[c] for c in ("workload", "sample", "target", "space", "decisions")),
            strict=True)
    ):  # fmt: skip
        if (w, s) in by_sample and w in info and t in hw_vec and (w, space) in spaces:
            n, values = by_sample[w, s]
            stores.append(np.asarray(values, np.float32).reshape(n, FEATURE_DIM))
            lengths.append(n)
            if (w, space) not in parsed:
                parsed[w, space] = json.loads(spaces[w, space])
            kind, value = trace_tokens(parsed[w, space], json.loads(decisions))
            kinds.append(kind)
            token_values.append(value)
            keep.append(i)
    report.skipped_rows += len(rows["workload"]) - len(keep)
    keep = np.asarray(keep, dtype=np.int64)
    workload = np.asarray(rows["workload"], dtype=object)[keep]
    target = np.asarray(rows["target"], dtype=object)[keep]
    latency = np.asarray(rows["mean_secs"], dtype=np.float64)[keep]
    keys = [f"{w}|{t}" for w, t in zip(workload, target, strict=True)]
    _, group = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    best = np.full(group.max() + 1 if len(group) else 0, math.inf)
    np.minimum.at(best, group, latency)
    occurrences = store.occurrences()
    models = {w: sorted({m.split("@")[0] for m in tags}) for w, tags in occurrences.items()}
    weights = {w: int(sum(tags.values())) for w, tags in occurrences.items()}
    return CostData(
        stores=np.concatenate(stores) if stores else np.zeros((0, FEATURE_DIM), np.float32),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        hardware=np.stack([hw_vec[t] for t in target])
        if len(target)
        else np.zeros((0, len(HardwareDescriptor.FEATURES)), np.float32),
        log_flops=np.asarray([math.log2(max(info[w][1], 1.0)) for w in workload], np.float32),
        kernel_class=np.asarray([info[w][0] for w in workload], np.int32),
        latency=latency,
        label=(best[group] / latency).astype(np.float32),
        group=group.astype(np.int32),
        workload=workload,
        target=target,
        models=models,
        weights=weights,
        classes=classes,
        sample=np.asarray(rows["sample"], dtype=np.int64)[keep],
        **token_arrays(kinds, token_values),
        source=np.asarray(rows["source"], dtype=object)[keep],
    )


def token_arrays(kinds: list[np.ndarray], values: list[np.ndarray]) -> dict:
    """CostData's token fields from per-row (kind ids, values)."""
    lengths = [len(k) for k in kinds]
    return {
        "token_kind": np.concatenate(kinds) if kinds else np.zeros(0, np.int64),
        "token_values": np.concatenate(values) if values else np.zeros((0, TRACE_DIM), np.float32),
        "token_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    }
