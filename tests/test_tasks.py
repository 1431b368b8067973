import pytest

from transtune.frontend import from_module
from transtune.tasks import extract_kernels, kernel_class, multiply_add_flops, op_name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("conv2d3", "conv2d"),
        ("conv2d", "conv2d"),
        ("add12", "add"),
        ("max_pool2d1", "max_pool2d"),
        ("adaptive_avg_pool2d", "adaptive_avg_pool2d"),
        ("layer_norm2", "layer_norm"),
    ],
)
def test_op_name_strips_only_the_uniquifying_number(name, expected):
    assert op_name(name) == expected


def test_kernel_class_is_shape_and_suffix_independent():
    assert kernel_class(["conv2d3", "add4", "relu1"]) == "conv2d+add+relu"
    assert kernel_class(["conv2d", "add", "relu"]) == "conv2d+add+relu"
    assert kernel_class(["matmul12", "add2", "gelu"]) == "matmul+add+gelu"


def test_extracts_fused_kernels_with_classes_weights_and_flops(tiny_conv, host_target):
    model = from_module(*tiny_conv, name="tiny")
    kernels = extract_kernels(model.mod, host_target)
    by_class = {}
    for k in kernels:
        by_class.setdefault(k.kernel_class, []).append(k)
    # BN folded into the stem conv; both residual blocks are one kernel with weight 2.
    assert "conv2d+add+relu" in by_class
    residual = by_class["conv2d+add+relu+add+relu"]
    assert [k.weight for k in residual] == [2]
    assert not any("subtract" in c or "divide" in c for c in by_class)
    stem = by_class["conv2d+add+relu"][0]
    assert stem.flops >= 2 * 16 * 16 * 8 * 3 * 3 * 3  # 2 x MACs, plus bias and relu
    assert stem.shape_summary.endswith("-> 1x8x16x16")
    assert len({k.workload_hash for k in kernels}) == len(kernels)


def test_same_kernel_in_two_models_has_the_same_hash_and_class(tiny_conv, host_target):
    module, (x,) = tiny_conv
    a = extract_kernels(from_module(module, (x,)).mod, host_target)
    b = extract_kernels(from_module(module, (x.clone(),)).mod, host_target)
    assert {(k.workload_hash, k.kernel_class) for k in a} == {
        (k.workload_hash, k.kernel_class) for k in b
    }


def test_gathers_clip_so_random_indices_cannot_crash_a_measurement(host_target):
    import torch

    from transtune.measure import EVALUATOR, local_runner, warm_builder
    from transtune.tuning import measure_untuned

    module = torch.nn.Embedding(50, 8).eval()
    model = from_module(module, (torch.tensor([[1, 7, 3]]),), name="embed")
    (take,) = [k for k in extract_kernels(model.mod, host_target) if k.kernel_class == "take"]
    assert "T.min(T.max(" in take.mod.script()
    # The runner fills the int64 indices with random values, far out of the table's range.
    with warm_builder(None, 2) as builder:
        (secs,) = measure_untuned([take], host_target, builder, local_runner(EVALUATOR))
    assert 0 < secs < 1e-2


def test_nhwc_layout_converts_every_convolution_and_keeps_the_numerics(tiny_conv):
    import numpy as np

    from transtune.compile import compile_model
    from transtune.targets import get_config

    module, (x,) = tiny_conv
    model = from_module(module, (x,), name="tiny")
    nchw, nhwc = get_config("host"), get_config("host", "nhwc")
    assert nhwc.layout == "NHWC" and nhwc.name == nchw.name  # the same hardware
    a, b = extract_kernels(model.mod, nchw), extract_kernels(model.mod, nhwc)
    convs = [k for k in b if k.kernel_class.startswith("conv2d")]
    # Classes stay (donors are told apart by the record key); shapes are channels-last.
    assert {k.kernel_class for k in convs} == {
        k.kernel_class for k in a if k.kernel_class.startswith("conv2d")
    }
    assert all(k.shape_summary.endswith("x8") for k in convs)  # 1x16x16x8, ...
    assert not {k.workload_hash for k in convs} & {k.workload_hash for k in a}
    (out,) = compile_model(model, nhwc).run(model.inputs)
    expected = module(x).detach().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fast_math", [False, True])
def test_nhwc_activations_fuse_into_the_convolution_without_transposes(fast_math):
    import numpy as np
    import torch

    from transtune.compile import compile_model
    from transtune.targets import get_config

    torch.manual_seed(0)
    conv = lambda: torch.nn.Conv2d(8, 8, 3, padding=1)  # noqa: E731
    module = torch.nn.Sequential(conv(), torch.nn.ReLU6(), conv(), torch.nn.SiLU(), conv()).eval()
    x = torch.randn(1, 8, 16, 16)
    model = from_module(module, (x,), name="activations")
    config = get_config("host", "nhwc", fast_math=fast_math)
    classes = sorted(k.kernel_class for k in extract_kernels(model.mod, config))
    # ReLU6 (a clip, which ConvertLayout has no rule for) and SiLU (an opaque TIR call under
    # fast math) are each convolution's epilogue; only the model's input and output transpose.
    assert classes == ["conv2d+add", "conv2d+add+maximum+minimum",
                       "conv2d+add+tir_sigmoid+multiply", "transpose", "transpose"]  # fmt: skip
    (out,) = compile_model(model, config).run(model.inputs)
    np.testing.assert_allclose(out, module(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_multiply_add_flops_count_the_convolution_not_its_epilogue():
    import torch

    from transtune.targets import get_config

    module = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.SiLU()).eval()
    model = from_module(module, (torch.randn(1, 8, 16, 16),), name="conv_silu")
    kernels = extract_kernels(model.mod, get_config("host", "nhwc", fast_math=True))
    (conv,) = [k for k in kernels if k.kernel_class.startswith("conv2d")]
    assert multiply_add_flops(conv.mod) == 2 * (16 * 16 * 16) * (8 * 3 * 3)
    assert conv.flops > 1.5 * multiply_add_flops(conv.mod)  # fast math's sigmoid counted too
    assert all(multiply_add_flops(k.mod) == 0 for k in kernels if k is not conv)  # transposes
