"""Cost models over joint program + hardware features (see :mod:`.models`)."""

from .data import CostData, load_cost_data
from .metrics import evaluate, network_topk
from .models import (
    CostModelError,
    TorchConfig,
    TorchCostModel,
    XGBConfig,
    XGBCostModel,
    create,
    load,
)

__all__ = [
    "CostData",
    "CostModelError",
    "TorchConfig",
    "TorchCostModel",
    "XGBConfig",
    "XGBCostModel",
    "create",
    "evaluate",
    "load",
    "load_cost_data",
    "network_topk",
]
