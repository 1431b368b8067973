"""A build beside a measurement: how much it disturbs the timing (why transtune tunes with a
synchronous runner) -> ``docs/results/tuning/overlap.json``, a section of ``tuning.md``.

    python benchmarks/overlap.py   # alone on the host; then python benchmarks/tuning.py report
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from common import meta_line, write_result

DATA = Path(__file__).resolve().parent.parent / "docs" / "results" / "tuning"
SEED = 0


def measure(samples: int = 16, rounds: int = 3) -> None:
    """How much a build running beside a measurement disturbs it: the same built schedules of
    a ResNet-18 kernel timed alone and while a second warm builder compiles other candidates
    (what an asynchronous runner lets MetaSchedule do)."""
    import threading

    from tuning import pick_kernels

    from transtune.measure import (
        EVALUATOR,
        build_modules,
        local_runner,
        remove_built,
        time_built,
        warm_builder,
    )  # fmt: skip
    from transtune.schedules import design_spaces, sample
    from transtune.targets import get_config

    target = get_config("host").tvm_target()
    kernel = pick_kernels(2)[1]  # the ResNet-18 kernel tuning.py compares second
    spaces, postprocs = design_spaces(kernel.mod, target)
    mods = [s.schedule.mod for s in sample(kernel.mod, spaces, postprocs, 2 * samples, SEED)]
    timed, other = mods[:samples], mods[samples:]
    runner = local_runner(EVALUATOR)
    alone: list[list[float | None]] = []
    busy: list[list[float | None]] = []
    with warm_builder() as builder, warm_builder() as background:
        for _ in range(rounds):
            built = build_modules(timed, target, builder)
            alone.append(time_built(timed, built, runner))
            stop = threading.Event()

            def compile_loop(stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    remove_built(build_modules(other, target, background))

            thread = threading.Thread(target=compile_loop)
            thread.start()
            time.sleep(2.0)  # the background builds are under way
            busy.append(time_built(timed, built, runner))
            stop.set()
            thread.join()
            remove_built(built)
    ratios = [b / a for ra, rb in zip(alone, busy, strict=True)
              for a, b in zip(ra, rb, strict=True) if a and b]  # fmt: skip
    spread = [max(x) / min(x) for x in zip(*alone, strict=True) if all(x)]
    write_result(DATA / "overlap.json", {
        "kernel": kernel.name, "class": kernel.kernel_class, "samples": samples,
        "rounds": rounds, "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
        "max_ratio": max(ratios), "median_alone_spread": statistics.median(spread),
    })  # fmt: skip
    print((DATA / "overlap.json").read_text())


def section() -> list[str]:
    """The section of ``tuning.md`` (nothing before the experiment has run)."""
    path = DATA / "overlap.json"
    if not path.exists():
        return []
    o = json.loads(path.read_text())
    return [
        "## A build beside a measurement",
        "",
        f"{o['samples']} sampled schedules of `{o['kernel']}` ({o['class']}), built once "
        f"per round and timed alone, then again while a second warm builder compiles "
        f"other candidates on the host ({o['rounds']} rounds): busy / alone latency "
        f"median {o['median_ratio']:.2f}x (range {o['min_ratio']:.2f}..{o['max_ratio']:.2f}"
        f"x); the same schedule timed alone in different rounds spreads by "
        f"{o['median_alone_spread']:.2f}x (median max/min). transtune therefore tunes with "
        "a synchronous runner (`SyncRunner`): nothing is generated or built while a batch "
        "is timed. Stock MetaSchedule's `LocalRunner` overlaps them.",
        "",
        meta_line(o.get("meta")),
        "",
    ]


if __name__ == "__main__":
    measure()
