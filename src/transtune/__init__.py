"""transtune: transfer-tuning and transferable cost models on Apache TVM MetaSchedule.

The public API (imported lazily, so that ``import transtune`` stays cheap)::

    model = transtune.load("resnet18")                 # zoo name or .onnx path
    kernels = transtune.extract_kernels(model.mod, transtune.get_config("host"))
    compiled = transtune.compile_model(model, "host")  # optional MetaSchedule database
    result = transtune.benchmark(model, "host")
"""

from __future__ import annotations

import importlib
import os

# TVM's runtime settings, before anything starts its thread pool (in this process or in the
# workers it spawns, which inherit the environment):
# - it pins the calling thread to a core when it sizes the pool, and every thread and process
#   started afterwards (PyTorch and ONNX Runtime pools, MetaSchedule workers) would inherit that
#   one-core mask: let the OS schedule TVM's threads instead;
# - on x86 it assumes hyper-threading and uses half the logical CPUs, one thread on this 2-vCPU
#   host, and ``runtime.config_threadpool`` cannot raise it later: use every CPU we may run on
#   (a target configuration with fewer threads lowers it per process).
os.environ.setdefault("TVM_BIND_THREADS", "0")
_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
os.environ.setdefault("TVM_NUM_THREADS", str(_cpus or 1))

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
