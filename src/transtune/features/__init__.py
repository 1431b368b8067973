"""Features of programs for cost models: trace tokens (:mod:`.trace`) and the size of TVM's
per-store feature rows (computed by :func:`transtune.schedules.per_store_features`)."""

from .trace import KINDS, TRACE_DIM, schedule_tokens, trace_tokens

FEATURE_DIM = 164  # TVM's PerStoreFeature: values per buffer store

__all__ = ["FEATURE_DIM", "KINDS", "TRACE_DIM", "schedule_tokens", "trace_tokens"]
