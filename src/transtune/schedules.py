"""Schedules and traces: a kernel's design spaces, programs sampled from them, a trace replayed
onto another kernel, and the per-store features of a schedule (TVM's MetaSchedule, behind
this one module).

**Replay.** A trace is applied without its postprocessing instructions, then the new kernel's
own postprocessors run (plain replay of a full trace breaks on structural changes). Tile sizes
that no longer divide the new extents are re-fitted by TVM without an error; we detect that by
comparing the tile decisions before and after and report it. :func:`replay` is for a donor of
the same kernel class. :func:`replay_anchor` takes a donor of another class with the same
*anchor block* (the block with an init statement and the most FLOPs, e.g. the convolution of
``conv2d+add+relu``): MetaSchedule's ``schedule_using_anchor_trace`` applies the donor's
instructions on that block and inlines or parallelizes the elementwise blocks around it,
which differ between the two kernels.

**Sampling.** Random schedules from MetaSchedule's design space, stored as (space,
decisions), like TenSet's sampled initial population (and MetaSchedule's ``ReplayTrace``):
each design space's instructions are replayed with every sampling decision drawn afresh,
then the target's postprocessors run; a sample they reject is redrawn. A sample is kept as
its design space's index and its decisions only: :func:`rebuild` gets the same schedule back.

**Features.** TVM's ``PerStoreFeature`` (Ansor/TenSet's 164 per buffer store): a schedule
gives one row per buffer store of its lowered TIR; the number of rows varies.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Trace

from .errors import error_line
from .library.trust import trace_problem

_TILE = "SamplePerfectTile"


def trace_json(trace: Trace, remove_postproc: bool = False) -> list:
    """A trace as MetaSchedule's JSON (``[instructions, decisions]``), plain Python. An index
    map (the weight layout ``RewriteLayout`` chose) is kept as TVM's JSON text, as MetaSchedule's
    ``JSONDatabase`` writes it and :func:`replay` reads it back."""
    import tvm
    from tvm.s_tir.schedule import _ffi_api

    def convert(obj):
        if isinstance(obj, tvm.tirx.IndexMap):
            return tvm.ir.save_json(obj)
        if isinstance(obj, str | int | float | bool) or obj is None:
            return obj if not isinstance(obj, str) else str(obj)
        if hasattr(obj, "value") and isinstance(obj.value, int | float):
            return obj.value
        if hasattr(obj, "items"):
            return {str(k): convert(v) for k, v in obj.items()}
        return [convert(v) for v in obj]

    return convert(_ffi_api.TraceAsJSON(trace, remove_postproc))


@dataclass
class Replay:
    """Outcome of replaying one trace: a schedule, or why there is none."""

    schedule: Schedule | None
    error: str | None = None
    refitted: bool = False


def strip_postproc(trace_json: Any) -> list:
    """A trace JSON without the instructions from ``EnterPostproc`` on."""
    insts, decisions = trace_json
    cut = next((i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc"), len(insts))
    return [insts[:cut], [d for d in decisions if d[0] < cut]]


def _tile_decisions_json(trace_json: Any) -> list:
    insts, decisions = trace_json
    by_index = {index: value for index, value in decisions}
    return [
        [int(x) for x in by_index[i]]
        for i, inst in enumerate(insts)
        if inst[0] == _TILE and i in by_index
    ]


def _tile_decisions(trace: Trace) -> list:
    return [
        [int(x) for x in trace.decisions[inst]]
        for inst in trace.insts
        if inst.kind.name == _TILE and inst in trace.decisions
    ]


def postprocessors(mod, target) -> list:
    """The postprocessors MetaSchedule's default space for ``target`` applies to ``mod``."""
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply")
    return list(context.space_generator.postprocs)


def anchor_block(mod) -> str | None:
    """Name of ``mod``'s anchor block (MetaSchedule's definition), or None if it has none."""
    from tvm.s_tir.analysis import find_anchor_sblock

    try:
        block = find_anchor_sblock(mod)
    except Exception:  # more than one block with an init statement
        return None
    return None if block is None else str(block.name_hint)


def replay(trace_json: Any, mod, postprocs: list, sch: Schedule | None = None) -> Replay:
    """Apply ``trace_json`` (a MetaSchedule record's trace) to ``mod`` (or to ``sch``, a fresh
    schedule of it, e.g. with its own random seed) and post-process it. Sampling instructions
    without a decision draw one. A trace outside :mod:`~transtune.library.trust`'s allowlist
    is not applied."""
    problem = trace_problem(trace_json)
    if problem is not None:
        return Replay(None, f"unsafe trace: {problem}")
    trace_json = strip_postproc(trace_json)
    sch = sch if sch is not None else Schedule(mod)
    try:
        Trace.apply_json_to_schedule(trace_json, sch)
    except Exception as err:  # ScheduleError, InternalError on structural mismatch
        return Replay(None, error_line(err))
    refitted = _tile_decisions(sch.trace) != _tile_decisions_json(trace_json)
    return _postprocess(sch, postprocs, refitted)


