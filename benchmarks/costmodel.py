"""Cost model benchmark -> docs/results/costmodel.md (+ costmodel_transfer.png).

1. Models x splits x seeds on the shipped dataset (``data/dataset``), side by side in one
   run, with training time: XGBoost pack-sum, segment-sum MLP, our attention model (and its
   ablation without trace tokens, and three tries where it trails XGBoost: a mixed pairwise +
   LambdaRank loss, features standardized per task, an ensemble with XGBoost), MetaSchedule's
   own XGBModel and MLPModel (``ms-xgb``, ``ms-mlp``, at its default 50 epochs; no hardware
   input), and on the by-hardware split the
   lookup baseline from each other configuration. Our networks pick their epoch on a
   validation share of the training kernels. Mean and spread (max - min) over the seeds;
   TenSet's metrics and its top-1/top-5 network scores. The ``validation`` split (the
   by-model split's training side, the kernels of SELECT_MODELS held out) chooses which of
   our variants (OURS) the goal's figures are about, so that the test split never does.
2. Transfer to an unseen ISA level (``adaptation.py``): pre-train without the ``--unseen``
   configurations (by default both SSE4.2-only ones, which share their builds), then adapt to
   the first of them with k% of its kernels (k = 1, 2, 5, 10, 100).

    python benchmarks/costmodel.py [--epochs 15] [--seeds 0,1,2] [--unseen ID,...]
        [--models "xgb;mlp;attention"]   # a subset of the models (default: all)
        [--splits "by-model;validation"] [--no-transfer]   # a subset of the splits, no step 2

Resumable: finished steps are kept in ``docs/results/costmodel/steps.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import adaptation
import numpy as np
from common import VALIDATION, merge_summary, step_meta_lines, write_result
from resume import Steps, snapshot

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATASET = ROOT / "data" / "dataset"
PEERS = ("xgb", "mlp")  # the goal: our model beats these by +3 PCA and +5 peak@1 points
# Our variants; the validation split chooses one (the highest mean PCA + peak@1 over the
# seeds) as "our model" of the goal, so that the test split never picks it. Without that
# split's rows, the pre-declared "attention".
OURS = ("attention", "attention (mixed loss)", "attention (per-task features)", "attention + xgb")
# Training models whose kernels the validation split holds out of the by-model split's training
# side: one of each family the test models stand for (ResNet, mobile convnets, BERT).
SELECT_MODELS = ("resnet18", "mobilenet_v3_large", "efficientnet_b0", "bert_medium")


def make_models(epochs: int, ms_mlp_epochs: int | None, seed: int) -> dict:
    from transtune.costmodel import create

    ours = {"epochs": epochs, "seed": seed, "validation": VALIDATION}
    return {
        "xgb": lambda: create("xgb", seed=seed),
        "mlp": lambda: create("mlp", **ours),
        "attention": lambda: create("attention", **ours),
        "attention (stores only)": lambda: create("attention", **ours, net={"trace": False}),
        # Where ours trails XGBoost: a mixed loss, features standardized per task, an ensemble.
        "attention (mixed loss)": lambda: create("attention", **ours, loss="mixed"),
        "attention (per-task features)": lambda: create("attention", **ours, per_task=True),
        "attention + xgb": lambda: create(
            "ensemble", seed=seed, epochs=epochs, validation=VALIDATION
        ),
        "ms-xgb": lambda: create("ms-xgb"),
        "ms-mlp": lambda: create("ms-mlp", seed=seed, epochs=ms_mlp_epochs),
    }


# The goal's split first, then the validation split that chooses our variant for it.
SPLITS = ("by-model", "validation", "within-task", "by-task", "by-hardware")


def make_splits(data, unseen: list[str], kinds=SPLITS) -> dict:
    """The splits of ``kinds`` by name (a held-out list in the name), in SPLITS' order: a run
    spanning sessions measures the goal's split soonest. ``validation`` splits the by-model
    split's training side again: the kernels of SELECT_MODELS validate."""
    from transtune.dataset import splits

    def present(models) -> list[str]:
        return [m for m in models if any(m in ms for ms in data.models.values())]

    held, select = present(splits.TENSET_HELD_OUT), present(SELECT_MODELS)
    out = {}
    for kind in SPLITS:
        if kind not in kinds:
            continue
        if kind == "by-model":
            out[f"by-model ({', '.join(held)})"] = splits.make(kind, data, held)
        elif kind == "validation":
            train, _ = splits.make("by-model", data, held)
            inner, val = splits.by_model(data.workload[train], data.models, select)
            out[f"validation ({', '.join(select)})"] = (train[inner], train[val])
        elif kind == "by-hardware":
            out[f"by-hardware ({', '.join(unseen)})"] = splits.make(kind, data, unseen)
        else:
            out[kind] = splits.make(kind, data)
    return out


