"""Transfer-tuning: reuse schedules tuned for other models' kernels of the same class."""

from ..schedules import Replay, postprocessors, replay, strip_postproc
from .search import KernelTransfer, TransferResult, transfer_tune, zero_measurement_seconds

__all__ = [
    "KernelTransfer",
    "Replay",
    "TransferResult",
    "postprocessors",
    "replay",
    "strip_postproc",
    "transfer_tune",
    "zero_measurement_seconds",
]
