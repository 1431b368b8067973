"""Guided search benchmark -> docs/results/guided.md (+ guided.png).

On zoo models held out of the cost model's training data, three tuning runs per model from
the same start (an empty library for the model), one after the other, each in a fresh
process with the same time budget, alone on the host:

- ``stock``: MetaSchedule's evolutionary search with its XGBoost cost model from scratch;
- ``guided``: the same search scored by the pre-trained cost model (``LearnedCostModel``,
  updated online from the new measurements), with ``GUIDED_SEARCH``'s smaller population;
- ``transfer+guided``: transfer-tuning from the shipped schedule library (which holds none of
  these models' own schedules), measuring only the two donor schedules per kernel the cost
  model scores best, then the guided search seeded with the transferred schedules, for what
  is left of the budget.

Every arm's clock starts after kernel extraction, the builder's start and the untuned
measurement (``tune`` starts its curve there; the transfer step's own are subtracted).

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
from pathlib import Path

from common import meta_lines, write_result

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
ABLATIONS = ("stock@16",)  # stock with the guided arms' round size (run with --arms)
# Candidates measured per search round. Stock keeps MetaSchedule's default, which its XGBoost
# trained from scratch needs to learn from; a pre-trained model's top 16 are worth measuring,
# so the guided arms spread the same time over more rounds (and more kernels early on).
PER_ITER = {"stock": 64, "guided": 16, "transfer+guided": 16, "stock@16": 16}
TRANSFER_MEASURE_TOP = 2  # donor schedules measured per kernel, of the 8 replayed


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
    from transtune.tuning import GUIDED_SEARCH, tune

    config = get_config("host")
    model = from_zoo(model_name)
    kernels = extract_kernels(model.mod, config)
    cost_model, search = "xgb", None
    if not which.startswith("stock"):
        search = GUIDED_SEARCH
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
                result = transfer_tune(model, lib, config, donors=donors, cost_model=cost_model,
                                       measure_top=TRANSFER_MEASURE_TOP)  # fmt: skip
                offset = result.search_seconds - result.setup_seconds
                start_points = [(0, 0.0, result.untuned_latency),
                                (0, offset, result.estimated_latency)]  # fmt: skip
        with open_library(path) as lib:
            tuned = tune(model, lib, config, time_budget=budget - offset, cost_model=cost_model,
                         num_trials_per_iter=PER_ITER[which], search=search)  # fmt: skip
    curve = start_points + [(t, offset + s, lat) for t, s, lat in tuned.curve]
    write_result(out, {"model": model_name, "arm": which, "budget": budget,
                       "transfer_seconds": offset, "curve": curve}, config.num_threads)  # fmt: skip


def run(models: list[str], budget: float, arms: list[str]) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for model in models:
        for which in arms:
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

    from transtune.tuning import GUIDED_SEARCH

    runs = {}
    for path in sorted(DATA.glob("*.json")):
        r = json.loads(path.read_text())
        runs.setdefault(r["model"], {})[r["arm"]] = r
    models = [m for m, arms in runs.items() if set(ARMS) <= set(arms)]
    metas = {f"{m} {a}": r.get("meta") for m in models for a, r in runs[m].items()}
    lines = [
        "# Tuning guided by the pre-trained cost model",
        "",
        "Written by `benchmarks/guided.py`. Configuration `host`. Cost model: "
        "`data/costmodel/attention-by-model.json`, trained on "
        "`data/dataset` without the kernels of TenSet's held-out networks (so none of these "
        "models' kernels). Donor library for transfer: `data/library/zoo-host.db` (six other "
        "models' tuned schedules). Every run alone on the host, in a fresh process, from an "
        "empty library for the model. Every clock starts after kernel extraction and the "
        "untuned measurement; the transfer step counts in the time (its replay, builds, "
        "numerics checks and measurements). Candidates per search round: "
        + ", ".join(f"{a} {n}" for a, n in PER_ITER.items())
        + " (stock: MetaSchedule's default, which its XGBoost from scratch learns from). "
        f"Evolutionary search population: stock arms 512 (MetaSchedule's default), guided arms "
        f"{GUIDED_SEARCH['population_size']} (`transtune.tuning.GUIDED_SEARCH`). Transfer "
        f"measures the {TRANSFER_MEASURE_TOP} donor schedules per kernel the cost model "
        "scores best, of up to 8 replayed.",
        "",
        *meta_lines(metas),
        "",
    ]
    compared = ["guided", "transfer+guided"]
    compared += [a for a in ABLATIONS if any(a in runs[m] for m in models)]
    shown = ["stock", *compared]
    lines += [
        "| model | budget s | stock rounds | stock final ms | "
        + " | ".join(f"{a}: time to reach" for a in compared)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(compared),
    ]
    finals = ["| model | " + " | ".join(f"{a} final ms" for a in shown) + " |",
              "|---|" + "---:|" * len(shown)]  # fmt: skip
    fractions: dict[str, list[float]] = {a: [] for a in compared}
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5 * max(1, len(models)), 3.8))
    axes = axes if len(models) > 1 else [axes]
    for ax, model in zip(axes, models, strict=False):
        arms = runs[model]
        stock = arms["stock"]
        final = stock["curve"][-1][2]
        stock_time = time_to_reach(stock["curve"], final)
        cells = []
        for which in compared:
            t = time_to_reach(arms[which]["curve"], final) if which in arms else None
            if which not in arms:
                cells.append("not run")
            elif t is None:
                cells.append("not reached")
            else:
                fractions[which].append(t / stock_time)
                cells.append(f"{t:.0f} s ({t / stock_time:.0%})")
        lines.append(
            f"| {model} | {stock['budget']:.0f} | {len(stock['curve']) - 1} "
            f"| {1e3 * final:.2f} | " + " | ".join(cells) + " |"
        )
        finals.append(f"| {model} | " + " | ".join(
            f"{1e3 * arms[a]['curve'][-1][2]:.2f}" if a in arms else "not run" for a in shown
        ) + " |")  # fmt: skip
        for which in shown:
            if which not in arms:
                continue
            c = arms[which]["curve"]
            ax.plot([p[1] for p in c], [1e3 * p[2] for p in c], drawstyle="steps-post",
                    label=which)  # fmt: skip
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_xlabel("tuning time, s")
        ax.set_ylabel("estimated latency, ms (log)")
        ax.legend(fontsize=8)
    lines += ["", *finals]
    mean = {w: sum(v) / len(v) for w, v in fractions.items() if v}
    lines += [
        "",
        "Time to reach is the first point of a curve at or below the stock run's final "
        "estimate, as a share of the time the stock run took to get there. Mean share: "
        + ", ".join(f"{w} {m:.0%}" for w, m in mean.items())
        + " (over the models where it was reached). Stock rounds: batches of 64 candidates "
        "the stock run measured. MetaSchedule's gradient scheduler gives every kernel one batch "
        "before it favours any; `tune` hands it the kernels largest share of the estimated "
        "latency first (in every arm), so with fewer rounds than kernels the ones a run never "
        "reached are the smallest. `stock@16` is an ablation: stock MetaSchedule with the "
        "guided arms' round size, to tell what the smaller rounds give from what the "
        "pre-trained model gives.",
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
    parser.add_argument("which", nargs="?", choices=ARMS + ABLATIONS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--arms", default=",".join(ARMS), help=f"also: {', '.join(ABLATIONS)}")
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--epochs", type=int, default=15, help="train: epochs (as costmodel.py)")
    args = parser.parse_args()
    if args.step == "train":
        train(args.epochs)
    elif args.step == "arm":
        arm(args.model, args.which, args.budget, args.out)
    elif args.step == "run":
        run(args.models.split(","), args.budget, args.arms.split(","))
        report()
    else:
        report()


if __name__ == "__main__":
    main()
