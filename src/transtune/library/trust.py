"""What a schedule trace from elsewhere may contain before transtune applies it.

Traces come from files and databases other people wrote (``library import``, ``library
merge``, a shared PostgreSQL library) and are replayed, built and run here. Most of a trace is
harmless loop and block rewriting, but annotations reach TVM's code generators: an
``Annotate`` with ``pragma_import_llvm`` links arbitrary LLVM IR into the built module (code
execution), ``pragma_import_c`` the same for C. So every trace is checked against an
allowlist before it is stored, merged, replayed or handed to MetaSchedule: instruction kinds
that are MetaSchedule's schedule primitives and sampling instructions, and annotation keys
that MetaSchedule's own rules and postprocessors write. Anything else is rejected with the
reason.
"""

from __future__ import annotations

import json
from typing import Any

INSTRUCTION_KINDS = frozenset({
    # block and loop lookup
    "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers",
    "GetOutputBlocks",
    # loop transformations
    "Split", "Fuse", "Reorder", "Merge", "AddUnitLoop", "Parallel", "Vectorize", "Bind",
    "Unroll",
    # block transformations
    "CacheRead", "CacheWrite", "CacheInplace", "CacheIndex", "ReIndex", "ComputeAt",
    "ReverseComputeAt", "ComputeInline", "ReverseComputeInline", "DecomposeReduction",
    "RFactor", "StorageAlign", "SetScope", "Blockize", "Tensorize", "TransformLayout",
    "TransformBlockLayout", "SetAxisSeparator", "DecomposePadding", "PadEinsum",
    "RollingBuffer", "Annotate", "Unannotate",
    # sampling and markers
    "SampleCategorical", "SamplePerfectTile", "SamplePartitionedTile",
    "SampleComputeLocation", "EnterPostproc",
})  # fmt: skip

ANNOTATION_KEYS = frozenset({
    "pragma_auto_unroll_max_step", "pragma_unroll_explicit", "schedule_rule",
    "software_pipeline_stage", "software_pipeline_order", "software_pipeline_async_stages",
    "warp_execution", "layout_free_buffers",
})  # fmt: skip
_ANNOTATION_PREFIXES = ("meta_schedule.",)

# What the index map of a ``TransformLayout`` (TVM's object JSON text, as ``RewriteLayout``
# writes it) may be built of: variables and index arithmetic, never a call.
INDEX_MAP_NODES = frozenset({
    "None", "int", "ffi.Array", "ffi.String", "ffi.Map", "ir.IntImm", "ir.PrimType", "ir.Var",
    "ir.Range", "tirx.IndexMap", "prim.Add", "prim.Sub", "prim.Mul", "prim.Div", "prim.Mod",
    "prim.FloorDiv", "prim.FloorMod", "prim.Min", "prim.Max", "prim.Cast",
})  # fmt: skip


class UnsafeTrace(ValueError):
    """A trace with an instruction or annotation outside the allowlist."""


def check_trace(trace: Any) -> None:
    """Raise :class:`UnsafeTrace` unless ``trace`` (MetaSchedule's trace JSON,
    ``[instructions, decisions]``) holds only allowed instructions and annotation keys."""
    if not isinstance(trace, list | tuple) or not trace or not isinstance(trace[0], list):
        raise UnsafeTrace("not a schedule trace ([instructions, decisions])")
    for i, inst in enumerate(trace[0]):
        if not isinstance(inst, list) or not inst or not isinstance(inst[0], str):
            raise UnsafeTrace(f"instruction {i} is malformed")
        kind = inst[0]
        if kind not in INSTRUCTION_KINDS:
            raise UnsafeTrace(f"instruction {i}: {kind!r} is not an allowed schedule primitive")
        if kind == "TransformLayout":
            for arg in inst[1] if len(inst) > 1 and isinstance(inst[1], list) else []:
                if isinstance(arg, str) and arg.startswith("{"):
                    _check_index_map(arg, i)
        if kind in ("Annotate", "Unannotate"):
            attrs = inst[2] if len(inst) > 2 and isinstance(inst[2], list) else []
            key = attrs[0] if attrs else None
            if not isinstance(key, str) or not (
                key in ANNOTATION_KEYS or key.startswith(_ANNOTATION_PREFIXES)
            ):
                raise UnsafeTrace(f"instruction {i}: annotation {key!r} is not allowed")


def _check_index_map(text: str, i: int) -> None:
    try:
        nodes = json.loads(text)["nodes"]
        kinds = {node["type"] for node in nodes}
    except (ValueError, KeyError, TypeError):
        raise UnsafeTrace(f"instruction {i}: an index map that is not TVM's JSON") from None
    if kinds - INDEX_MAP_NODES:
        raise UnsafeTrace(f"instruction {i}: an index map holds {sorted(kinds - INDEX_MAP_NODES)}")


def trace_problem(trace: Any) -> str | None:
    """Why ``trace`` is rejected, or None if it is allowed."""
    try:
        check_trace(trace)
    except UnsafeTrace as err:
        return str(err)
    return None
