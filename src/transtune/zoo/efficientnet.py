"""EfficientNet (V1) b0 and b4, torchvision layout: MBConv blocks with SiLU and SE."""

from __future__ import annotations

import math

from torch import nn

from .blocks import ConvBNAct, ConvClassifier, InvertedResidual, linear_head, make_divisible

# Baseline (B0) stages after the 32-channel stem: (expand ratio, kernel, first stride,
# out channels, repeats).
B0_STAGES = [
    (1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1),
]  # fmt: skip


def efficientnet(
    width_mult: float, depth_mult: float, dropout: float, num_classes: int = 1000
) -> ConvClassifier:
    """EfficientNet scaled by ``width_mult`` (channels, /8-rounded) and ``depth_mult`` (repeats)."""

    def width(ch: int) -> int:
        return make_divisible(ch * width_mult, 8)

    layers: list[nn.Module] = [ConvBNAct(3, width(32), 3, 2, act=nn.SiLU)]
    in_ch = width(32)
    for expand, k, stride, out, repeats in B0_STAGES:
        out_ch = width(out)
        for i in range(math.ceil(repeats * depth_mult)):
            expanded = make_divisible(in_ch * expand, 8)
            se = max(1, in_ch // 4)  # SE squeeze is relative to the block's *input* width
            layers.append(
                InvertedResidual(
                    in_ch, out_ch, expanded, k, stride if i == 0 else 1, nn.SiLU, se, se_act=nn.SiLU
                )
            )
            in_ch = out_ch
    layers.append(ConvBNAct(in_ch, 4 * in_ch, 1, act=nn.SiLU))
    return ConvClassifier(nn.Sequential(*layers), linear_head(4 * in_ch, num_classes, dropout))


def efficientnet_b0(num_classes: int = 1000) -> ConvClassifier:
    return efficientnet(1.0, 1.0, 0.2, num_classes)


def efficientnet_b4(num_classes: int = 1000) -> ConvClassifier:
    return efficientnet(1.4, 1.8, 0.4, num_classes)
