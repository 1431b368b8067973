"""Ranking and regression losses over groups (one kernel on one configuration).

``score``: model outputs (higher = faster); ``label``: normalized throughput in (0, 1];
``group``: group id per row. Only pairs inside a group are compared.
"""

from __future__ import annotations

import torch


def _pairs(label: torch.Tensor, group: torch.Tensor):
    same = group[:, None] == group[None, :]
    better = label[:, None] > label[None, :]
    return same & better  # [i, j]: i is faster than j, same group


def pairwise(score: torch.Tensor, label: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """RankNet: mean logistic loss of every ordered pair."""
    mask = _pairs(label, group)
    if not mask.any():
        return score.sum() * 0.0
    diff = score[:, None] - score[None, :]
    return torch.nn.functional.softplus(-diff[mask]).mean()


def lambdarank(score: torch.Tensor, label: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """LambdaRank: pairwise logistic loss weighted by the NDCG change of swapping the pair
    (gain = label, rank discount from the current scores), normalized per group."""
    mask = _pairs(label, group)
    if not mask.any():
        return score.sum() * 0.0
    with torch.no_grad():
        group = torch.unique(group, return_inverse=True)[1]  # ids 0..G-1 of this batch
        same = group[:, None] == group[None, :]
        ahead = (score[None, :] > score[:, None]) & same  # [i, j]: j scored above i
        rank = ahead.sum(1).float()  # 0-based rank within the group
        discount = 1.0 / torch.log2(rank + 2.0)
        ideal_rank = ((label[None, :] > label[:, None]) & same).sum(1).float()
        ideal = torch.zeros_like(label).index_add_(
            0, group, (2**label - 1) / torch.log2(ideal_rank + 2.0)
        )[group]
        gain = 2**label - 1
        delta = (gain[:, None] - gain[None, :]).abs() * (
            discount[:, None] - discount[None, :]
        ).abs()
        weight = delta / ideal.clamp_min(1e-9)[:, None]
    diff = score[:, None] - score[None, :]
    return (weight[mask] * torch.nn.functional.softplus(-diff[mask])).sum() / mask.sum()


def regression(score: torch.Tensor, label: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Mean squared error against the normalized throughput."""
    return torch.nn.functional.mse_loss(score, label)


def mixed(score: torch.Tensor, label: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """RankNet plus LambdaRank: every pair counts, the pairs that move the top count more."""
    return pairwise(score, label, group) + lambdarank(score, label, group)


LOSSES = {
    "lambdarank": lambdarank, "pairwise": pairwise, "mixed": mixed, "regression": regression,
}  # fmt: skip
