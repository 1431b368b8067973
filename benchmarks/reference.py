"""Converged reference tunings: one resumable queue serving the transfer experiment (its
full-tuning reference), the ceiling page and the shipped library (the transfer issue, item 3).

    python benchmarks/reference.py run [--minutes M] [MODEL ...]   # resumable; run it alone
    python benchmarks/reference.py status

Every model tunes in a fresh process into its own library,
``data/library/reference/<hardware id>/MODEL.db``, with the synchronous runner and seed 0:
the models of REFERENCE until every kernel converges (``transtune tune --until-converged``:
at least 256 measured candidates, the last quarter improving its best by under 2%; at most
MAX_PER_KERNEL), the rest of the zoo (COVERAGE) with COVERAGE_PER_KERNEL candidates per
kernel, so that the library ends with every kernel class of the zoo. After each session the
library is compacted to its best TOP_K records per kernel; the model's curve and every
kernel's (trials, best) curve stay, so the next session (on any checkout) resumes with the
counts. A model is finished once a session ends without reaching its time limit; that is
kept in the library (meta ``reference:finished``). Commit the folder as it grows.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ["resnet18", "mobilenet_v2", "resnext50_32x4d", "efficientnet_b0", "resnet50",
             "bert_base"]  # fmt: skip
COVERAGE = [
    "bert_tiny", "alexnet", "googlenet", "mobilenet_v3_large", "mnasnet1_0", "densenet121",
    "bert_medium", "mobilebert", "inception_v3", "efficientnet_b4", "vgg16", "wide_resnet50_2",
]  # fmt: skip
MAX_PER_KERNEL = 1024
COVERAGE_PER_KERNEL = 64
TOP_K = 3
SEED = 0
FINISHED = "reference:finished"


def folder() -> Path:
    """Where this host's reference libraries live (named by its hardware id)."""
    from transtune.targets import get_config

    return ROOT / "data" / "library" / "reference" / get_config("host").name


def finished(path: Path) -> str | None:
    """How the model's tuning finished ("budget", "converged", "done"), or None."""
    from transtune.library import open_library

    if not path.is_file():
        return None
    with open_library(path, read_only=True) as lib:
        return lib.get_meta(FINISHED)


def one(model_name: str, seconds: float) -> None:
    """One session of ``model_name``'s tuning (at most ``seconds``), then compaction."""
    from transtune.library import open_library
    from transtune.tuning import Convergence
    from transtune.workflow import Workflow

    path = folder() / f"{model_name}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    converge = model_name in REFERENCE
    with open_library(path) as lib:
        try:
            with Workflow(model_name, lib) as wf:
                count = len(wf.kernels)
                per_kernel = MAX_PER_KERNEL if converge else COVERAGE_PER_KERNEL
                last = [0.0]

                def update(tuner) -> None:
                    if time.time() - last[0] > 60:  # a line a minute
                        last[0] = time.time()
                        done = sum(tuner.converged(s) for s in tuner.states)
                        print(f"  {tuner.new_trials} trials, est. {1e3 * tuner.curve[-1][2]:.2f}"
                              f" ms, {done}/{count} converged", flush=True)  # fmt: skip

                result = wf.tune(
                    trials=None if converge else per_kernel * count, per_kernel=per_kernel,
                    time_budget=seconds, seed=SEED, on_update=update,
                    until=Convergence() if converge else None,
                )  # fmt: skip
            print(f"  {model_name}: {result.stopped} after {result.new_trials} new trials, "
                  f"est. {1e3 * result.estimated_latency:.2f} ms", flush=True)  # fmt: skip
            if result.stopped not in ("time", "interrupted"):
                lib.set_meta(FINISHED, result.stopped)
        finally:
            deleted = lib.compact(TOP_K)
    print(f"  compacted: {deleted} records deleted, {path.stat().st_size / 2**20:.1f} MiB")


def run(models: list[str], minutes: float) -> None:
    """Work through ``models`` in order until ``minutes`` have passed."""
    deadline = time.time() + 60 * minutes
    for model in models:
        left = deadline - time.time()
        if left < 120:
            return
        if finished(folder() / f"{model}.db"):
            continue
        print(f"== {model} ({left / 60:.0f} min left)", flush=True)
        # The tuning's clock starts after extraction and the untuned runs: leave them time.
        child = subprocess.Popen([sys.executable, __file__, "one", model, "--seconds",
                                  str(left - 90)])  # fmt: skip
        try:
            child.wait()
        except KeyboardInterrupt:  # the child has it too: it stops after its batch, compacts
            child.wait()
            return


def status() -> None:
    """Per model: kernels, converged, trials, estimated latency, tuning seconds."""
    from transtune.library import open_library
    from transtune.tuning import Convergence

    rule = Convergence()
    print("| model | kernels | converged | trials | est. ms | seconds | finished |")
    print("|---|---|---|---|---|---|---|")
    for model in REFERENCE + COVERAGE:
        path = folder() / f"{model}.db"
        if not path.is_file():
            continue
        with open_library(path, read_only=True) as lib:
            runs = lib.query("SELECT run_id FROM runs WHERE kind = 'tune'")
            if not runs:
                continue
            curves = lib.kernel_curves(runs[0][0])
            curve = lib.curve(runs[0][0])
            kernels = len(lib.query("SELECT 1 FROM workload_models WHERE model = ?", (model,)))
            done = sum(rule.reached(c) for c in curves.values())
            trials, seconds, latency = curve[-1] if curve else (0, 0.0, float("nan"))
            print(f"| {model} | {kernels} | {done} | {trials} | {1e3 * latency:.2f} | "
                  f"{seconds:.0f} | {lib.get_meta(FINISHED) or 'no'} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["run", "one", "status"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=3600.0)
    args = parser.parse_args()
    if args.step == "run":
        run(args.models or REFERENCE + COVERAGE, args.minutes)
    elif args.step == "one":
        one(args.models[0], args.seconds)
    else:
        status()


if __name__ == "__main__":
    main()
