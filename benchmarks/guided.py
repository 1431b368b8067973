"""Guided search benchmark -> docs/results/guided.md (+ guided.png).

On zoo models held out of the cost model's training data, three tuning runs per model from
the same start (an empty library for the model), one after the other, each in a fresh
process with the same time budget, alone on the host:

- ``stock``: MetaSchedule's evolutionary search with its XGBoost cost model from scratch;
- ``guided``: the same search scored by the pre-trained cost model (``LearnedCostModel``,
  updated online from the new measurements);
- ``transfer+guided``: transfer-tuning from the shipped schedule library (which holds none of
  these models' own schedules), then the guided search seeded with the transferred
  schedules, for what is left of the budget.

The time each needs to reach the stock run's final estimated latency is read off the curves
(estimated latency = sum over kernels of weight x best measured latency).

    python benchmarks/guided.py train [--epochs 15]     # checkpoint without the held-out nets
    python benchmarks/guided.py run [--models m1,m2] [--budget 600]
    python benchmarks/guided.py report
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "guided"
DATASET = ROOT / "data" / "dataset"
CHECKPOINT = ROOT / "data" / "costmodel" / "attention-by-model.json"
LIBRARY = ROOT / "data" / "library" / "zoo-host.db"
# Held out of the cost model's training data (TenSet's held-out networks) and not among the
# models whose tuned schedules the library holds.
MODELS = ("mobilenet_v2", "resnext50_32x4d", "bert_base")
ARMS = ("stock", "guided", "transfer+guided")
# Candidates measured per search round. Stock keeps MetaSchedule's default, which its XGBoost
# trained from scratch needs to learn from; a pre-trained model's top 16 are worth measuring,
# so the guided arms spread the same time over more rounds (and more kernels early on).
PER_ITER = {"stock": 64, "guided": 16, "transfer+guided": 16}


def train(epochs: int) -> None:
    from transtune.dataset.splits import TENSET_HELD_OUT

    CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "transtune.cli", "costmodel", "train", str(DATASET),
         str(CHECKPOINT), "--model", "attention", "--epochs", str(epochs), "--split", "by-model",
         "--hold-out", ",".join(TENSET_HELD_OUT)],
        check=True,
    )  # fmt: skip


def arm(model_name: str, which: str, budget: float, out: Path) -> None:
    """One tuning run, in this process."""
    from transtune.costmodel.metaschedule import LearnedCostModel
    from transtune.frontend import from_zoo
    from transtune.hardware import describe
    from transtune.library import open_library
    from transtune.targets import get_config
    from transtune.tasks import extract_kernels
    from transtune.transfer import transfer_tune
    from transtune.tuning import tune

    config = get_config("host")
    model = from_zoo(model_name)
    kernels = extract_kernels(model.mod, config.tvm_target())
    cost_model = "xgb"
    if which != "stock":
        classes = {k.workload_hash: k.kernel_class for k in kernels}
        cost_model = LearnedCostModel(str(CHECKPOINT), describe(config).vector(), classes)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lib.db"
        offset, start_points = 0.0, []
        if which == "transfer+guided":
            shutil.copy(LIBRARY, path)
            with open_library(path) as lib:
                donors = lib.info()["models"]
                if model_name in donors:
                    raise SystemExit(f"{LIBRARY} holds {model_name}'s own tuned schedules")
                started = time.perf_counter()
                result = transfer_tune(model, lib, config, donors=donors)
                offset = time.perf_counter() - started
                start_points = [(0, 0.0, result.untuned_latency),
                                (0, offset, result.estimated_latency)]  # fmt: skip
        with open_library(path) as lib:
            tuned = tune(model, lib, config, time_budget=budget - offset, cost_model=cost_model,
                         num_trials_per_iter=PER_ITER[which])  # fmt: skip
    curve = start_points + [(t, offset + s, lat) for t, s, lat in tuned.curve]
    out.write_text(json.dumps({"model": model_name, "arm": which, "budget": budget,
                               "transfer_seconds": offset, "curve": curve}))  # fmt: skip


def run(models: list[str], budget: float) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for model in models:
        for which in ARMS:
            out = DATA / f"{model}_{which}.json"
            if out.exists():  # resumable: delete an arm's file to run it again
                print(f"{model}: {which} done before ({out})", flush=True)
                continue
            print(f"{model}: {which} ...", flush=True)
            subprocess.run(
                [sys.executable, __file__, "arm", model, which, "--budget", str(budget),
                 "--out", str(out)],
                check=True,
            )  # fmt: skip


def time_to_reach(curve: list, latency: float) -> float | None:
    return next((s for _, s, lat in curve if lat <= latency), None)


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transtune.targets import host_info

    runs = {}
    for path in sorted(DATA.glob("*.json")):
        r = json.loads(path.read_text())
        runs.setdefault(r["model"], {})[r["arm"]] = r
    models = [m for m, arms in runs.items() if set(ARMS) <= set(arms)]
    host = host_info()
    lines = [
        "# Tuning guided by the pre-trained cost model",
        "",
        f"Written by `benchmarks/guided.py`. Host: {host.cpu_model}, {host.cores} cores, "
        "configuration `host`. Cost model: `data/costmodel/attention-by-model.json`, trained on "
        "`data/dataset` without the kernels of TenSet's held-out networks (so none of these "
        "models' kernels). Donor library for transfer: `data/library/zoo-host.db` (six other "
        "models' tuned schedules). Every run alone on the host, in a fresh process, from an "
        "empty library for the model; the transfer step counts in the time. Candidates per "
        "search round: " + ", ".join(f"{a} {n}" for a, n in PER_ITER.items()) + " (stock: "
        "MetaSchedule's default, which its XGBoost from scratch learns from).",
        "",
        "| model | budget s | stock rounds | stock final ms | guided: time to reach "
        "| transfer+guided: time to reach | guided final ms | transfer+guided final ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fractions = {"guided": [], "transfer+guided": []}
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5 * max(1, len(models)), 3.8))
    axes = axes if len(models) > 1 else [axes]
    for ax, model in zip(axes, models, strict=False):
        arms = runs[model]
        stock = arms["stock"]
        final = stock["curve"][-1][2]
        stock_time = time_to_reach(stock["curve"], final)
        cells = []
        for which in ("guided", "transfer+guided"):
            t = time_to_reach(arms[which]["curve"], final)
            if t is None:
                cells.append("not reached")
            else:
                fractions[which].append(t / stock_time)
                cells.append(f"{t:.0f} s ({t / stock_time:.0%})")
        lines.append(
            f"| {model} | {stock['budget']:.0f} | {len(stock['curve']) - 1} "
            f"| {1e3 * final:.2f} | {cells[0]} | {cells[1]} "
            f"| {1e3 * arms['guided']['curve'][-1][2]:.2f} "
            f"| {1e3 * arms['transfer+guided']['curve'][-1][2]:.2f} |"
        )
        for which in ARMS:
            c = arms[which]["curve"]
            ax.plot([p[1] for p in c], [1e3 * p[2] for p in c], drawstyle="steps-post",
                    label=which)  # fmt: skip
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_xlabel("tuning time, s")
        ax.set_ylabel("estimated latency, ms (log)")
        ax.legend(fontsize=8)
    mean = {w: sum(v) / len(v) for w, v in fractions.items() if v}
    lines += [
        "",
        "Time to reach is the first point of a curve at or below the stock run's final "
        "estimate, as a share of the time the stock run took to get there. Mean share: "
        + ", ".join(f"{w} {m:.0%}" for w, m in mean.items())
        + " (over the models where it was reached). Stock rounds: batches of 64 candidates "
        "the stock run measured; MetaSchedule's gradient scheduler gives every kernel one batch "
        "before it favours any, so with fewer rounds than kernels the stock run never saw some "
        "kernels and the budget, not the search, decides its final latency.",
        "",
        "![curves](guided.png)",
        "",
    ]
    fig.tight_layout()
    fig.savefig(OUT / "guided.png", dpi=110)
    (OUT / "guided.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["train", "run", "arm", "report"])
    parser.add_argument("model", nargs="?")
    parser.add_argument("which", nargs="?", choices=ARMS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--epochs", type=int, default=15, help="train: epochs (as costmodel.py)")
    args = parser.parse_args()
    if args.step == "train":
        train(args.epochs)
    elif args.step == "arm":
        arm(args.model, args.which, args.budget, args.out)
    elif args.step == "run":
        run(args.models.split(","), args.budget)
        report()
    else:
        report()


if __name__ == "__main__":
    main()
