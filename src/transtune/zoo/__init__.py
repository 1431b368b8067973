"""Model zoo: our own PyTorch definitions (random weights) of reference CNNs and BERT variants.

Every model follows the torchvision / HuggingFace reference layer shapes; see ``registry.py``
for the published parameter counts they are checked against.
"""

from .registry import (
    MODELS,
    ModelSpec,
    UnknownModelError,
    count_flops,
    count_params,
    get_model,
    get_spec,
    list_models,
)

__all__ = [
    "MODELS",
    "ModelSpec",
    "UnknownModelError",
    "count_flops",
    "count_params",
    "get_model",
    "get_spec",
    "list_models",
]
