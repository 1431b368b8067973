"""DenseNet-121 (torchvision layout: growth 32, blocks 6-12-24-16, bottleneck width 4 x growth)."""

from __future__ import annotations

import torch
from torch import nn

from .blocks import ConvBNAct, ConvClassifier


class BNActConv(nn.Sequential):
    """Pre-activation unit: BatchNorm2d -> ReLU -> Conv2d (no bias)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int) -> None:
        super().__init__(
            nn.BatchNorm2d(in_ch),
            nn.ReLU(),
            nn.Conv2d(in_ch, out_ch, kernel_size, padding=kernel_size // 2, bias=False),
        )


class DenseBlock(nn.Module):
    """Each layer sees the concatenation of the block input and all previous layer outputs."""

    def __init__(self, in_ch: int, num_layers: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(
                BNActConv(in_ch + i * growth, bn_size * growth, 1),
                BNActConv(bn_size * growth, growth, 3),
            )
            for i in range(num_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


def densenet121(num_classes: int = 1000, growth: int = 32, bn_size: int = 4) -> ConvClassifier:
    """DenseNet-121: 7x7 stem, four dense blocks joined by 1x1-conv + 2x2-avgpool transitions."""
    layers: list[nn.Module] = [ConvBNAct(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    ch = 64
    block_config = (6, 12, 24, 16)
    for i, n in enumerate(block_config):
        layers.append(DenseBlock(ch, n, growth, bn_size))
        ch += n * growth
        if i != len(block_config) - 1:
            layers += [BNActConv(ch, ch // 2, 1), nn.AvgPool2d(2, 2)]
            ch //= 2
    layers += [nn.BatchNorm2d(ch), nn.ReLU()]
    return ConvClassifier(nn.Sequential(*layers), nn.Linear(ch, num_classes))
