"""Plain conv stacks without BatchNorm: alexnet and vgg16 (torchvision layouts)."""

from __future__ import annotations

from torch import nn

from .blocks import ConvClassifier

# VGG configuration "D" (VGG-16): conv widths, "M" = 2x2 max pool.
VGG16_CFG: list[int | str] = [
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    "M",
]


def _mlp_head(in_features: int, num_classes: int, dropout: float = 0.5) -> nn.Sequential:
    """The 4096-4096 fully connected classifier shared by AlexNet and VGG."""
    return nn.Sequential(
        nn.Dropout(dropout),
        nn.Linear(in_features, 4096),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Linear(4096, num_classes),
    )


def alexnet(num_classes: int = 1000) -> ConvClassifier:
    """AlexNet, torchvision variant (one-GPU version, 64-192-384-256-256 convs)."""
    features = nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
    )  # fmt: skip
    return ConvClassifier(features, _mlp_head(256 * 6 * 6, num_classes), pool_size=6)


def vgg16(num_classes: int = 1000) -> ConvClassifier:
    """VGG-16 (configuration D, no BatchNorm)."""
    layers: list[nn.Module] = []
    in_ch = 3
    for v in VGG16_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            assert isinstance(v, int)
            layers += [nn.Conv2d(in_ch, v, 3, padding=1), nn.ReLU()]
            in_ch = v
    return ConvClassifier(nn.Sequential(*layers), _mlp_head(512 * 7 * 7, num_classes), pool_size=7)
