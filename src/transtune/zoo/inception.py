"""Inception family: googlenet (Inception v1) and inception_v3; torchvision layouts, no aux."""

from __future__ import annotations

import torch
from torch import nn

from .blocks import ConvBNAct, ConvClassifier, linear_head


def conv(
    in_ch: int,
    out_ch: int,
    kernel_size: int | tuple[int, int],
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
) -> ConvBNAct:
    """torchvision's ``BasicConv2d``: conv (no bias) -> BN(eps=1e-3) -> ReLU, explicit padding."""
    return ConvBNAct(in_ch, out_ch, kernel_size, stride, padding, bn_eps=1e-3)


class Branches(nn.Module):
    """Run every branch on the same input and concatenate the results along channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], 1)


def _pool_proj(pool: nn.Module, in_ch: int, out_ch: int) -> nn.Sequential:
    """Pooling branch: stride-1 3x3 pool followed by a 1x1 projection."""
    return nn.Sequential(pool, conv(in_ch, out_ch, 1))


# ---------------------------------------------------------------------------------------------
# GoogLeNet
# ---------------------------------------------------------------------------------------------

# Inception v1 modules: (in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool proj).
# Like torchvision, the "5x5" branch uses a 3x3 kernel.
GOOGLENET_CFG: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "3a": (192, 64, 96, 128, 16, 32, 32),
    "3b": (256, 128, 128, 192, 32, 96, 64),
    "4a": (480, 192, 96, 208, 16, 48, 64),
    "4b": (512, 160, 112, 224, 24, 64, 64),
    "4c": (512, 128, 128, 256, 24, 64, 64),
    "4d": (512, 112, 144, 288, 32, 64, 64),
    "4e": (528, 256, 160, 320, 32, 128, 128),
    "5a": (832, 256, 160, 320, 32, 128, 128),
    "5b": (832, 384, 192, 384, 48, 128, 128),
}


def inception_v1(in_ch: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pp: int) -> Branches:
    return Branches(
        conv(in_ch, c1, 1),
        nn.Sequential(conv(in_ch, c3r, 1), conv(c3r, c3, 3, padding=1)),
        nn.Sequential(conv(in_ch, c5r, 1), conv(c5r, c5, 3, padding=1)),
        _pool_proj(nn.MaxPool2d(3, 1, 1, ceil_mode=True), in_ch, pp),
    )


def googlenet(num_classes: int = 1000) -> ConvClassifier:
    """GoogLeNet (Inception v1) with BatchNorm, as torchvision; aux classifiers omitted (eval)."""

    def pool(k: int = 3) -> nn.MaxPool2d:
        return nn.MaxPool2d(k, 2, ceil_mode=True)

    layers: list[nn.Module] = [
        conv(3, 64, 7, 2, 3),
        pool(),
        conv(64, 64, 1),
        conv(64, 192, 3, padding=1),
        pool(),
    ]
    for name, cfg in GOOGLENET_CFG.items():
        if name == "4a":
            layers.append(pool())
        elif name == "5a":
            layers.append(pool(2))
        layers.append(inception_v1(*cfg))
    return ConvClassifier(nn.Sequential(*layers), linear_head(1024, num_classes, 0.2))


# ---------------------------------------------------------------------------------------------
# Inception v3
# ---------------------------------------------------------------------------------------------


def _factorized(in_ch: int, chans: list[int], kernels: str, stride_last: int = 1) -> nn.Sequential:
    """Conv chain from ``in_ch`` through ``chans``; kernels: '1', '3', '5', 'h' (1x7), 'v' (7x1).

    With ``stride_last`` = 2 the last conv is an unpadded strided 3x3 (grid reduction).
    """
    shapes = {"1": (1, 0), "3": (3, 1), "5": (5, 2), "h": ((1, 7), (0, 3)), "v": ((7, 1), (3, 0))}
    mods: list[nn.Module] = []
    for i, (out, k) in enumerate(zip(chans, kernels, strict=True)):
        last = i == len(chans) - 1
        if last and stride_last != 1:
            mods.append(conv(in_ch, out, 3, stride_last))
        else:
            kernel, pad = shapes[k]
            mods.append(conv(in_ch, out, kernel, padding=pad))
        in_ch = out
    return nn.Sequential(*mods)


def inception_a(in_ch: int, pool_features: int) -> Branches:
    return Branches(
        conv(in_ch, 64, 1),
        _factorized(in_ch, [48, 64], "15"),
        _factorized(in_ch, [64, 96, 96], "133"),
        _pool_proj(nn.AvgPool2d(3, 1, 1), in_ch, pool_features),
    )


def inception_b(in_ch: int) -> Branches:
    return Branches(
        conv(in_ch, 384, 3, 2),
        _factorized(in_ch, [64, 96, 96], "133", stride_last=2),
        nn.MaxPool2d(3, 2),
    )


def inception_c(in_ch: int, c7: int) -> Branches:
    return Branches(
        conv(in_ch, 192, 1),
        _factorized(in_ch, [c7, c7, 192], "1hv"),
        _factorized(in_ch, [c7, c7, c7, c7, 192], "1vhvh"),
        _pool_proj(nn.AvgPool2d(3, 1, 1), in_ch, 192),
    )


def inception_d(in_ch: int) -> Branches:
    return Branches(
        _factorized(in_ch, [192, 320], "13", stride_last=2),
        _factorized(in_ch, [192, 192, 192, 192], "1hv3", stride_last=2),
        nn.MaxPool2d(3, 2),
    )


def _split_1x3_3x1(ch: int) -> Branches:
    return Branches(conv(ch, ch, (1, 3), padding=(0, 1)), conv(ch, ch, (3, 1), padding=(1, 0)))


def inception_e(in_ch: int) -> Branches:
    return Branches(
        conv(in_ch, 320, 1),
        nn.Sequential(conv(in_ch, 384, 1), _split_1x3_3x1(384)),
        nn.Sequential(conv(in_ch, 448, 1), conv(448, 384, 3, padding=1), _split_1x3_3x1(384)),
        _pool_proj(nn.AvgPool2d(3, 1, 1), in_ch, 192),
    )


def inception_v3(num_classes: int = 1000) -> ConvClassifier:
    """Inception v3 (torchvision layout, 299x299 input); the auxiliary classifier is omitted."""
    layers: list[nn.Module] = [
        conv(3, 32, 3, 2), conv(32, 32, 3), conv(32, 64, 3, padding=1), nn.MaxPool2d(3, 2),
        conv(64, 80, 1), conv(80, 192, 3), nn.MaxPool2d(3, 2),
        inception_a(192, 32), inception_a(256, 64), inception_a(288, 64),
        inception_b(288),
        inception_c(768, 128), inception_c(768, 160), inception_c(768, 160), inception_c(768, 192),
        inception_d(768),
        inception_e(1280), inception_e(2048),
    ]  # fmt: skip
    return ConvClassifier(nn.Sequential(*layers), linear_head(2048, num_classes, 0.5))
