"""Features of programs for cost models."""

from .program import FEATURE_DIM, per_store_features
from .trace import KINDS, TRACE_DIM, schedule_tokens, trace_tokens

__all__ = [
    "FEATURE_DIM",
    "KINDS",
    "TRACE_DIM",
    "per_store_features",
    "schedule_tokens",
    "trace_tokens",
]
