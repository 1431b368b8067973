"""Cost model metrics with TenSet's definitions, per group (one kernel on one configuration)
and aggregated weighted by each group's record count.

Predictions are scores: higher means faster.

- pairwise comparison accuracy (PCA): over all pairs of a group's records with different
  latencies, the fraction the scores order correctly;
- peak@k (TenSet's ``metric_peak_score``): the mean, over the first 1..k of the group's
  top-scored records, of best latency / best latency among those picks so far (the max-curve
  of normalized throughput, averaged); peak@1 is best / latency of the top-scored record;
- top-k recall: the share of the group's k fastest records among its k top-scored ones;
- network top-k score: sum over a network's kernels of weight x best latency, divided by the
  same sum taking each kernel's best among its k top-scored records.
"""

from __future__ import annotations

import numpy as np


def _groups(group: np.ndarray):
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    return np.split(order, bounds)


def per_group(score: np.ndarray, latency: np.ndarray, group: np.ndarray, ks=(1, 5)) -> dict:
    """Per-group metric arrays and group sizes."""
    pca, sizes, peaks, recalls = [], [], {k: [] for k in ks}, {k: [] for k in ks}
    for idx in _groups(group):
        s, lat = score[idx], latency[idx]
        sizes.append(len(idx))
        ds = np.sign(s[:, None] - s[None, :])
        dl = np.sign(lat[None, :] - lat[:, None])  # +1 where row i is faster than column j
        valid = dl != 0
        pca.append(float((ds[valid] == dl[valid]).mean()) if valid.any() else np.nan)
        by_score = np.argsort(-s, kind="stable")
        by_latency = np.argsort(lat, kind="stable")
        for k in ks:
            so_far = np.minimum.accumulate(lat[by_score[:k]])
            peaks[k].append(float(np.mean(lat.min() / so_far)))
            kk = min(k, len(idx))
            recalls[k].append(len(set(by_score[:kk]) & set(by_latency[:kk])) / kk)
    return {"pca": np.asarray(pca), "size": np.asarray(sizes), "peak": peaks, "recall": recalls}


def evaluate(score: np.ndarray, latency: np.ndarray, group: np.ndarray, ks=(1, 5)) -> dict:
    """Record-weighted means: ``pca``, ``peak@k``, ``recall@k``."""
    if len(score) == 0:
        return {}
    g = per_group(score, latency, group, ks)
    w = g["size"].astype(float)
    ok = ~np.isnan(g["pca"])
    out = {"pca": float(np.average(g["pca"][ok], weights=w[ok])) if ok.any() else float("nan")}
    for k in ks:
        out[f"peak@{k}"] = float(np.average(g["peak"][k], weights=w))
        out[f"recall@{k}"] = float(np.average(g["recall"][k], weights=w))
    return out


def network_topk(
    score: np.ndarray, latency: np.ndarray, group: np.ndarray, weight: np.ndarray, k: int = 1
) -> float:
    """TenSet's network-level top-k score over the groups present (``weight`` per row: the
    kernel's occurrences in the network)."""
    best = chosen = 0.0
    for idx in _groups(group):
        lat, s = latency[idx], score[idx]
        top = np.argsort(-s, kind="stable")[:k]
        best += weight[idx[0]] * lat.min()
        chosen += weight[idx[0]] * lat[top].min()
    return best / chosen if chosen else float("nan")
