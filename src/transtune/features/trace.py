"""Schedule-primitive tokens of a MetaSchedule trace (in the spirit of TLP, ASPLOS 2023).

Per-store features describe the lowered loop nest; the trace says how it was made. Each
sampling decision of a trace (postprocessors left out), and each structural step that is
not implied by one, becomes a token: a kind id and ``TRACE_DIM`` numbers:

- ``SamplePerfectTile``: log2 of each tile factor (slots 0-5), log2 of the loop extent
  (slot 6), number of factors (slot 7);
- ``SampleCategorical``: log2(1 + chosen value), e.g. the unroll depth;
- ``SampleComputeLocation``: the chosen location (-2 root, -1 inline, else a loop index);
- structural steps (``RFactor``, ``CacheWrite``, ``Fuse``, ...): their number of inputs.

Lookups, splits, reorders and annotations that replay a decision add nothing and are left
out, which keeps a typical CPU schedule at about 8 tokens.
"""

from __future__ import annotations

import math

import numpy as np

TRACE_DIM = 8
KINDS = (
    "other", "SamplePerfectTile", "SampleCategorical", "SampleComputeLocation", "RFactor",
    "CacheRead", "CacheWrite", "Fuse", "Blockize", "Tensorize", "DecomposeReduction", "Bind",
    "Parallel", "Vectorize", "Unroll", "SamplePartitionedTile", "SampleUserProvided",
)  # fmt: skip
"""Token kinds; the position is the id (an unknown sampling instruction maps to ``other``)."""
_IDS = {k: i for i, k in enumerate(KINDS)}


def trace_tokens(insts: list, decisions: list) -> tuple[np.ndarray, np.ndarray]:
    """(kind ids ``(T,)`` int64, values ``(T, TRACE_DIM)`` float32) of a trace given as its
    JSON instructions and decisions (``[[instruction index, decision], ...]``)."""
    chosen = {int(i): d for i, d in decisions}
    return _tokens(
        (name, len(inputs), attrs, chosen.get(index))
        for index, (name, inputs, attrs, _) in enumerate(insts)
    )


def schedule_tokens(sch) -> tuple[np.ndarray, np.ndarray]:
    """:func:`trace_tokens` of a TVM schedule's trace (postprocessing left out), read off the
    trace's instructions directly (a tenth of the cost of going through its JSON)."""
    trace = sch.trace
    chosen = trace.decisions

    def steps():
        for inst in trace.insts:
            name = inst.kind.name
            if name == "EnterPostproc":
                return
            yield name, len(inst.inputs), inst.attrs, chosen.get(inst)

    return _tokens(steps())


def _tokens(steps) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of ``(name, number of inputs, attrs, decision or None)`` steps."""
    kinds, values = [], []
    for name, n_inputs, attrs, decision in steps:
        if not name.startswith("Sample") and name not in _IDS:
            continue
        row = np.zeros(TRACE_DIM, np.float32)
        if name == "SamplePerfectTile" and decision is not None:
            factors = [max(int(f), 1) for f in decision]
            row[: min(6, len(factors))] = np.log2(factors[:6])
            row[6] = math.log2(math.prod(factors))
            row[7] = len(factors)
        elif name == "SampleCategorical" and decision is not None:
            row[0] = math.log2(1.0 + abs(float(attrs[0][int(decision)])))
        elif name == "SampleComputeLocation" and decision is not None:
            row[0] = float(int(decision))
        else:
            row[7] = n_inputs
        kinds.append(_IDS.get(name, 0))
        values.append(row)
    if not kinds:
        return np.zeros(0, np.int64), np.zeros((0, TRACE_DIM), np.float32)
    return np.asarray(kinds, np.int64), np.stack(values)
