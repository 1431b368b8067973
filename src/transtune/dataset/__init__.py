"""A TenSet-style dataset: sampled schedules of zoo kernels measured on target configurations.

Reading a dataset (:mod:`.store`, :mod:`.info`, :mod:`.splits`) does not import TVM;
collecting one (:mod:`.collection`) does, when its names are first used.
"""

import importlib

from .info import dataset_info, load_records
from .store import DatasetError, DatasetStore, ReadReport

_COLLECT = ("EVALUATOR", "CollectStats", "DatasetKernel", "collect", "dataset_kernels")

__all__ = [
    "EVALUATOR",
    "CollectStats",
    "DatasetError",
    "DatasetKernel",
    "DatasetStore",
    "ReadReport",
    "collect",
    "dataset_info",
    "dataset_kernels",
    "load_records",
]


def __getattr__(name: str):
    if name in _COLLECT:
        return getattr(importlib.import_module(".collection", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
