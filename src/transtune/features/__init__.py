"""Features of programs for cost models."""

from .program import FEATURE_DIM, per_store_features

__all__ = ["FEATURE_DIM", "per_store_features"]