def compare(data, args, unseen: list[str], steps: Steps) -> list[dict]:
    from transtune.costmodel import create

    rows = []
    for split, (train, test) in make_splits(data, unseen, args.splits).items():
        plans = [
            (name, seed, factory)
            for seed in args.seeds
            for name, factory in make_models(args.epochs, args.ms_mlp_epochs, seed).items()
            if (args.models is None or name in args.models)
            and (not split.startswith("validation") or name in OURS + PEERS)
        ]
        if split.startswith("by-hardware"):  # learns nothing: one seed is all there is
            plans += [(f"lookup {s}", args.seeds[0], lambda s=s: create("lookup", source=s))
                      for s in sorted(set(data.target) - set(unseen))]  # fmt: skip
        for name, seed, factory in plans:

            def fit_and_score(factory=factory, train=train, test=test) -> dict:
                model = factory()
                start = time.perf_counter()
                model.fit(data, train)
                return {"train_seconds": time.perf_counter() - start, "train": len(train),
                        "test": len(test), **adaptation.scores(model, data, test)}  # fmt: skip

            key = f"{split} / {name} / s{seed}"
            row = steps.run(key, fit_and_score)
            rows.append({"split": split, "model": name, "seed": seed, **row,
                         "meta": steps.meta(key)})  # fmt: skip
    return rows


