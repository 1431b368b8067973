"""PyTorch cost model networks. Inputs per batch: padded per-store features ``x`` (B, L, 164),
``mask`` (B, L, True for real stores), hardware vectors ``hw`` (B, H), ``log_flops`` (B,),
kernel class ids ``cls`` (B,). Output: one score per row (higher = faster).
"""

from __future__ import annotations

import torch
from torch import nn

from ..features import FEATURE_DIM
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

    def forward(self, x, mask, hw, log_flops, cls):
        pooled = (self.store(x) * mask[..., None]).sum(1)
        return self.head(torch.cat([pooled, hw, log_flops[:, None]], 1)).squeeze(1)


class AttentionCostModel(nn.Module):
    """Self-attention over a schedule's store tokens, joined with the hardware.

    - store tokens: per-store features embedded, then modulated by the hardware (FiLM:
      ``t * (1 + gamma(hw)) + beta(hw)``), so each store is read in the light of the machine;
    - a leading context token: hardware + kernel class + FLOPs embeddings;
    - a Transformer encoder over [context, stores]; the readout joins the context token's
      output and the mean of the store outputs.
    """

    def __init__(
        self, dim: int = 64, heads: int = 4, layers: int = 2, classes: int = 64, dropout=0.1, **_
    ) -> None:
        super().__init__()
        self.embed = nn.Sequential(
            nn.LayerNorm(FEATURE_DIM), nn.Linear(FEATURE_DIM, dim), nn.GELU()
        )
        self.film = nn.Linear(HW_DIM, 2 * dim)
        self.hw = nn.Linear(HW_DIM, dim)
        self.flops = nn.Linear(1, dim)
        self.cls = nn.Embedding(classes, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(2 * dim), nn.Linear(2 * dim, dim), nn.GELU(),
                                  nn.Linear(dim, 1))  # fmt: skip
        self.classes = classes

    def forward(self, x, mask, hw, log_flops, cls):
        gamma, beta = self.film(hw).chunk(2, dim=1)
        tokens = self.embed(x) * (1 + gamma[:, None]) + beta[:, None]
        context = self.hw(hw) + self.flops(log_flops[:, None] / 32) + self.cls(cls % self.classes)
        seq = torch.cat([context[:, None], tokens], 1)
        pad = torch.cat([torch.zeros_like(mask[:, :1]), ~mask], 1)
        out = self.encoder(seq, src_key_padding_mask=pad)
        stores = (out[:, 1:] * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
        return self.head(torch.cat([out[:, 0], stores], 1)).squeeze(1)


NETS = {"mlp": SegmentSumMLP, "attention": AttentionCostModel}
