"""A TenSet-style dataset: sampled schedules of zoo kernels measured on target configurations."""

from .collect import EVALUATOR, CollectStats, DatasetKernel, collect, dataset_kernels
from .info import dataset_info, load_records
from .store import DatasetError, DatasetStore, ReadReport

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
