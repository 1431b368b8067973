"""Import models into TVM Relax: zoo names, PyTorch modules and ONNX files."""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelImportError, error_line


@dataclass
class ImportedModel:
    """A model as TVM sees it, with example inputs and, where known, its PyTorch source."""

    name: str
    mod: Any  # tvm.IRModule (Relax), weights bound as constants
    inputs: list[np.ndarray]
    torch_module: Any = field(default=None, repr=False)  # torch.nn.Module or None
    onnx_model: Any = field(default=None, repr=False)  # onnx.ModelProto or None
    source: str = "torch"

    def torch_inputs(self) -> tuple:
        import torch

        return tuple(torch.from_numpy(x) for x in self.inputs)


def from_zoo(name: str, batch_size: int = 1, size: int | None = None) -> ImportedModel:
    """Import a zoo model (random weights) at a batch size and image size / sequence length."""
    from . import zoo

    module, inputs = zoo.get_model(name, batch_size=batch_size, size=size)
    imported = from_module(module, inputs, name=name)
    imported.source = "zoo"
    return imported


def from_module(module, example_inputs: tuple, name: str = "model") -> ImportedModel:
    """Import a user's ``torch.nn.Module`` through ``torch.export`` with static shapes."""
    import torch
    import tvm.relax.frontend.torch as relax_torch

    module = module.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(module, tuple(example_inputs))
            mod = relax_torch.from_exported_program(
                program, keep_params_as_input=False, unwrap_unit_return_tuple=True
            )
    except Exception as err:
        raise ModelImportError(f"cannot import {name}: {error_line(err)}") from None
    inputs = [x.detach().cpu().numpy() for x in example_inputs]
    return ImportedModel(name, mod, inputs, torch_module=module)


def load_onnx(
    path: str | os.PathLike, shapes: dict[str, list[int]] | None = None, seed: int = 0
) -> ImportedModel:
    """Import an ONNX file; shape arithmetic is folded first (see :mod:`.onnx_shapes`).

    ``shapes`` pins input shapes by name; symbolic dimensions default to 1. Example inputs are
    random, from ``seed`` (token-id inputs are drawn in ``[0, 100)``).
    """
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    from .onnx_shapes import fold_static_shapes, graph_inputs

    path = Path(path)
    if not path.is_file():
        raise ModelImportError(f"no such ONNX file: {path}")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as err:
        raise ModelImportError(f"malformed ONNX file {path}: {error_line(err)}") from None
    try:
        model = fold_static_shapes(model, shapes)
    except ValueError as err:
        raise ModelImportError(f"{path}: {err}") from None
    rng = np.random.default_rng(seed)
    inputs, shape_dict, dtype_dict = [], {}, {}
    for inp in graph_inputs(model):
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        shape_dict[inp.name], dtype_dict[inp.name] = dims, str(dtype)
        if np.issubdtype(dtype, np.integer):
            inputs.append(rng.integers(0, 100, size=dims).astype(dtype))
        else:
            inputs.append(rng.standard_normal(dims).astype(dtype))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict)
    except Exception as err:
        raise ModelImportError(f"TVM cannot import {path}: {error_line(err)}") from None
    return ImportedModel(path.stem, mod, inputs, onnx_model=model, source="onnx")


def export_onnx(imported: ImportedModel, path: str | os.PathLike, dynamo: bool = True) -> Path:
    """Write the PyTorch source of ``imported`` as ONNX, with the torch.export-based exporter
    (``dynamo=True``) or the TorchScript one."""
    import torch

    if imported.torch_module is None:
        raise ModelImportError(f"{imported.name} has no PyTorch source to export")
    path = Path(path)
    names = [f"input{i}" for i in range(len(imported.inputs))]
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)  # "torchvision is not installed", for this export only
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kwargs = {"dynamo": True, "verbose": False} if dynamo else {"dynamo": False}
            torch.onnx.export(
                imported.torch_module, imported.torch_inputs(), str(path), input_names=names,
                **kwargs,
            )  # fmt: skip
    finally:
        logger.setLevel(level)
    return path


def load(
    model: str,
    batch_size: int = 1,
    size: int | None = None,
    shapes: dict[str, list[int]] | None = None,
) -> ImportedModel:
    """A zoo model by name, or an ONNX file by path (``*.onnx``; ``shapes`` pins its inputs'
    shapes by name)."""
    if model.endswith(".onnx") or os.sep in model:
        if batch_size != 1 or size is not None:
            raise ModelImportError("batch size and size apply to zoo models, not ONNX files")
        return load_onnx(model, shapes)
    if shapes:
        raise ModelImportError("--shape applies to ONNX files; zoo models take --batch/--size")
    return from_zoo(model, batch_size=batch_size, size=size)
