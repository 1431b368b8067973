"""Tuning benchmark -> docs/results/tuning.md (+ tuning_curve.png).

1. ``compare``: trials per second of ``transtune`` tuning against stock MetaSchedule
   (``ms.tune_tasks``, which ``tune_relax`` uses, with the stock ``LocalBuilder``) on the same
   ResNet-18 kernels, trial budget, seed, search (evolutionary, XGBoost cost model, gradient
   task scheduler) and runner (``LocalRunner`` with transtune's stated evaluator). Each side
   runs in a fresh process, one after the other, so neither inherits the other's imports;
   then ``remeasure`` times both sides' best schedules again, alternating, in one process.
2. ``resnet18``: ResNet-18 tuned with a stated budget into a library, then untuned / tuned /
   PyTorch / ONNX Runtime latency and the tuning curve.
3. ``report``: writes the Markdown and the plot from the JSON results, with the section of
   ``benchmarks/overlap.py`` (a build beside a measurement).

    python benchmarks/tuning.py compare [--kernels 3] [--trials 64] [--seed 0]
    python benchmarks/tuning.py resnet18 [--per-kernel 64]
    python benchmarks/tuning.py report
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import overlap
from common import file_meta, meta_line, meta_lines, write_result

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "tuning"
SEED = 0
TRIALS_PER_ITER = 32


def pick_kernels(count: int):
    """The ``count`` heaviest ResNet-18 kernels of distinct classes (deterministic)."""
    from transtune.frontend import from_zoo
    from transtune.targets import get_config
    from transtune.tasks import extract_kernels

    kernels = extract_kernels(from_zoo("resnet18").mod, get_config("host").tvm_target())
    picked, classes = [], set()
    for k in sorted(kernels, key=lambda k: (-k.flops * k.weight, k.name)):
        if k.kernel_class not in classes:
            picked.append(k)
            classes.add(k.kernel_class)
    return picked[:count]


def run_side(side: str, count: int, trials: int, seed: int) -> dict:
    """One side of the comparison, in this process."""
    from transtune.library import open_library
    from transtune.measure import EVALUATOR, local_runner
    from transtune.schedules import trace_json
    from transtune.targets import get_config
    from transtune.tuning import tune_kernels
    from transtune.tuning.session import stock_tune

    config = get_config("host")
    target = config.tvm_target()
    kernels = pick_kernels(count)
    best: dict[str, float] = {}
    traces: dict[str, object] = {}  # best schedule per kernel, as trace JSON
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        if side == "stock":
            db = stock_tune(kernels, config, tmp, trials, TRIALS_PER_ITER,
                            local_runner(EVALUATOR), seed=seed)  # fmt: skip
            seconds = time.perf_counter() - start
            measured = len(db.get_all_tuning_records())
            for k in kernels:
                top = db.get_top_k(db.commit_workload(k.mod), 1)
                best[k.name] = float(sum(map(float, top[0].run_secs)) / len(top[0].run_secs))
                traces[k.name] = trace_json(top[0].trace)
        else:
            with open_library(Path(tmp) / "lib.db") as lib:
                result = tune_kernels(
                    kernels, lib, config, "resnet18-subset", trials=trials * len(kernels),
                    per_kernel=trials, num_trials_per_iter=TRIALS_PER_ITER, seed=seed,
                )  # fmt: skip
                seconds = time.perf_counter() - start
                measured = lib.count_records()
                best = {s.kernel.name: s.best_secs for s in result.kernels}
                for state in result.kernels:
                    top = lib.records(state.workload_id, target, 1, ok_only=True)
                    traces[state.kernel.name] = top[0].trace
    return {
        "side": side,
        "seed": seed,
        "kernels": [
            {
                "name": k.name,
                "class": k.kernel_class,
                "weight": k.weight,
                "shapes": k.shape_summary,
                "best_secs": best[k.name],
                "best_trace": traces[k.name],
            }
            for k in kernels
        ],  # fmt: skip
        "trials": measured,
        "seconds": seconds,
        "trials_per_second": measured / seconds,
        "weighted_latency": sum(k.weight * best[k.name] for k in kernels),
    }


def compare(count: int, trials: int, seed: int) -> None:
    for side in ("stock", "transtune"):
        print(f"{side}, seed {seed} ...", flush=True)
        out = DATA / f"compare_{side}_s{seed}.json"
        subprocess.run(
            [sys.executable, __file__, "side", side, "--kernels", str(count), "--trials",
             str(trials), "--seed", str(seed), "--out", str(out)],
            check=True,
        )  # fmt: skip
        result = json.loads(out.read_text())
        print(f"  {result['trials']} trials in {result['seconds']:.0f} s")
    subprocess.run([sys.executable, __file__, "remeasure", "--seed", str(seed)], check=True)


def remeasure(seed: int, rounds: int = 5) -> None:
    """Both sides' best schedule of every kernel, rebuilt and timed again in this one process,
    alternating sides, nothing else running: schedule quality without tuning-time noise."""
    from transtune.measure import EVALUATOR, local_runner, measure_modules, warm_builder
    from transtune.schedules import design_spaces, replay
    from transtune.targets import get_config

    target = get_config("host").tvm_target()
    runs = {side: json.loads((DATA / f"compare_{side}_s{seed}.json").read_text())
            for side in ("stock", "transtune")}  # fmt: skip
    out: dict[str, dict[str, list[float]]] = {side: {} for side in runs}
    runner = local_runner(EVALUATOR)
    with warm_builder() as builder:
        for k in pick_kernels(len(runs["stock"]["kernels"])):
            postprocs = design_spaces(k.mod, target)[1]
            mods = {}
            for side, r in runs.items():
                trace = next(x["best_trace"] for x in r["kernels"] if x["name"] == k.name)
                mods[side] = replay(trace, k.mod, postprocs).schedule.mod
            for _ in range(rounds):
                for side, mod in mods.items():
                    (m,) = measure_modules([mod], target, builder, runner)
                    out[side].setdefault(k.name, []).append(m.seconds)
    write_result(DATA / f"remeasure_s{seed}.json", out)


def tune_resnet18(per_kernel: int) -> None:
    from transtune.benchmark import benchmark
    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.targets import get_config
    from transtune.tasks import extract_kernels
    from transtune.tuning import tune_kernels

    config = get_config("host")
    model = from_zoo("resnet18")
    kernels = extract_kernels(model.mod, config)
    n_kernels = len(kernels)
    with open_library(ROOT / "runs" / "resnet18.db") as lib:
        result = tune_kernels(
            kernels, lib, config, "resnet18", trials=per_kernel * n_kernels,
            per_kernel=per_kernel, num_trials_per_iter=TRIALS_PER_ITER, seed=SEED,
        )  # fmt: skip
        untuned = benchmark(model, config, repeat=3)
        tuned = benchmark(model, config, LibraryDatabase(lib, config), repeat=10)
        data = {
            "model": "resnet18",
            "config": config.name,
            "per_kernel": per_kernel,
            "kernels": n_kernels,
            "trials": lib.count_records(),
            "tuning_seconds": result.curve[-1][1],
            "curve": result.curve,
            "estimated_untuned": result.untuned_latency,
            "estimated_tuned": result.estimated_latency,
            "untuned": untuned.to_json(),
            "tuned": tuned.to_json(),
        }
    write_result(DATA / "resnet18.json", data, config.num_threads)


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "# Tuning: throughput against stock MetaSchedule, and ResNet-18 tuned",
        "",
        "Written by `benchmarks/tuning.py`. Target configuration `host`, measured alone on the "
        "host; each section states the machine, commit and versions its results were measured "
        "with. Evaluator for every candidate: MetaSchedule's defaults (1 warm-up, mean of 3 "
        "runs stretched to >= 100 ms, no cache flush), `LocalRunner`.",
        "",
    ]
    seeds = sorted(
        int(p.stem.rsplit("_s", 1)[1])
        for p in DATA.glob("compare_stock_s*.json")
        if (DATA / f"compare_transtune_s{p.stem.rsplit('_s', 1)[1]}.json").exists()
    )
    if seeds:
        runs = {
            (side, seed): json.loads((DATA / f"compare_{side}_s{seed}.json").read_text())
            for side in ("stock", "transtune")
            for seed in seeds
        }
        first = runs["stock", seeds[0]]
        lines += [
            "## Throughput on the same kernels, budget and seed",
            "",
            f"{len(first['kernels'])} ResNet-18 kernels (the heaviest of distinct classes), "
            f"{first['trials'] // len(first['kernels'])} trials each, "
            f"{TRIALS_PER_ITER} candidates per round, seeds {seeds}, evolutionary search with "
            "the XGBoost cost model and the gradient task scheduler on both sides. Stock = "
            "`ms.tune_tasks` (what `tune_relax` runs) with its default `LocalBuilder`; "
            "transtune = `tune_kernels` (warm builder, CPU-only tensor intrinsics, shared-library "
            "artifacts, synchronous runner; it also measures every kernel untuned first, which "
            "counts in its time). "
            "Each run is a fresh process; wall time covers everything from the first "
            "`TuneContext` to the last record.",
            "",
            *meta_lines({f"{side} s{seed}": r.get("meta") for (side, seed), r in runs.items()}),
            "",
            "| side | seed | trials | wall s | trials/s | weighted best latency ms |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for seed in seeds:
            for side in ("stock", "transtune"):
                r = runs[side, seed]
                lines.append(
                    f"| {side} | {seed} | {r['trials']} | {r['seconds']:.0f} | "
                    f"{r['trials_per_second']:.2f} | {1e3 * r['weighted_latency']:.3f} |"
                )
        ratios = [
            runs["transtune", s]["trials_per_second"] / runs["stock", s]["trials_per_second"]
            for s in seeds
        ]
        lat = [
            runs["transtune", s]["weighted_latency"] / runs["stock", s]["weighted_latency"]
            for s in seeds
        ]
        lines += [
            "",
            f"Throughput ratio transtune / stock: {', '.join(f'{x:.2f}x' for x in ratios)} "
            f"(seed by seed); weighted best latency transtune / stock: "
            f"{', '.join(f'{x:.2f}' for x in lat)}. Best latency per kernel, ms:",
            "",
            "| kernel | class | shapes | "
            + " | ".join(f"stock s{s} | transtune s{s}" for s in seeds)
            + " |",
            "|---|---|---|" + "---:|---:|" * len(seeds),
        ]
        for i, k in enumerate(first["kernels"]):
            cells = " | ".join(
                f"{1e3 * runs['stock', s]['kernels'][i]['best_secs']:.3f} | "
                f"{1e3 * runs['transtune', s]['kernels'][i]['best_secs']:.3f}"
                for s in seeds
            )
            lines.append(f"| {k['name']} | {k['class']} | {k['shapes']} | {cells} |")
        lines.append("")
    remeasured = {s: DATA / f"remeasure_s{s}.json" for s in seeds}
    if seeds and all(p.exists() for p in remeasured.values()):
        lines += [
            "Best schedules timed again: each side's best schedule per kernel, rebuilt and "
            "timed 5 times alternating sides in one process with nothing else running "
            "(median ms; weighted = sum of weight x median).",
            "",
            *meta_lines(
                {f"seed {s}": json.loads(p.read_text()).get("meta") for s, p in remeasured.items()}
            ),
            "",
            "| seed | kernel | stock | transtune | transtune / stock |",
            "|---:|---|---:|---:|---:|",
        ]
        for seed, path in remeasured.items():
            rm = json.loads(path.read_text())
            total = {"stock": 0.0, "transtune": 0.0}
            for k in runs["stock", seed]["kernels"]:
                med = {side: statistics.median(rm[side][k["name"]]) for side in total}
                for side in total:
                    total[side] += k["weight"] * med[side]
                lines.append(
                    f"| {seed} | {k['name']} | {1e3 * med['stock']:.3f} | "
                    f"{1e3 * med['transtune']:.3f} | {med['transtune'] / med['stock']:.2f} |"
                )
            lines.append(
                f"| {seed} | weighted | {1e3 * total['stock']:.3f} | "
                f"{1e3 * total['transtune']:.3f} | {total['transtune'] / total['stock']:.2f} |"
            )
        lines.append("")
    lines += overlap.section()
    r18_path = DATA / "resnet18.json"
    if r18_path.exists():
        r = json.loads(r18_path.read_text())
        r18_meta, threads = file_meta(r), r["tuned"].get("num_threads", "?")
        t_un = {t["runtime"]: t for t in r["untuned"]["timings"]}
        t_tu = {t["runtime"]: t for t in r["tuned"]["timings"]}

        def cell(t):
            return f"{t['median_ms']:.2f} ({t['min_ms']:.2f}..{t['max_ms']:.2f})"

        lines += [
            "## ResNet-18 tuned",
            "",
            f"Budget: {r['per_kernel']} trials per kernel, {r['kernels']} kernels, "
            f"{r['trials']} measured candidates in {r['tuning_seconds'] / 60:.1f} min. "
            f"Latency at batch 1, median (min..max) of repeats, {threads} threads everywhere. "
            + meta_line(r18_meta),
            "",
            "| | ms |",
            "|---|---:|",
            f"| TVM untuned (default build, no schedules) | {cell(t_un['tvm-untuned'])} |",
            f"| TVM tuned (schedules from the library) | {cell(t_tu['tvm-tuned'])} |",
            f"| PyTorch eager | {cell(t_tu['pytorch'])} |",
            f"| ONNX Runtime | {cell(t_tu['onnxruntime'])} |",
            "",
            f"Tuned numerics match PyTorch: {t_tu['tvm-tuned']['matches']} "
            f"(max rel. err {t_tu['tvm-tuned']['max_rel_err']:.1e}); kernels without a record: "
            f"{len(r['tuned']['missing_records'])}. The curve's estimate (sum of weight x best "
            f"kernel latency) went from {1e3 * r['estimated_untuned']:.1f} ms to "
            f"{1e3 * r['estimated_tuned']:.2f} ms.",
            "",
            "Curve points are recorded as each batch is measured (the synchronous runner tells "
            "the tuner at once; earlier versions recorded them when MetaSchedule's gradient "
            "scheduler joined a batch, which for its first round over all kernels came only "
            "after the round, a flat start).",
            "",
            "![tuning curve](tuning_curve.png)",
            "",
        ]
        curve = r["curve"]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for ax, x, label in ((ax1, 1, "wall time, s"), (ax2, 0, "measured candidates")):
            ax.plot([p[x] for p in curve], [1e3 * p[2] for p in curve], drawstyle="steps-post")
            ax.set_yscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("estimated latency, ms (log)")
            ax.axhline(t_tu["pytorch"]["median_ms"], color="gray", ls="--", label="PyTorch")
            ax.legend()
        cpu = (r18_meta or {}).get("cpu") or "an unrecorded CPU"
        fig.suptitle(f"ResNet-18 tuning curve on {cpu}, {threads} threads")
        fig.tight_layout()
        fig.savefig(OUT / "tuning_curve.png", dpi=110)
    (OUT / "tuning.md").write_text("\n".join(lines))
    print(f"wrote {OUT / 'tuning.md'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["compare", "side", "remeasure", "resnet18", "report"])
    parser.add_argument("side", nargs="?", choices=["stock", "transtune"])
    parser.add_argument("--kernels", type=int, default=3)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--per-kernel", type=int, default=64)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out")
    args = parser.parse_args()
    DATA.mkdir(parents=True, exist_ok=True)
    if args.what == "side":
        result = run_side(args.side, args.kernels, args.trials, args.seed)
        write_result(args.out, result)
    elif args.what == "remeasure":
        remeasure(args.seed)
    elif args.what == "compare":
        compare(args.kernels, args.trials, args.seed)
        report()
    elif args.what == "resnet18":
        tune_resnet18(args.per_kernel)
        report()
    else:
        report()


if __name__ == "__main__":
    main()
