"""Tests for the model zoo: parameter counts, shapes, determinism, FLOPs and export."""

from __future__ import annotations

import pytest
import torch

from transtune.zoo import (
    MODELS,
    UnknownModelError,
    count_flops,
    count_params,
    get_model,
    get_spec,
    list_models,
)


@pytest.mark.parametrize("name", list(MODELS))
def test_param_count_matches_published(name: str) -> None:
    spec = MODELS[name]
    n = count_params(spec.build())
    assert abs(n - spec.published_params) <= 0.01 * spec.published_params, (n, spec)


def test_registry_contents() -> None:
    assert [s.name for s in list_models()] == list(MODELS)
    assert len(MODELS) == 18
    for spec in list_models():
        assert spec.kind in ("image", "text")
        assert spec.source and spec.family
    assert get_spec("inception_v3").default_size == 299
    assert get_spec("efficientnet_b4").default_size == 380
    assert get_spec("bert_base").default_size == 256
    assert get_spec("bert_tiny").default_size == 128


@pytest.mark.parametrize(
    ("name", "size", "classes"),
    [
        ("resnet18", 64, 1000),
        ("mobilenet_v3_large", 64, 1000),
        ("efficientnet_b0", 64, 1000),
        ("densenet121", 64, 1000),
        ("googlenet", 64, 1000),
        ("bert_tiny", 16, 2),
        ("mobilebert", 16, 2),
    ],
)
def test_forward_shape_and_finite(name: str, size: int, classes: int) -> None:
    model, (x,) = get_model(name, batch_size=2, size=size)
    assert not model.training
    if get_spec(name).kind == "image":
        assert x.shape == (2, 3, size, size) and x.dtype == torch.float32
    else:
        assert x.shape == (2, size) and x.dtype == torch.int64
        assert 0 <= int(x.min()) and int(x.max()) < 30522
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, classes)
    assert torch.isfinite(y).all()
    assert 1e-4 < float(y.std()) < 1e2  # well-scaled logits from the random init


def test_get_model_deterministic() -> None:
    m1, (x1,) = get_model("resnet18", size=32, seed=3)
    m2, (x2,) = get_model("resnet18", size=32, seed=3)
    m3, (x3,) = get_model("resnet18", size=32, seed=4)
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)
    s1, s2, s3 = m1.state_dict(), m2.state_dict(), m3.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert not all(torch.equal(s1[k], s3[k]) for k in s1)
    t1, (i1,) = get_model("bert_tiny", size=8, seed=1)
    t2, (i2,) = get_model("bert_tiny", size=8, seed=1)
    assert torch.equal(i1, i2)
    assert all(torch.equal(a, b) for a, b in zip(t1.parameters(), t2.parameters(), strict=True))


def test_get_model_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    get_model("bert_tiny", size=8, seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_unknown_model() -> None:
    with pytest.raises(UnknownModelError, match="resnet18") as info:
        get_spec("resnet19")
    assert isinstance(info.value, ValueError)
    assert "bert_base" in str(info.value)
    with pytest.raises(UnknownModelError):
        get_model("nope")


def test_sequence_too_long() -> None:
    with pytest.raises(ValueError, match="512"):
        get_model("bert_tiny", size=513)


def test_count_flops_resnet18() -> None:
    model, inputs = get_model("resnet18")
    flops = count_flops(model, inputs)
    assert abs(flops - 3.64e9) <= 0.05 * 3.64e9, flops


@pytest.mark.parametrize(("name", "size"), [("mobilenet_v2", 64), ("bert_tiny", 16)])
def test_torch_export(name: str, size: int) -> None:
    model, inputs = get_model(name, size=size)
    program = torch.export.export(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(program.module()(*inputs), expected)
