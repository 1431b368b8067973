"""Random schedules from MetaSchedule's design space, stored as (space, decisions).

Like TenSet's sampled initial population (and MetaSchedule's ``ReplayTrace``): each design
space's instructions are replayed with every sampling decision drawn afresh, then the
target's postprocessors run; a sample they reject is redrawn. A sample is kept as its design
space's index and its decisions only: :func:`rebuild` gets the same schedule back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from ..library import plain
from ..transfer.replay import replay, strip_postproc


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
        insts, _ = strip_postproc(plain(sch.trace.as_json(remove_postproc=True)))
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
            _, decisions = strip_postproc(plain(result.schedule.trace.as_json()))
            text = json.dumps(decisions, separators=(",", ":"))
            if (space, text) not in seen:
                seen.add((space, text))
                out.append(Sample(index, space, text, result.schedule))
            break
    return out


def rebuild(mod, insts: str, decisions: str, postprocs: list) -> Schedule | None:
    """The schedule of a stored sample (``None`` if it no longer applies)."""
    return replay([json.loads(insts), json.loads(decisions)], mod, postprocs).schedule
