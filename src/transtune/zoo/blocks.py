"""Building blocks shared by the convolutional models of the zoo."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

ActFactory = Callable[[], nn.Module]


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``value`` to the nearest multiple of ``divisor``, never going down by more than 10%.

    Same rule as torchvision's ``_make_divisible`` (from the TF MobileNet/EfficientNet code).
    """
    min_value = divisor if min_value is None else min_value
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new_value < 0.9 * value:
        new_value += divisor
    return new_value


class ConvBNAct(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> optional activation; default padding is "same"."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int] = 3,
        stride: int = 1,
        padding: int | tuple[int, int] | None = None,
        groups: int = 1,
        act: ActFactory | None = nn.ReLU,
        bn_eps: float = 1e-5,
    ) -> None:
        if padding is None:
            ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
            padding = (ks[0] - 1) // 2, (ks[1] - 1) // 2
        layers: list[nn.Module] = [
            nn.Conv2d(
                in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False
            ),
            nn.BatchNorm2d(out_channels, eps=bn_eps),
        ]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation gate (torchvision layout: two 1x1 convs with bias)."""

    def __init__(
        self,
        channels: int,
        squeeze_channels: int,
        act: ActFactory = nn.ReLU,
        gate: ActFactory = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, channels, 1)
        self.act = act()
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.fc2(self.act(self.fc1(self.avgpool(x)))))
        return x * scale


class InvertedResidual(nn.Module):
    """MobileNetV2-style inverted residual (MBConv).

    1x1 expansion (skipped when ``expanded == in_channels``) -> depthwise kxk -> optional SE ->
    1x1 linear projection; identity shortcut when stride is 1 and channels match. Covers
    MobileNetV2, MobileNetV3, MNASNet and EfficientNet blocks (stochastic depth is a no-op in eval).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        expanded: int,
        kernel_size: int = 3,
        stride: int = 1,
        act: ActFactory = nn.ReLU,
        se_channels: int = 0,
        se_act: ActFactory = nn.ReLU,
        se_gate: ActFactory = nn.Sigmoid,
        bn_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.use_residual = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expanded != in_channels:
            layers.append(ConvBNAct(in_channels, expanded, 1, act=act, bn_eps=bn_eps))
        layers.append(
            ConvBNAct(
                expanded, expanded, kernel_size, stride, groups=expanded, act=act, bn_eps=bn_eps
            )
        )
        if se_channels:
            layers.append(SqueezeExcitation(expanded, se_channels, se_act, se_gate))
        layers.append(ConvBNAct(expanded, out_channels, 1, act=None, bn_eps=bn_eps))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_residual else out


class ConvClassifier(nn.Module):
    """``features`` -> adaptive average pool -> flatten -> ``head``; initialises itself.

    The common skeleton of every CNN in the zoo (``pool_size`` is 6 / 7 for AlexNet / VGG).
    """

    def __init__(self, features: nn.Module, head: nn.Module, pool_size: int = 1) -> None:
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d(pool_size)
        self.classifier = head
        init_cnn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def linear_head(in_features: int, num_classes: int, dropout: float = 0.0) -> nn.Module:
    """Dropout (when > 0) followed by a Linear classifier."""
    fc = nn.Linear(in_features, num_classes)
    return nn.Sequential(nn.Dropout(dropout), fc) if dropout > 0 else fc


def init_cnn(model: nn.Module) -> nn.Module:
    """Initialise a CNN: kaiming (fan_out) convs, unit BN, small-normal Linear, zero biases."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    return model


def calibrate_bn(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """Set every BatchNorm's running statistics from one forward pass on ``x``.

    With untrained weights the default statistics (mean 0, var 1) make eval-mode BN an identity,
    so activations vanish or explode with depth (e.g. ~1e-15 logits for EfficientNet, ~1e6 for
    DenseNet). Recording the statistics of a random batch gives unit-scale activations, as a
    trained network has. Only BN layers run in training mode; dropout stays off.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not bns:
        return model
    was_training = model.training
    momenta = [bn.momentum for bn in bns]
    model.eval()
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average: exactly this batch's statistics
        bn.train()
    with torch.no_grad():
        model(x)
    for bn, momentum in zip(bns, momenta, strict=True):
        bn.momentum = momentum
    return model.train(was_training)
