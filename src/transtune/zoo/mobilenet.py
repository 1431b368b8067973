"""Mobile networks built from inverted residuals: mobilenet_v2, mobilenet_v3_large, mnasnet1_0."""

from __future__ import annotations

from torch import nn

from .blocks import ConvBNAct, ConvClassifier, InvertedResidual, linear_head, make_divisible

# (expand ratio t, out channels c, repeats n, first stride s)
MOBILENET_V2_CFG = [
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
]  # fmt: skip

# (kernel, expanded, out, use SE, hard-swish, stride); input channels chain from the stem (16).
MOBILENET_V3_LARGE_CFG = [
    (3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
    (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
    (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
    (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
    (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1),
]  # fmt: skip

# (expand ratio, out channels, repeats, first stride, kernel) for MNASNet-B1 at depth multiplier 1.0
MNASNET1_0_CFG = [
    (3, 24, 3, 2, 3), (3, 40, 3, 2, 5), (6, 80, 3, 2, 5),
    (6, 96, 2, 1, 3), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3),
]  # fmt: skip


def mobilenet_v2(num_classes: int = 1000) -> ConvClassifier:
    """MobileNetV2 (width 1.0): ReLU6 inverted residuals, 1280-d head."""
    layers: list[nn.Module] = [ConvBNAct(3, 32, 3, 2, act=nn.ReLU6)]
    in_ch = 32
    for t, c, n, s in MOBILENET_V2_CFG:
        for i in range(n):
            layers.append(InvertedResidual(in_ch, c, in_ch * t, 3, s if i == 0 else 1, nn.ReLU6))
            in_ch = c
    layers.append(ConvBNAct(in_ch, 1280, 1, act=nn.ReLU6))
    head = linear_head(1280, num_classes, 0.2)
    return ConvClassifier(nn.Sequential(*layers), head)


def mobilenet_v3_large(num_classes: int = 1000) -> ConvClassifier:
    """MobileNetV3-Large: hard-swish, SE with hard-sigmoid gate, 960 -> 1280 -> classes head."""
    eps = 1e-3
    layers: list[nn.Module] = [ConvBNAct(3, 16, 3, 2, act=nn.Hardswish, bn_eps=eps)]
    in_ch = 16
    for k, exp, out, use_se, hs, stride in MOBILENET_V3_LARGE_CFG:
        se = make_divisible(exp // 4, 8) if use_se else 0
        act = nn.Hardswish if hs else nn.ReLU
        layers.append(
            InvertedResidual(
                in_ch, out, exp, k, stride, act, se, se_gate=nn.Hardsigmoid, bn_eps=eps
            )
        )
        in_ch = out
    layers.append(ConvBNAct(in_ch, 6 * in_ch, 1, act=nn.Hardswish, bn_eps=eps))
    head = nn.Sequential(
        nn.Linear(6 * in_ch, 1280), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1280, num_classes)
    )
    return ConvClassifier(nn.Sequential(*layers), head)


def mnasnet1_0(num_classes: int = 1000) -> ConvClassifier:
    """MNASNet-B1 with depth multiplier 1.0 (torchvision ``mnasnet1_0``)."""
    layers: list[nn.Module] = [
        ConvBNAct(3, 32, 3, 2),
        ConvBNAct(32, 32, 3, groups=32),  # depthwise separable stem
        ConvBNAct(32, 16, 1, act=None),
    ]
    in_ch = 16
    for t, c, n, s, k in MNASNET1_0_CFG:
        for i in range(n):
            layers.append(InvertedResidual(in_ch, c, in_ch * t, k, s if i == 0 else 1))
            in_ch = c
    layers.append(ConvBNAct(in_ch, 1280, 1))
    head = linear_head(1280, num_classes, 0.2)
    return ConvClassifier(nn.Sequential(*layers), head)
