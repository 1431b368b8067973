"""The training loop of the PyTorch cost models: batches of whole groups, Adam, a ranking
loss; seeded with its own RNG state (the caller's torch RNG is left as it was), CPU. With
validation rows, the weights with the best validation PCA are kept: those of an epoch, or the
weights training started from (``best_epoch`` -1), so that fine-tuning a pre-trained model
on a few records never ends below where it started, as far as validation can tell."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from .data import CostData
from .losses import LOSSES
from .metrics import evaluate


def _pad(segments: list[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray]:
    """Ragged rows as one zero-padded array ``(B, L, ...)`` and its mask ``(B, L)``."""
    length = max((len(s) for s in segments), default=0) or 1
    out = np.zeros((len(segments), length, *segments[0].shape[1:]) if segments else (0, 1), dtype)
    mask = np.zeros((len(segments), length), bool)
    for i, s in enumerate(segments):
        out[i, : len(s)] = s
        mask[i, : len(s)] = True
    return out, mask


def batch_tensors(data: CostData, index: np.ndarray) -> dict[str, torch.Tensor]:
    """Padded inputs of rows ``index`` (see :mod:`.nets`)."""
    x, mask = _pad(data.segments(index), np.float32)
    tokens = data.tokens(index)
    kind, token_mask = _pad([k for k, _ in tokens], np.int64)
    values, _ = _pad([v for _, v in tokens], np.float32)
    arrays = {
        "x": x, "mask": mask, "hw": data.hardware[index], "log_flops": data.log_flops[index],
        "cls": data.kernel_class[index].astype(np.int64), "kind": kind, "values": values,
        "token_mask": token_mask,
    }  # fmt: skip
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def predict(net: torch.nn.Module, data: CostData, index: np.ndarray, batch: int = 512):
    net.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(index), batch):
            out.append(net(**batch_tensors(data, index[start : start + batch])).numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def train(
    net: torch.nn.Module,
    data: CostData,
    index: np.ndarray,
    loss: str = "lambdarank",
    epochs: int = 30,
    groups_per_batch: int = 16,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    on_epoch: Callable[[int, float], None] | None = None,
    validation: np.ndarray | None = None,
) -> dict:
    """Train ``net`` on rows ``index`` of ``data``; returns losses, seconds and, with
    ``validation`` rows, their PCA at the start (``start_pca``) and per epoch, and the epoch
    whose weights were kept (-1: the starting weights)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return _train(net, data, index, loss, epochs, groups_per_batch, lr, weight_decay, seed,
                      on_epoch, validation)  # fmt: skip


def _train(net, data, index, loss, epochs, groups_per_batch, lr, weight_decay, seed, on_epoch,
           validation) -> dict:  # fmt: skip
    rng = np.random.default_rng(seed)
    loss_fn = LOSSES[loss]
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(1, epochs))
    groups = data.group[index]
    by_group = {g: index[groups == g] for g in np.unique(groups)}
    keys = np.asarray(list(by_group))
    history, start = [], time.perf_counter()
    val_pca, best_state, start_pca = [], None, None
    if validation is not None and len(validation):
        start_pca = _validation_pca(net, data, validation)
        best_state = {k: v.clone() for k, v in net.state_dict().items()}
        if start_pca == -math.inf:  # no pair to rank among them: nothing to pick epochs by
            start_pca, best_state = None, None
    for epoch in range(epochs):
        net.train()
        rng.shuffle(keys)
        total = 0.0
        for b in range(0, len(keys), groups_per_batch):
            rows = np.concatenate([by_group[g] for g in keys[b : b + groups_per_batch]])
            inputs = batch_tensors(data, rows)
            score = net(**inputs)
            value = loss_fn(
                score,
                torch.from_numpy(data.label[rows]),
                torch.from_numpy(data.group[rows].astype(np.int64)),
            )
            optimizer.zero_grad()
            value.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            total += value.item() * len(rows)
        schedule.step()
        history.append(total / max(1, len(index)))
        if start_pca is not None:
            pca = _validation_pca(net, data, validation)
            if pca > max([start_pca, *val_pca]):
                best_state = {k: v.clone() for k, v in net.state_dict().items()}
            val_pca.append(pca)
        if on_epoch is not None:
            on_epoch(epoch, history[-1])
    out = {"loss": history, "seconds": time.perf_counter() - start}
    if best_state is not None:
        net.load_state_dict(best_state)
        best = max(range(len(val_pca)), key=lambda e: val_pca[e], default=-1)
        best = best if val_pca and val_pca[best] > start_pca else -1
        out |= {"start_pca": start_pca, "val_pca": val_pca, "best_epoch": best}
    return out


def _validation_pca(net: torch.nn.Module, data: CostData, rows: np.ndarray) -> float:
    """PCA on ``rows``; -inf when it is undefined (no group with two distinct latencies)."""
    scores = predict(net, data, rows)
    pca = evaluate(scores, data.latency[rows], data.group[rows], ks=(1,))["pca"]
    return -math.inf if math.isnan(pca) else pca
