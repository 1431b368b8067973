"""Import -> kernels -> compile -> numerics, on a small zoo model at reduced size."""

import numpy as np
import pytest

from transtune.benchmark import benchmark, max_rel_err
from transtune.compile import compile_model
from transtune.frontend import from_zoo
from transtune.tasks import extract_kernels


@pytest.fixture(scope="module")
def resnet18_small():
    return from_zoo("resnet18", batch_size=1, size=32)


def test_zoo_model_extracts_compiles_and_matches_pytorch(resnet18_small, host_target):
    kernels = extract_kernels(resnet18_small.mod, host_target)
    classes = {k.kernel_class for k in kernels}
    assert {"conv2d+add+relu", "conv2d+add+add+relu", "matmul+add"} <= classes
    assert sum(k.weight for k in kernels if k.kernel_class.startswith("conv2d")) == 20
    outputs = compile_model(resnet18_small, "host").run(resnet18_small.inputs)
    reference = resnet18_small.torch_module(*resnet18_small.torch_inputs()).detach().numpy()
    assert outputs[0].shape == (1, 1000)
    assert max_rel_err(outputs, [reference]) < 1e-4


def test_benchmark_all_runtimes_agree(resnet18_small):
    result = benchmark(resnet18_small, "host", repeat=2, min_repeat_ms=20)
    assert [t.runtime for t in result.timings] == ["tvm-untuned", "pytorch", "onnxruntime"]
    for t in result.timings:
        assert len(t.seconds) == 2 and all(s > 0 for s in t.seconds)
        assert t.matches in (True, None)
    assert result.missing_records == []


def test_empty_database_reports_every_kernel_missing(resnet18_small, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    compiled = compile_model(resnet18_small, "host", database=db)
    assert compiled.applied_records == []
    assert len(compiled.missing_records) >= 10
    out = compiled.run(resnet18_small.inputs)[0]
    assert np.isfinite(out).all()


def test_compare_times_builds_and_peers_interleaved_with_numerics(tiny_conv):
    from transtune.benchmark import compare
    from transtune.frontend import from_module
    from transtune.targets import get_config

    model = from_module(*tiny_conv, name="tiny")
    builds = {"nchw": (get_config("host"), None), "nhwc": (get_config("host", "NHWC"), None)}
    result = compare(model, builds, repeat=2, min_repeat_ms=5)
    assert [t.runtime for t in result.timings] == ["nchw", "nhwc", "pytorch", "onnxruntime"]
    for t in result.timings:
        assert len(t.seconds) == 2 and all(s > 0 for s in t.seconds)
        assert t.matches in (True, None), t  # every build checked against PyTorch
    assert result.reference == "pytorch"
    assert [t.matches for t in result.timings[:2]] == [True, True]
    with pytest.raises(ValueError, match="same thread count"):
        compare(model, {"a": builds["nchw"], "b": (get_config("host-1core"), None)})


def test_profile_says_where_an_inference_goes(tiny_conv):
    from transtune.frontend import from_module

    model = from_module(*tiny_conv, name="tiny")
    compiled = compile_model(model, "host")
    profile = compiled.profile(model.inputs, repeat=3)
    kernels = {n: v for n, v in profile.items() if n.startswith("fused_")}
    assert any(n.startswith("fused_conv2d") for n in kernels)
    assert all(v["calls"] >= 1 and v["seconds"] > 0 for v in profile.values())
    inside = sum(v["seconds"] for n, v in profile.items() if n != "total")
    assert 0 < inside <= profile["total"]["seconds"] * 1.05


def test_onnxruntime_profile_names_its_nodes_and_operators(tiny_conv):
    from transtune.benchmark import onnxruntime_profile
    from transtune.frontend import from_module

    profile = onnxruntime_profile(from_module(*tiny_conv, name="tiny"), 2, repeat=3)
    assert "Conv" in profile["by_op"] and profile["nodes"][0]["seconds"] > 0
    assert sum(profile["by_op"].values()) <= profile["total"] * 1.05