def _postprocess(sch: Schedule, postprocs: list, refitted: bool) -> Replay:
    sch.enter_postproc()
    for postproc in postprocs:
        try:
            ok = postproc.apply(sch)
        except Exception as err:
            return Replay(None, f"{type(postproc).__name__}: {error_line(err)}", refitted)
        if not ok:
            return Replay(None, f"postprocessor {type(postproc).__name__} rejected it", refitted)
    return Replay(sch, None, refitted)


def replay_anchor(trace_json: Any, donor_mod, mod, target, postprocs: list) -> Replay:
    """Apply the anchor block's part of ``trace_json`` (a record of ``donor_mod``, a kernel of
    another class) to ``mod`` and post-process it; see the module docstring."""
    problem = trace_problem(trace_json)
    if problem is not None:
        return Replay(None, f"unsafe trace: {problem}")
    trace_json = strip_postproc(trace_json)
    donor = Schedule(donor_mod)
    sch = Schedule(mod)
    try:
        Trace.apply_json_to_schedule(trace_json, donor)
        ms.trace_apply.schedule_using_anchor_trace(sch, donor.trace, target)
    except Exception as err:  # the anchor blocks differ in structure
        return Replay(None, error_line(err))
    refitted = _tile_decisions(sch.trace) != _tile_decisions_json(trace_json)
    return _postprocess(sch, postprocs, refitted)


# -- sampling -------------------------------------------------------------------------------


@dataclass
class Sample:
    index: int  # position in the kernel's deterministic sample sequence
    space: int
    decisions: str  # JSON list of [instruction index, decision]
    schedule: Schedule


def design_spaces(mod, target) -> tuple[list[str], list]:
    """The instruction lists (JSON, without decisions or postprocessing) of ``mod``'s design
    spaces on ``target``, and the target's postprocessors."""
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply")
    spaces = []
    for sch in context.generate_design_space():
        insts, _ = strip_postproc(trace_json(sch.trace, remove_postproc=True))
        spaces.append(json.dumps(insts, separators=(",", ":")))
    return spaces, list(context.space_generator.postprocs)


def kernel_seed(workload: str, seed: int) -> int:
    """A seed for one kernel, stable across runs and machines."""
    return int.from_bytes(hashlib.sha256(f"{workload}:{seed}".encode()).digest()[:4], "little")


def sample(
    mod, spaces: list[str], postprocs: list, count: int, seed: int, max_tries: int = 8
) -> list[Sample]:
    """The first ``count`` samples of the kernel's sequence (deterministic in ``seed``).

    Sample ``i`` uses design space ``i % len(spaces)``; each try draws with its own seed.
    Duplicates (same space and decisions) are dropped, so fewer may come back.
    """
    out, seen = [], set()
    for index in range(count):
        space = index % len(spaces)
        for attempt in range(max_tries):
            draw = (seed + index * max_tries + attempt) % (1 << 31)
            sch = Schedule(mod, seed=draw or 1)  # TVM takes seeds in [1, 2**31 - 1]
            result = replay([json.loads(spaces[space]), []], mod, postprocs, sch=sch)
            if result.schedule is None:
                continue
            _, decisions = strip_postproc(trace_json(result.schedule.trace))
            text = json.dumps(decisions, separators=(",", ":"))
            if (space, text) not in seen:
                seen.add((space, text))
                out.append(Sample(index, space, text, result.schedule))
            break
    return out


def rebuild(mod, insts: str, decisions: str, postprocs: list) -> Schedule | None:
    """The schedule of a stored sample (``None`` if it no longer applies)."""
    return replay([json.loads(insts), json.loads(decisions)], mod, postprocs).schedule


# -- features ------------------------------------------------------------------------------


def per_store_features(mod, schedules: list, target) -> list[np.ndarray]:
    """One ``(n_stores, FEATURE_DIM)`` float32 matrix per schedule of the kernel ``mod``."""
    if not schedules:
        return []
    context = ms.TuneContext(mod=mod, target=target)
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    candidates = [ms.MeasureCandidate(sch, args) for sch in schedules]
    extractor = ms.feature_extractor.PerStoreFeature()
    return [t.numpy().astype(np.float32) for t in extractor.extract_from(context, candidates)]
