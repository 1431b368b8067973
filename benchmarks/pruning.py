"""Pruning benchmark -> docs/results/pruning.md (+ pruning.png).

For each pruning strategy and kept fraction: select programs among the *training* kernels of
the by-model split (the held-out networks' kernels are never pruned: they are the test),
train a cost model on the records of the kept programs (every configuration), and score it
on the held-out networks' kernels. The full training set is the reference. Everything runs
in this one process, on the same split and seed, with training time.

    python benchmarks/pruning.py [--model xgb|mlp|attention] [--epochs 20]

Resumable: finished steps are kept in ``docs/results/pruning/steps_MODEL.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import meta_line, write_result
from resume import Steps, snapshot

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATASET = ROOT / "data" / "dataset"
STRATEGIES = ("subsample", "dedup", "kernels", "diversity", "uncertainty", "dedup+diversity")
KEEP = (0.05, 0.10, 0.15, 0.25, 0.50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="xgb", choices=["xgb", "mlp", "attention"])
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    from transtune.costmodel import create, load_cost_data
    from transtune.dataset import splits
    from transtune.dataset.prune import load_programs, select

    path = OUT / "pruning" / f"steps_{args.model}.json"
    pinned = snapshot(path)
    data = load_cost_data(DATASET, collected_before=pinned)
    programs = load_programs(DATASET)
    held = [m for m in splits.TENSET_HELD_OUT if any(m in ms for ms in data.models.values())]
    train, test = splits.make("by-model", data, held)
    train_kernels = set(data.workload[train])
    pool = np.flatnonzero(np.isin(programs.workload, list(train_kernels)))
    candidates = programs.take(pool)
    key = np.asarray([f"{w}:{s}" for w, s in zip(data.workload, data.sample, strict=True)])

    def factory():
        return create(args.model, epochs=args.epochs)

    def run(rows: np.ndarray) -> dict:
        model = factory()
        start = time.perf_counter()
        model.fit(data, rows)
        seconds = time.perf_counter() - start
        return {"records": len(rows), "train_seconds": seconds, **model.score(data, test)}

    steps = Steps(path, {"snapshot": pinned, "records": len(data), "epochs": args.epochs})
    reference = {"programs": len(candidates), **steps.run("all data", lambda: run(train))}
    rows = []
    for strategy in STRATEGIES:
        for keep in KEEP:

            def pruned(strategy=strategy, keep=keep) -> dict:
                mask = select(candidates, strategy, keep, seed=0)
                pairs = zip(candidates.workload[mask], candidates.sample[mask], strict=True)
                kept = {f"{w}:{s}" for w, s in pairs}
                return {"programs": int(mask.sum()),
                        **run(train[np.isin(key[train], list(kept))])}  # fmt: skip

            row = steps.run(f"{strategy} {keep:.0%}", pruned)
            rows.append({"strategy": strategy, "keep": keep, **row})
    from transtune.dataset.info import collection_rate

    collected, seconds = collection_rate(DATASET)
    result = {
        "model": args.model, "held_out": held, "reference": reference, "rows": rows,
        "kernels": len(train_kernels),
        "test_records": len(test), "seconds_per_record": seconds / max(1, collected),
    }  # fmt: skip
    report(write_result(OUT / "pruning" / f"result_{args.model}.json", result))


def report(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = result["reference"]
    lines = [
        "# Dataset pruning: how much of the data a cost model needs",
        "",
        f"Written by `benchmarks/pruning.py`. {meta_line(result.get('meta'))} "
        f"Cost model: `{result['model']}`. Split: by model (held out: "
        f"{', '.join(result['held_out'])}; {result['test_records']:,} test records, never "
        "pruned). Each strategy keeps a fraction of the training kernels' programs (a program "
        "= one sampled schedule, measured on every configuration), and the model trains on "
        "their records.",
        "",
        f"Reference (all {ref['programs']:,} training programs, {ref['records']:,} records): "
        f"PCA {ref['pca']:.3f}, peak@1 {ref['peak@1']:.3f}, trained in "
        f"{ref['train_seconds']:.0f} s.",
        "",
        "| strategy | asked | kept | programs | records | PCA | ΔPCA | peak@1 | Δpeak@1 "
        "| train s | measure min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per = result["seconds_per_record"]
    for r in result["rows"]:
        lines.append(
            f"| {r['strategy']} | {r['keep']:.0%} | {r['programs'] / ref['programs']:.1%} "
            f"| {r['programs']:,} | {r['records']:,} "
            f"| {r['pca']:.3f} | {r['pca'] - ref['pca']:+.3f} | {r['peak@1']:.3f} "
            f"| {r['peak@1'] - ref['peak@1']:+.3f} | {r['train_seconds']:.0f} "
            f"| {r['programs'] * per / 60:.0f} |"
        )
    lines += [
        "",
        "Measure min: the time to measure the kept programs on a new configuration, where "
        f"each is built and timed once, at this dataset's collection rate ({per:.2f} s per "
        "record, builds included but shared by two thread counts, so a lone new "
        f"configuration costs somewhat more); all {ref['programs']:,} training programs take "
        f"{ref['programs'] * per / 60:.0f} min. Asked vs kept: the strategies round each "
        "kernel's (or, for `kernels`, each class's) share to whole programs, at least one "
        f"({ref['programs'] / result['kernels']:.0f} programs per training kernel on average).",
    ]  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric in zip(axes, ("pca", "peak@1"), strict=True):
        for strategy in dict.fromkeys(r["strategy"] for r in result["rows"]):
            pts = [(r["programs"] / ref["programs"], r[metric])
                   for r in result["rows"] if r["strategy"] == strategy]  # fmt: skip
            ax.plot([100 * k for k, _ in pts], [v for _, v in pts], "o-", label=strategy)
        ax.axhline(ref[metric], color="gray", ls="--", label="all data")
        ax.set_xlabel("% of training programs kept")
        ax.set_ylabel(f"{metric} (by-model split)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "pruning.png", dpi=120)
    lines += ["", "![pruning curves](pruning.png)", ""]
    (OUT / "pruning.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
