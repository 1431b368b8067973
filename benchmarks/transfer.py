"""Transfer-tuning benchmark -> docs/results/transfer.md (+ plots), the paper's experiment.

1. ``tune``: each model fully tuned from scratch with MetaSchedule (``transtune tune``: at
   least 64 trials per kernel and at least 1,000 per model) into its own library,
   ``runs/transfer/full/MODEL.db``; the tuning curve is recorded there. Resumable.
2. ``transfer``: each model held out in turn. Its donor library holds the best few records
   per workload of every *other* model's full library (as the shipped library does); the
   held-out model is transfer-tuned from it with every donor policy's candidates measured
   in one pass, then compiled with the default policy's winners and timed end to end against
   untuned, fully tuned (its own full library), PyTorch and ONNX Runtime.
3. ``report``: Markdown and plots from the JSON results in ``docs/results/transfer/``.

Every step runs each model in a fresh process, one at a time: measure alone.

    python benchmarks/transfer.py tune [MODEL ...]
    python benchmarks/transfer.py transfer [MODEL ...]
    python benchmarks/transfer.py report
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "transfer"
RUNS = ROOT / "runs" / "transfer"
FULL = RUNS / "full"
MODELS = ["resnet18", "alexnet", "bert_tiny", "bert_medium", "resnet50", "mobilenet_v2"]
MIN_PER_KERNEL = 64
MIN_PER_MODEL = 1000
SEED = 0
TRANSTUNE = [sys.executable, "-m", "transtune.cli"]


def full_budget(kernels: int) -> tuple[int, int]:
    """(per-kernel cap, model total) of a full tuning of a model with ``kernels`` kernels."""
    per_kernel = max(MIN_PER_KERNEL, math.ceil(MIN_PER_MODEL / kernels))
    return per_kernel, per_kernel * kernels


def kernel_count(model: str) -> int:
    from transtune.frontend import from_zoo
    from transtune.targets import get_config
    from transtune.tasks import extract_kernels

    return len(extract_kernels(from_zoo(model).mod, get_config("host").tvm_target()))


def tune(models: list[str]) -> None:
    FULL.mkdir(parents=True, exist_ok=True)
    for model in models:
        per_kernel, total = full_budget(kernel_count(model))
        print(f"== tune {model}: {per_kernel} per kernel, {total} in all", flush=True)
        subprocess.run(
            [*TRANSTUNE, "tune", model, "--library", str(FULL / f"{model}.db"),
             "--per-kernel", str(per_kernel), "--trials", str(total), "--seed", str(SEED)],
            check=True,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["tune"])
    parser.add_argument("models", nargs="*", default=MODELS)
    args = parser.parse_args()
    {"tune": tune}[args.step](args.models)


if __name__ == "__main__":
    main()
