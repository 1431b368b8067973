"""PyTorch cost model networks. Inputs per batch: padded per-store features ``x`` (B, L, 164),
``mask`` (B, L, True for real stores), hardware vectors ``hw`` (B, H), ``log_flops`` (B,),
kernel class ids ``cls`` (B,), padded trace tokens ``kind`` (B, T) and ``values``
(B, T, TRACE_DIM) with ``token_mask`` (B, T). Output: one score per row (higher = faster).
"""

from __future__ import annotations

import torch
from torch import nn

from ..features import FEATURE_DIM, KINDS, TRACE_DIM
from ..hardware import HardwareDescriptor

HW_DIM = len(HardwareDescriptor.FEATURES)


class SegmentSumMLP(nn.Module):
    """TenSet's MLP: a per-store MLP, summed over stores, then a head. The hardware vector and
    log FLOPs join the head, so it sees the same inputs as the attention model."""

    def __init__(self, dim: int = 256, **_) -> None:
        super().__init__()
        self.store = nn.Sequential(
            nn.Linear(FEATURE_DIM, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU()
        )
        self.head = nn.Sequential(nn.Linear(dim + HW_DIM + 1, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, x, mask, hw, log_flops, cls, **_):
        pooled = (self.store(x) * mask[..., None]).sum(1)
        return self.head(torch.cat([pooled, hw, log_flops[:, None]], 1)).squeeze(1)


class AttentionCostModel(nn.Module):
    """Self-attention over a schedule's store and trace tokens, joined with the hardware.

    - store tokens: per-store features embedded; trace tokens (``trace=True``): the
      schedule primitives' kind embedding plus their embedded decisions;
    - every token is modulated by the hardware (FiLM: ``t * (1 + gamma(hw)) + beta(hw)``),
      so the program is read in the light of the machine;
    - a leading context token: hardware + kernel class + FLOPs embeddings;
    - a Transformer encoder over [context, stores, trace]; the readout joins the context
      token's output and the mean outputs of the store and the trace tokens.
    """

    def __init__(
        self, dim: int = 64, heads: int = 4, layers: int = 2, classes: int = 64, dropout=0.1,
        trace: bool = True, **_,
    ) -> None:  # fmt: skip
        super().__init__()
        self.embed = nn.Sequential(
            nn.LayerNorm(FEATURE_DIM), nn.Linear(FEATURE_DIM, dim), nn.GELU()
        )
        self.trace = trace
        self.kind = nn.Embedding(len(KINDS), dim)
        self.values = nn.Sequential(nn.Linear(TRACE_DIM, dim), nn.GELU(), nn.Linear(dim, dim))
        self.part = nn.Embedding(2, dim)  # store or trace token
        self.film = nn.Linear(HW_DIM, 2 * dim)
        self.hw = nn.Linear(HW_DIM, dim)
        self.flops = nn.Linear(1, dim)
        self.cls = nn.Embedding(classes, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(3 * dim), nn.Linear(3 * dim, dim), nn.GELU(),
                                  nn.Linear(dim, 1))  # fmt: skip
        self.classes = classes

    def forward(self, x, mask, hw, log_flops, cls, kind, values, token_mask):
        if not self.trace:  # the ablation: no trace tokens at all (and no time spent on them)
            kind, values, token_mask = kind[:, :0], values[:, :0], token_mask[:, :0]
        stores = self.embed(x) + self.part.weight[0]
        steps = self.kind(kind % len(KINDS)) + self.values(values) + self.part.weight[1]
        gamma, beta = self.film(hw).chunk(2, dim=1)
        tokens = torch.cat([stores, steps], 1) * (1 + gamma[:, None]) + beta[:, None]
        context = self.hw(hw) + self.flops(log_flops[:, None] / 32) + self.cls(cls % self.classes)
        seq = torch.cat([context[:, None], tokens], 1)
        real = torch.cat([torch.ones_like(mask[:, :1]), mask, token_mask], 1)
        out = self.encoder(seq, src_key_padding_mask=~real)
        n = mask.shape[1]
        return self.head(torch.cat(
            [out[:, 0], _mean(out[:, 1 : 1 + n], mask), _mean(out[:, 1 + n :], token_mask)], 1
        )).squeeze(1)  # fmt: skip


def _mean(out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``out`` (B, L, D) over the positions ``mask`` (B, L) marks (0 if none)."""
    return (out * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)


NETS = {"mlp": SegmentSumMLP, "attention": AttentionCostModel}
