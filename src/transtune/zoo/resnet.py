"""ResNet family: resnet18, resnet50, resnext50_32x4d, wide_resnet50_2 (torchvision, v1.5)."""

from __future__ import annotations

import torch
from torch import nn

from .blocks import ConvBNAct, ConvClassifier


class ResidualBlock(nn.Module):
    """``relu(body(x) + shortcut(x))`` with a 1x1 projection shortcut when the shape changes."""

    expansion = 1

    def __init__(self, body: nn.Module, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.body = body
        if stride == 1 and in_ch == out_ch:
            self.shortcut: nn.Module = nn.Identity()
        else:
            self.shortcut = ConvBNAct(in_ch, out_ch, 1, stride, act=None)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class BasicBlock(ResidualBlock):
    """Two 3x3 convs (ResNet-18/34)."""

    expansion = 1

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, groups: int = 1, base_width: int = 64
    ) -> None:
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        body = nn.Sequential(
            ConvBNAct(in_ch, planes, 3, stride),
            ConvBNAct(planes, planes, 3, act=None),
        )
        super().__init__(body, in_ch, planes, stride)


class Bottleneck(ResidualBlock):
    """1x1 reduce -> 3x3 (grouped, strided) -> 1x1 expand (x4), as in torchvision ResNet v1.5."""

    expansion = 4

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, groups: int = 1, base_width: int = 64
    ) -> None:
        width = int(planes * (base_width / 64.0)) * groups
        out_ch = planes * self.expansion
        body = nn.Sequential(
            ConvBNAct(in_ch, width, 1),
            ConvBNAct(width, width, 3, stride, groups=groups),
            ConvBNAct(width, out_ch, 1, act=None),
        )
        super().__init__(body, in_ch, out_ch, stride)


def resnet(
    block: type[BasicBlock] | type[Bottleneck],
    layers: list[int],
    num_classes: int = 1000,
    groups: int = 1,
    width_per_group: int = 64,
) -> ConvClassifier:
    """7x7/2 stem + maxpool, four stages (64..512 planes), global pool, Linear classifier."""
    modules: list[nn.Module] = [ConvBNAct(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    in_ch = 64
    for i, (planes, depth) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
        for j in range(depth):
            stride = 2 if (i > 0 and j == 0) else 1
            modules.append(block(in_ch, planes, stride, groups, width_per_group))
            in_ch = planes * block.expansion
    return ConvClassifier(nn.Sequential(*modules), nn.Linear(in_ch, num_classes))


def resnet18(num_classes: int = 1000) -> ConvClassifier:
    return resnet(BasicBlock, [2, 2, 2, 2], num_classes)


def resnet50(num_classes: int = 1000) -> ConvClassifier:
    return resnet(Bottleneck, [3, 4, 6, 3], num_classes)


def resnext50_32x4d(num_classes: int = 1000) -> ConvClassifier:
    return resnet(Bottleneck, [3, 4, 6, 3], num_classes, groups=32, width_per_group=4)


def wide_resnet50_2(num_classes: int = 1000) -> ConvClassifier:
    return resnet(Bottleneck, [3, 4, 6, 3], num_classes, width_per_group=128)
