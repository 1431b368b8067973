"""transtune: transfer-tuning and transferable cost models on Apache TVM MetaSchedule.

The public API (imported lazily, so that ``import transtune`` stays cheap)::

    model = transtune.load("resnet18")                 # zoo name or .onnx path
    kernels = transtune.extract_kernels(model.mod, transtune.get_config("host"))
    compiled = transtune.compile_model(model, "host")  # optional MetaSchedule database
    result = transtune.benchmark(model, "host")
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "load": "frontend",
    "load_onnx": "frontend",
    "from_zoo": "frontend",
    "from_module": "frontend",
    "ImportedModel": "frontend",
    "extract_kernels": "tasks",
    "Kernel": "tasks",
    "kernel_class": "tasks",
    "get_config": "targets",
    "host_configs": "targets",
    "host_info": "machine",
    "configure_threads": "machine",
    "TargetConfig": "targets",
    "compile_model": "compile",
    "CompiledModel": "compile",
    "benchmark": "benchmark",
    "BenchResult": "benchmark",
    "TranstuneError": "errors",
    "Workflow": "workflow",
    "open_library": "library",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(f".{_API[name]}", __name__), name)
    raise AttributeError(f"module 'transtune' has no attribute {name!r}")
