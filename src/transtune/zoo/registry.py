"""Model registry: specs, lookup, instantiation with deterministic weights / inputs, counters."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..errors import UnknownModelError
from . import bert, classic, densenet, efficientnet, inception, mobilenet, resnet
from .blocks import calibrate_bn

TV = "torchvision"


@dataclass(frozen=True)
class ModelSpec:
    """A zoo entry: how to build the model and what it should look like."""

    name: str  # registry name, e.g. "resnet18"
    family: str  # e.g. "resnet", "bert"
    kind: str  # "image" or "text"
    published_params: int
    default_size: int  # image side or sequence length
    source: str  # where the published count comes from (short)
    build: Callable[..., nn.Module]  # returns a fresh model with random weights


def _img(
    name: str,
    family: str,
    params: int,
    build: Callable[..., nn.Module],
    size: int = 224,
    source: str = TV,
) -> ModelSpec:
    return ModelSpec(
        name, family, "image", params, size, source, functools.partial(_build_cnn, build, size)
    )


def _build_cnn(build: Callable[..., nn.Module], size: int, **kwargs: Any) -> nn.Module:
    """``build(**kwargs)`` with BN statistics calibrated on 2 random images at the default size."""
    return calibrate_bn(build(**kwargs), torch.randn(2, 3, size, size))


def _txt(
    name: str, params: int, build: Callable[..., nn.Module], seq: int, source: str
) -> ModelSpec:
    return ModelSpec(name, "bert", "text", params, seq, source, build)


_HF = "HF {}ForSequenceClassification {}, 2 labels (counted from config)"

_SPECS = [
    _img("resnet18", "resnet", 11_689_512, resnet.resnet18),
    _img("resnet50", "resnet", 25_557_032, resnet.resnet50),
    _img("alexnet", "alexnet", 61_100_840, classic.alexnet),
    _img("vgg16", "vgg", 138_357_544, classic.vgg16),
    _img("mobilenet_v2", "mobilenet", 3_504_872, mobilenet.mobilenet_v2),
    _img(
        "googlenet",
        "googlenet",
        6_624_904,
        inception.googlenet,
        source=f"{TV} (13,004,888 incl. aux heads; eval model without them)",
    ),
    _img("mnasnet1_0", "mnasnet", 4_383_312, mobilenet.mnasnet1_0),
    _img("efficientnet_b0", "efficientnet", 5_288_548, efficientnet.efficientnet_b0),
    _img("efficientnet_b4", "efficientnet", 19_341_616, efficientnet.efficientnet_b4, 380),
    _img("mobilenet_v3_large", "mobilenet", 5_483_032, mobilenet.mobilenet_v3_large),
    _img("resnext50_32x4d", "resnet", 25_028_904, resnet.resnext50_32x4d),
    _img("wide_resnet50_2", "resnet", 68_883_240, resnet.wide_resnet50_2),
    _img("densenet121", "densenet", 7_978_856, densenet.densenet121),
    _img(
        "inception_v3",
        "inception",
        23_834_568,
        inception.inception_v3,
        299,
        source=f"{TV} 27,161,264 minus AuxLogits 3,326,696 (aux head omitted)",
    ),
    _txt("bert_base", 109_483_778, bert.bert_base, 256, _HF.format("Bert", "bert-base-uncased")),
    _txt(
        "mobilebert",
        24_582_914,
        bert.mobilebert,
        256,
        _HF.format("MobileBert", "google/mobilebert-uncased"),
    ),
    _txt(
        "bert_tiny",
        4_386_178,
        bert.bert_tiny,
        128,
        _HF.format("Bert", "google/bert_uncased_L-2_H-128_A-2"),
    ),
    _txt(
        "bert_medium",
        41_374_210,
        bert.bert_medium,
        128,
        _HF.format("Bert", "google/bert_uncased_L-8_H-512_A-8"),
    ),
]

MODELS: dict[str, ModelSpec] = {s.name: s for s in _SPECS}


def list_models() -> list[ModelSpec]:
    """All registered models, in registry order."""
    return list(MODELS.values())


def get_spec(name: str) -> ModelSpec:
    """The spec for ``name``; raises :class:`UnknownModelError` listing the known names."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(MODELS)}"
        ) from None


def get_model(
    name: str, batch_size: int = 1, size: int | None = None, seed: int = 0
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Build ``name`` in eval mode with weights and example inputs deterministic in ``seed``.

    Images are float32 NCHW ``[batch, 3, size, size]``; text inputs are int64 token ids
    ``[batch, size]`` in ``[0, vocab)``. ``size`` defaults to the spec's ``default_size``.
    The global RNG state is left untouched.
    """
    spec = get_spec(name)
    size = spec.default_size if size is None else size
    if batch_size < 1 or size < 1:
        raise ValueError(f"batch_size and size must be positive, got {batch_size}, {size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = spec.build().eval()
    gen = torch.Generator().manual_seed(seed)
    if spec.kind == "text":
        assert isinstance(model, bert.BertForSequenceClassification)
        cfg = model.config
        if size > cfg.max_position:
            raise ValueError(f"{name}: sequence length {size} exceeds {cfg.max_position} positions")
        shape = (batch_size, size)
        inputs = (torch.randint(0, cfg.vocab_size, shape, generator=gen, dtype=torch.int64),)
    else:
        inputs = (torch.randn(batch_size, 3, size, size, generator=gen),)
    return model, inputs


def count_params(model: nn.Module) -> int:
    """Number of parameters (shared parameters counted once)."""
    return sum(p.numel() for p in model.parameters())


def count_flops(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    """FLOPs (2 x MACs of conv / matmul / linear / attention) of one forward pass."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(*inputs)
    return int(counter.get_total_flops())
