"""Per-store program features: TVM's ``PerStoreFeature`` (Ansor/TenSet's 164 per buffer store).

A schedule gives one row per buffer store of its lowered TIR; the number of rows varies.
"""

from __future__ import annotations

import numpy as np
from tvm.s_tir import meta_schedule as ms

FEATURE_DIM = 164


def per_store_features(mod, schedules: list, target) -> list[np.ndarray]:
    """One ``(n_stores, 164)`` float32 matrix per schedule of the kernel ``mod``."""
    if not schedules:
        return []
    context = ms.TuneContext(mod=mod, target=target)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    candidates = [ms.MeasureCandidate(sch, args) for sch in schedules]
    extractor = ms.feature_extractor.PerStoreFeature()
    return [t.numpy().astype(np.float32) for t in extractor.extract_from(context, candidates)]
