"""Fold run-time shape arithmetic out of ONNX graphs before TVM imports them.

PyTorch's exporters often emit ``Shape -> Gather -> Concat -> Reshape`` chains (and casts and
arithmetic on shapes) that TVM's ONNX frontend rejects or mistypes. With static input shapes
all of that is constant: :func:`fold_static_shapes` pins the input shapes, runs ONNX shape
inference, replaces every ``Shape`` of a statically shaped tensor by a constant, and evaluates
every node whose inputs are all constant with ONNX's reference evaluator, until nothing
changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

# Ops never folded even with constant inputs: random, or with sub-graphs.
_NOT_FOLDABLE = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "If", "Loop", "Scan",
}  # fmt: skip


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs of a graph (initializers listed as inputs excluded)."""
    weights = {init.name for init in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in weights]


def input_shapes(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    """Declared input shapes; symbolic dimensions are given by name."""
    return {
        i.name: [d.dim_param if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in graph_inputs(model)
    }


def fold_static_shapes(
    model: onnx.ModelProto,
    shapes: Mapping[str, Sequence[int]] | None = None,
    default_dim: int = 1,
    max_rounds: int = 10,
) -> onnx.ModelProto:
    """Return a copy of ``model`` with static input shapes and shape arithmetic folded.

    ``shapes`` gives input shapes by name; symbolic dimensions of other inputs become
    ``default_dim`` (a batch of 1).
    """
    model = _with_static_inputs(model, dict(shapes or {}), default_dim)
    for _ in range(max_rounds):
        if not _fold_once(model):
            break
    _drop_unused_initializers(model.graph)
    return model


def _with_static_inputs(
    model: onnx.ModelProto, shapes: dict[str, Sequence[int]], default_dim: int
) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = {i.name for i in graph_inputs(out)}
    unknown = set(shapes) - known
    if unknown:
        raise ValueError(f"no graph input named {sorted(unknown)}; inputs: {sorted(known)}")
    for inp in graph_inputs(out):
        dims = inp.type.tensor_type.shape.dim
        given = shapes.get(inp.name)
        if given is not None and len(given) != len(dims):
            raise ValueError(f"input {inp.name!r} has rank {len(dims)}, shape {list(given)} given")
        for k, dim in enumerate(dims):
            value = given[k] if given is not None else (dim.dim_value or default_dim)
            if given is None and not dim.dim_value:
                logging.getLogger(__name__).warning(
                    "%s: dimension %d (%s) is symbolic, pinned to %d (set it with --shape "
                    "%s=...)", inp.name, k, dim.dim_param or "?", default_dim, inp.name,
                )  # fmt: skip
            dim.Clear()
            dim.dim_value = int(value)
    # Stale value_info from the exporter may carry symbolic dims; inference recomputes them.
    del out.graph.value_info[:]
    return out


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    g = inferred.graph
    shapes = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[vi.name] = tuple(d.dim_value for d in t.shape.dim)
    for init in g.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _fold_once(model: onnx.ModelProto) -> bool:
    """One pass in topological order; returns whether any node was folded."""
    graph = model.graph
    shapes = _static_shapes(model)
    consts = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    outputs = {o.name for o in graph.output}
    opsets = list(model.opset_import)
    kept, folded = [], {}
    for node in graph.node:
        values = _evaluate(node, consts, shapes, opsets)
        if values is None or outputs.intersection(node.output):
            kept.append(node)
            continue
        for name, value in zip(node.output, values, strict=True):
            consts[name] = folded[name] = np.asarray(value)
    if not folded:
        return False
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items())
    return True


def _evaluate(node, consts, shapes, opsets) -> list[np.ndarray] | None:
    """The node's outputs if they are known without running the model, else None."""
    if node.op_type == "Constant":
        return [numpy_helper.to_array(node.attribute[0].t)] if _plain_constant(node) else None
    if node.op_type == "Shape" and node.input[0] in shapes:
        attrs = {a.name: a.i for a in node.attribute}
        dims = shapes[node.input[0]]
        start, end = attrs.get("start", 0), attrs.get("end", len(dims))
        return [np.array(dims[start:end], dtype=np.int64)]
    if node.op_type == "Size" and node.input[0] in shapes:
        return [np.array(int(np.prod(shapes[node.input[0]])), dtype=np.int64)]
    inputs = [name for name in node.input if name]
    if node.op_type in _NOT_FOLDABLE or node.domain not in ("", "ai.onnx") or not inputs:
        return None
    if not all(name in consts for name in inputs):
        return None
    single = helper.make_model(
        helper.make_graph(
            [node],
            "fold",
            [helper.make_tensor_value_info(n, _elem_type(consts[n]), None) for n in inputs],
            [
                helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                for n in node.output
            ],
        ),
        opset_imports=opsets,
    )
    try:
        return list(ReferenceEvaluator(single).run(None, {n: consts[n] for n in inputs}))
    except Exception:  # an op the reference evaluator lacks: leave it to TVM
        return None


def _plain_constant(node: onnx.NodeProto) -> bool:
    return len(node.attribute) == 1 and node.attribute[0].name == "value"


def _elem_type(value: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    dropped = {init.name for init in graph.initializer if init.name not in used}
    for field in (graph.initializer, graph.input):
        keep = [p for p in field if p.name not in dropped]
        del field[:]
        field.extend(keep)
