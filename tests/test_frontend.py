"""Import paths and bad input: PyTorch modules, ONNX files from both exporters, errors."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from transtune.compile import compile_model
from transtune.errors import ModelImportError, UnknownModelError
from transtune.frontend import export_onnx, from_module, from_zoo, load_onnx
from transtune.onnx_shapes import fold_static_shapes, input_shapes


def _reference(module, inputs):
    with torch.no_grad():
        return module(*inputs).numpy()


def _export_dynamic_batch(module, inputs, path, dynamo):
    """Export as users do: with a symbolic batch dimension."""
    with torch.no_grad():
        if dynamo:
            batch = torch.export.Dim("batch", min=1, max=64)
            torch.onnx.export(
                module, inputs, str(path), dynamo=True, input_names=["x"],
                dynamic_shapes=({0: batch},), verbose=False,
            )  # fmt: skip
        else:
            torch.onnx.export(
                module, inputs, str(path), dynamo=False, input_names=["x"],
                dynamic_axes={"x": {0: "batch"}},
            )  # fmt: skip
    return path


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "torch.export"])
@pytest.mark.parametrize("fixture", ["tiny_conv", "tiny_attention"])
def test_onnx_exports_with_shape_arithmetic_import_and_match(fixture, dynamo, tmp_path, request):
    module, inputs = request.getfixturevalue(fixture)
    path = _export_dynamic_batch(module, inputs, tmp_path / "m.onnx", dynamo)
    assert isinstance(input_shapes(onnx.load(str(path)))["x"][0], str)  # symbolic batch
    model = load_onnx(path, shapes={"x": list(inputs[0].shape)})
    ops = {n.op_type for n in model.onnx_model.graph.node}
    assert not ops & {"Shape", "Gather", "Concat", "Unsqueeze", "Cast"}
    (out,) = compile_model(model).run([inputs[0].numpy()])
    np.testing.assert_allclose(out, _reference(module, inputs), rtol=1e-4, atol=1e-5)


def test_torchscript_export_with_shape_arithmetic_fails_without_folding(tiny_attention, tmp_path):
    """The reason for folding: TVM's ONNX frontend takes the raw export badly."""
    from tvm.relax.frontend.onnx import from_onnx

    module, inputs = tiny_attention
    path = _export_dynamic_batch(module, inputs, tmp_path / "m.onnx", dynamo=False)
    raw = onnx.load(str(path))
    assert {"Shape", "Gather"} <= {n.op_type for n in raw.graph.node}
    with pytest.raises(Exception):  # noqa: B017 - any failure of TVM's frontend
        from_onnx(raw, shape_dict={"x": list(inputs[0].shape)})


def test_fold_rejects_shape_of_wrong_rank(tiny_conv, tmp_path):
    module, inputs = tiny_conv
    path = export_onnx(from_module(module, inputs), tmp_path / "m.onnx", dynamo=False)
    with pytest.raises(ValueError, match="rank"):
        fold_static_shapes(onnx.load(str(path)), {"input0": [1, 3]})


def test_from_module_matches_pytorch(tiny_attention):
    module, inputs = tiny_attention
    model = from_module(module, inputs, name="attn")
    (out,) = compile_model(model).run(model.inputs)
    np.testing.assert_allclose(out, _reference(module, inputs), rtol=1e-4, atol=1e-5)


def test_unknown_zoo_model():
    with pytest.raises(UnknownModelError, match="resnet18"):
        from_zoo("resnet19")


def test_missing_onnx_file(tmp_path):
    with pytest.raises(ModelImportError, match="no such ONNX file"):
        load_onnx(tmp_path / "nope.onnx")


def test_malformed_onnx_file(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf\xff\xff")
    with pytest.raises(ModelImportError, match="malformed ONNX"):
        load_onnx(path)


def test_onnx_op_the_frontend_cannot_take(tmp_path):
    node = helper.make_node("Celu", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )  # fmt: skip
    path = tmp_path / "celu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(ModelImportError, match="Celu"):
        load_onnx(path)


def test_symbolic_dimension_warns_and_shape_option_sets_it(tiny_conv, tmp_path, caplog):
    from transtune.cli import main

    module, inputs = tiny_conv
    path = _export_dynamic_batch(module, inputs, tmp_path / "m.onnx", dynamo=False)
    with caplog.at_level("WARNING", logger="transtune.onnx_shapes"):
        model = load_onnx(path)
    assert model.inputs[0].shape[0] == 1 and "pinned to 1" in caplog.text
    caplog.clear()
    shape = "x=" + "x".join(str(d) for d in (2, *inputs[0].shape[1:]))
    assert main(["kernels", str(path), "--shape", shape]) == 0
    assert "pinned" not in caplog.text
    with pytest.raises(SystemExit) as bad:
        main(["kernels", str(path), "--shape", "x=2xZ"])
    assert bad.value.code == 2