def summarize(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (split, model): mean and spread (max - min) of each metric over its seeds."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["split"], r["model"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {"seeds": len(rs), "train": rs[0]["train"], "test": rs[0]["test"]}
        for m in ("pca", "peak@1", "peak@5", "recall@5", "top1", "top5", "train_seconds"):
            values = [r[m] for r in rs]
            out[key][m], out[key][f"{m} spread"] = float(np.mean(values)), float(np.ptp(values))
    return out


def choose(summary: dict, seeds: int) -> tuple[str, str]:
    """Our model for the goal and why: the variant of OURS with the highest mean PCA + peak@1
    on the validation split, or "attention" unless that split has every variant of OURS with
    all ``seeds`` seeds."""
    scored = {
        name: v["pca"] + v["peak@1"]
        for (split, name), v in summary.items()
        if split.startswith("validation") and name in OURS and v["seeds"] == seeds
    }
    if len(scored) < len(OURS):
        return "attention", "pre-declared; the validation split has not run every variant"
    best = max(scored, key=scored.get)
    return best, "the highest mean PCA + peak@1 of " + ", ".join(
        f"{name} {score:.3f}" for name, score in sorted(scored.items(), key=lambda kv: -kv[1])
    ) + " on the validation split"


def gains(summary: dict, split: str, ours_name: str = "attention") -> dict[str, dict]:
    """Our model ``ours_name`` minus each peer on ``split``: PCA and peak@1 differences, and
    whether each exceeds the two models' seed-to-seed spreads."""
    ours = summary[split, ours_name]
    out = {}
    for (s, name), peer in summary.items():
        if s != split or name == ours_name or name.startswith("lookup"):
            continue
        out[name] = {}
        for m in ("pca", "peak@1"):
            diff = ours[m] - peer[m]
            noise = max(ours[f"{m} spread"], peer[f"{m} spread"])
            out[name][m] = (diff, abs(diff) > noise)
    return out


def report(result: dict) -> None:
    summary = summarize(result["compare"])
    seeds = result["seeds"]
    lines = [
        "# Cost models: joint program + hardware features",
        "",
        f"Written by `benchmarks/costmodel.py` from `data/dataset` ({result['records']:,} "
        f"successful records, {result['kernels']} kernels, configurations "
        f"{', '.join(result['targets'])}). PyTorch CPU; {result['epochs']} epochs for our "
        f"networks (the epoch picked on {VALIDATION:.0%} of the training kernels), "
        f"MetaSchedule's MLPModel at {result['ms_mlp_epochs'] or 'its default 50'} epochs; "
        f"seeds {seeds}: each cell is "
        "the mean over them, (spread) = max - min. Metrics: TenSet's definitions (peak@k: "
        "the best of the top k, averaged over groups), record-weighted over (kernel, "
        "configuration) groups of the test side; top-1/top-5: TenSet's network scores.",
        *(
            [
                f"This run covers the splits {', '.join(result['splits'])} only; the others are "
                "not yet rerun on these terms (this page's history holds their older figures)."
            ]
            if set(result.get("splits", SPLITS)) != set(SPLITS)
            else []
        ),
        "",
        *step_meta_lines(
            [(f"{r['split'].split(' (')[0]} split", r.get("meta")) for r in result["compare"]],
            result.get("meta"),
        ),
        "",
        "| split | model | train / test records | PCA (spread) | peak@1 (spread) | peak@5 "
        "| recall@5 | top-1 | top-5 | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (split, name), v in summary.items():
        lines.append(
            f"| {split} | {name} | {v['train']:,} / {v['test']:,} "
            f"| {v['pca']:.3f} ({v['pca spread']:.3f}) | {v['peak@1']:.3f} "
            f"({v['peak@1 spread']:.3f}) | {v['peak@5']:.3f} | {v['recall@5']:.3f} "
            f"| {v['top1']:.3f} | {v['top5']:.3f} | {v['train_seconds']:.0f} |"
        )
    by_model = next((s for s, _ in summary if s.startswith("by-model")), None)
    ours, why = choose(summary, len(seeds))
    diffs = gains(summary, by_model, ours) if (by_model, ours) in summary else {}
    lines += [
        "",
        f"Our model for the goal: `{ours}` ({why}).",
        "",
        f"By-model split, `{ours}` minus each peer (goal: at least +0.03 PCA and "
        "+0.05 peak@1 over xgb and mlp; * = beyond the seed-to-seed spread of both): "
        + "; ".join(
            f"{name} {d['pca'][0]:+.3f}{'*' if d['pca'][1] else ''} PCA, "
            f"{d['peak@1'][0]:+.3f}{'*' if d['peak@1'][1] else ''} peak@1"
            for name, d in diffs.items()
        )
        + ".",
    ]
    target = result["unseen"][0]
    lines += ["", f"## Transfer to `{target}`", ""]
    if result["transfer"]:
        mean = adaptation.means(result["transfer"])
        fraction, over_lookup = adaptation.headline(mean)
        lines += [f"Pre-trained without {', '.join(result['unseen'])}; adapted with the records"
                  f" of k% of half of `{target}`'s kernels, evaluated on the other half "
                  f"(`benchmarks/adaptation.py`). With 5%, fine-tuning reaches {fraction:.1%} "
                  "of the PCA of the best model fitted on all of that half (goal: 95%), "
                  f"{over_lookup:+.3f} PCA over the best lookup baseline.", "",
                  *adaptation.table(mean)]  # fmt: skip
        adaptation.plot(mean, target, OUT / "costmodel_transfer.png")
        lines += ["", "![transfer curve](costmodel_transfer.png)"]
    else:
        lines.append("Not run in this invocation (`--no-transfer`).")
    lines.append("")
    (OUT / "costmodel.md").write_text("\n".join(lines))
    print("\n".join(lines))
    if all(name in diffs for name in PEERS):
        merge_summary("costmodel", {
            "costmodel.by_model.pca_gain_vs_xgb": diffs["xgb"]["pca"][0],
            "costmodel.by_model.peak1_gain_vs_xgb": diffs["xgb"]["peak@1"][0],
            "costmodel.seeds": len(seeds),
            "costmodel.by_model.model": ours,
        })  # fmt: skip


def main() -> None:
    from transtune.costmodel import load_cost_data
    from transtune.targets import hardware_name

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--ms-mlp-epochs", type=int, help="default: MetaSchedule's (50)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--models", help="semicolon-separated model names (default: all)")
    parser.add_argument(
        "--splits",
        default=";".join(SPLITS),
        help=f"semicolon-separated split kinds (default: {';'.join(SPLITS)})",
    )
    parser.add_argument(
        "--transfer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="step 2, the transfer to an unseen ISA level (default: on)",
    )
    parser.add_argument("--unseen", default="epyc-znver4-2c-sse4.2,epyc-znver4-1c-sse4.2",
                        help="hardware ids (or this host's aliases) held out")  # fmt: skip
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.models = args.models.split(";") if args.models else None
    args.splits = args.splits.split(";")
    if unknown := set(args.splits) - set(SPLITS):
        parser.error(f"unknown split {sorted(unknown)[0]!r} (one of {', '.join(SPLITS)})")
    path = OUT / "costmodel" / "steps.json"
    pinned = snapshot(path)
    data = load_cost_data(DATASET, collected_before=pinned)
    unseen = [hardware_name(name) for name in args.unseen.split(",")]
    steps = Steps(path, {
        "snapshot": pinned, "records": len(data), "epochs": args.epochs,
        "ms_mlp_epochs": args.ms_mlp_epochs, "unseen": unseen, "validation": VALIDATION,
    })  # fmt: skip
    sources = sorted(set(data.target) - set(unseen))
    result = {
        "records": len(data), "kernels": len(np.unique(data.workload)),
        "targets": sorted(set(data.target)), "epochs": args.epochs,
        "ms_mlp_epochs": args.ms_mlp_epochs, "unseen": unseen, "seeds": args.seeds,
        "splits": args.splits, "compare": compare(data, args, unseen, steps),
        "transfer": [r for seed in args.seeds for r in adaptation.rows(
            data, unseen[0], sources, seed, steps, args.epochs)] if args.transfer else [],
    }  # fmt: skip
    report(write_result(OUT / "costmodel" / "result.json", result))


if __name__ == "__main__":
    main()
