"""Pruning benchmark -> docs/results/pruning.md (+ pruning_MODEL.png) on the deep data.

The deep data (``benchmarks/deep.py``): the deep configuration's records of its deep kernels
(more than PER_KERNEL random samples each, beside the programs its searches visited;
``dataset.deep_data``). For each pruning strategy and kept fraction: select programs among
the *training* kernels of the by-model split (the held-out networks' kernels are never
pruned: they are the test), train a cost model on the records of the kept programs, and
score it on the held-out networks' kernels. The full training set is the reference. Every
seed draws its own selections and model; everything runs in this one process, on the same
split, with training time. The page shows every model run so far, means and spreads over its
seeds; ``pruning.best_keep_within_1pt`` is the largest over the models of the smallest kept
share whose mean PCA and peak@1 stay within 1 point of the full data's.

    python benchmarks/pruning.py [--model xgb|mlp|attention] [--epochs 15] [--seeds 0,1,2]

Resumable: finished steps are kept in ``docs/results/pruning/steps_MODEL-deep.json``; the
data are read as they stood when that file began (delete it to start over on more data).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import VALIDATION, merge_summary, step_meta_lines, write_result
from resume import Steps, snapshot

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "pruning"
DATASET = ROOT / "data" / "dataset"
STRATEGIES = (
    "subsample", "dedup", "kernels", "diversity", "uncertainty", "exploit", "dedup+diversity",
)  # fmt: skip
KEEP = (0.05, 0.10, 0.15, 0.25, 0.50)
MODELS = ("xgb", "attention", "mlp")  # the page's order
WITHIN = 0.01  # the goal's "no loss": PCA and peak@1 within 1 point of the full data's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="xgb", choices=MODELS)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    from dataset import deep_data, random_samples

    from transtune.costmodel import create, load_cost_data
    from transtune.dataset import splits
    from transtune.dataset.prune import load_programs, select

    path = DATA / f"steps_{args.model}-deep.json"
    pinned = snapshot(path)
    config, deep = deep_data(*random_samples(pinned)[1:])
    if config is None:
        raise SystemExit("pruning: the dataset has no deep data (python benchmarks/deep.py)")
    data = load_cost_data(DATASET, [config], collected_before=pinned)
    programs = load_programs(DATASET, config)
    held = [m for m in splits.TENSET_HELD_OUT if any(m in ms for ms in data.models.values())]
    train, test = splits.make("by-model", data, held)
    on_deep = np.isin(data.workload, list(deep))
    train, test = train[on_deep[train]], test[on_deep[test]]
    train_kernels = set(data.workload[train])
    key = np.asarray([f"{w}:{s}" for w, s in zip(data.workload, data.sample, strict=True)])
    measured = [f"{w}:{s}" for w, s in zip(programs.workload, programs.sample, strict=True)]
    candidates = programs.take(np.flatnonzero(np.isin(measured, key[train])))

    def run(rows: np.ndarray, seed: int) -> dict:
        options = {} if args.model == "xgb" else {"validation": VALIDATION}
        model = create(args.model, epochs=args.epochs, seed=seed, **options)
        start = time.perf_counter()
        model.fit(data, rows)
        seconds = time.perf_counter() - start
        return {"records": len(rows), "train_seconds": seconds, **model.score(data, test)}

    steps = Steps(path, {"snapshot": pinned, "config": config, "records": len(data),
                         "deep_kernels": len(deep), "epochs": args.epochs})  # fmt: skip
    references, rows = [], []
    for seed in seeds:
        name = f"all data / s{seed}"
        ref = steps.run(name, lambda seed=seed: run(train, seed))
        references.append({"seed": seed, "programs": len(candidates), **ref,
                           "meta": steps.meta(name)})  # fmt: skip
        for strategy in STRATEGIES:
            for keep in KEEP:

                def pruned(strategy=strategy, keep=keep, seed=seed) -> dict:
                    mask = select(candidates, strategy, keep, seed=seed)
                    pairs = zip(candidates.workload[mask], candidates.sample[mask], strict=True)
                    kept = {f"{w}:{s}" for w, s in pairs}
                    return {"programs": int(mask.sum()),
                            **run(train[np.isin(key[train], list(kept))], seed)}  # fmt: skip

                name = f"{strategy} {keep:.0%} / s{seed}"
                row = steps.run(name, pruned)
                rows.append({"strategy": strategy, "keep": keep, "seed": seed, **row,
                             "meta": steps.meta(name)})  # fmt: skip
    from transtune.dataset.info import collection_rate

    collected, seconds = collection_rate(DATASET)
    result = {
        "model": args.model, "config": config, "held_out": held, "seeds": seeds,
        "min_samples": min(deep.values()),
        "reference": references, "rows": rows, "kernels": len(train_kernels),
        "test_kernels": len(set(data.workload[test])), "test_records": len(test),
        "seconds_per_record": seconds / max(1, collected),
    }  # fmt: skip
    write_result(DATA / f"result_{args.model}-deep.json", result)
    report()


def aggregate(result: dict) -> tuple[dict, list[dict]]:
    """The reference and each (strategy, keep) row as means over the seeds, with the PCA and
    peak@1 spreads (max - min) and the kept share of the training programs."""
    metrics = ("programs", "records", "train_seconds", "pca", "peak@1")

    def mean(rs: list[dict]) -> dict:
        out = {m: float(np.mean([r[m] for r in rs])) for m in metrics}
        out |= {f"{m} spread": float(np.ptp([r[m] for r in rs])) for m in ("pca", "peak@1")}
        return out | {"seeds": len(rs)}

    ref = mean(result["reference"])
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in result["rows"]:
        groups.setdefault((r["strategy"], r["keep"]), []).append(r)
    rows = [{"strategy": s, "keep": k, **mean(rs)} for (s, k), rs in groups.items()]
    for r in rows:
        r["kept"] = r["programs"] / ref["programs"]
    return ref, rows


def best_keep(ref: dict, rows: list[dict]) -> float:
    """The smallest kept share whose mean PCA and peak@1 are within WITHIN of the reference's
    (1.0, all the data, where none is)."""
    ok = [r["kept"] for r in rows
          if r["pca"] >= ref["pca"] - WITHIN and r["peak@1"] >= ref["peak@1"] - WITHIN]  # fmt: skip
    return min(ok, default=1.0)


def report() -> None:
    """docs/results/pruning.md from every model's deep-data result, and the summary keys."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads(f.read_text()) for m in MODELS
               if (f := DATA / f"result_{m}-deep.json").is_file()]  # fmt: skip
    first = results[0]
    lines = [
        "# Dataset pruning on the deep data: how much of it a cost model needs",
        "",
        f"Written by `benchmarks/pruning.py`. The deep data of `{first['config']}` "
        f"(`benchmarks/deep.py`: kernels with at least {first['min_samples']} random samples "
        "each, beside the programs its searches visited); split by model (held out: "
        f"{', '.join(first['held_out'])}; {first['test_kernels']} test kernels, "
        f"{first['test_records']:,} test records, never pruned; {first['kernels']} training "
        "kernels). Each strategy keeps a fraction of the training kernels' programs (a program "
        "= one sampled schedule) and the model trains on their records. Each cell: the mean "
        f"over the seeds, (spread) = max - min. Within 1 point: mean PCA and peak@1 at most "
        f"{WITHIN} below the full data's.",
    ]
    figures = {}
    for result in results:
        ref, rows = aggregate(result)
        keep = best_keep(ref, rows)
        figures[f"pruning.{result['model']}.best_keep_within_1pt"] = keep
        per = result["seconds_per_record"]
        lines += [
            "",
            f"## `{result['model']}`, seeds {result['seeds']}",
            "",
            *step_meta_lines(
                [("the full data", r.get("meta")) for r in result["reference"]]
                + [(r["strategy"], r.get("meta")) for r in result["rows"]],
                result.get("meta"),
            ),
            "",
            f"Full data ({ref['programs']:,.0f} training programs, {ref['records']:,.0f} "
            f"records): PCA {ref['pca']:.3f} ({ref['pca spread']:.3f}), peak@1 "
            f"{ref['peak@1']:.3f} ({ref['peak@1 spread']:.3f}), trained in "
            f"{ref['train_seconds']:.0f} s. Smallest share within 1 point: {keep:.1%}.",
            "",
            "| strategy | asked | kept | records | PCA (spread) | ΔPCA | peak@1 (spread) "
            "| Δpeak@1 | train s | measure min |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            lines.append(
                f"| {r['strategy']} | {r['keep']:.0%} | {r['kept']:.1%} | {r['records']:,.0f} "
                f"| {r['pca']:.3f} ({r['pca spread']:.3f}) | {r['pca'] - ref['pca']:+.3f} "
                f"| {r['peak@1']:.3f} ({r['peak@1 spread']:.3f}) "
                f"| {r['peak@1'] - ref['peak@1']:+.3f} | {r['train_seconds']:.0f} "
                f"| {r['programs'] * per / 60:.0f} |"
            )
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, metric in zip(axes, ("pca", "peak@1"), strict=True):
            for strategy in dict.fromkeys(r["strategy"] for r in rows):
                pts = [(r["kept"], r[metric]) for r in rows if r["strategy"] == strategy]
                ax.plot([100 * k for k, _ in pts], [v for _, v in pts], "o-", label=strategy)
            ax.axhline(ref[metric], color="gray", ls="--", label="all data")
            ax.axhline(ref[metric] - WITHIN, color="gray", ls=":", label="1 point below")
            ax.set_xlabel("% of training programs kept")
            ax.set_ylabel(f"{metric} (by-model split)")
            ax.set_title(result["model"])
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(OUT / f"pruning_{result['model']}.png", dpi=120)
        plt.close(fig)
        lines += ["", f"![pruning curves, {result['model']}](pruning_{result['model']}.png)"]
    lines += [
        "",
        "Measure min: the time to measure the kept programs on a new configuration, each "
        "built and timed once, at this dataset's collection rate (builds included but shared "
        "by two thread counts, so a lone new configuration costs somewhat more). Asked vs "
        "kept: the strategies round each kernel's (or, for `kernels`, each class's) share to "
        "whole programs, at least one.",
        "",
    ]
    (OUT / "pruning.md").write_text("\n".join(lines))
    print("\n".join(lines))
    merge_summary("pruning", {
        **figures,
        "pruning.best_keep_within_1pt": max(figures.values()),
        "pruning.seeds": min(len(r["seeds"]) for r in results),
    })  # fmt: skip


if __name__ == "__main__":
    main()
