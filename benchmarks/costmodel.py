"""Cost model benchmark -> docs/results/costmodel.md (+ costmodel_transfer.png).

1. Models x splits x metrics on the shipped dataset (``data/dataset``), side by side in one
   run, with training time: XGBoost pack-sum, segment-sum MLP, our attention model (and its
   ablation without trace tokens), and MetaSchedule's own XGBModel and MLPModel (``ms-xgb``,
   ``ms-mlp``; no hardware input).
2. Transfer to an unseen configuration: train on the others, then with k% of the unseen
   one's kernels (k = 1, 2, 5, 10, 100): fine-tune the pre-trained model vs train from
   scratch on those k% vs zero-shot (hardware features only), evaluated on the rest.

    python benchmarks/costmodel.py [--epochs 30] [--unseen host-sse4.2]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATASET = ROOT / "data" / "dataset"
SHARES = (0.01, 0.02, 0.05, 0.10, 1.0)


def make_models(epochs: int) -> dict:
    from transtune.costmodel import TorchConfig, TorchCostModel, XGBConfig, XGBCostModel
    from transtune.costmodel.peers import MetaScheduleMLP, MetaScheduleXGB

    return {
        "xgb": lambda: XGBCostModel(XGBConfig()),
        "mlp": lambda: TorchCostModel(TorchConfig(arch="mlp", epochs=epochs)),
        "attention": lambda: TorchCostModel(TorchConfig(arch="attention", epochs=epochs)),
        "attention (stores only)": lambda: TorchCostModel(
            TorchConfig(arch="attention", epochs=epochs, net={"trace": False})
        ),
        "ms-xgb": lambda: MetaScheduleXGB(),
        "ms-mlp": lambda: MetaScheduleMLP(),
    }


def make_splits(data, unseen: str) -> dict:
    from transtune.dataset import splits

    held = [m for m in splits.TENSET_HELD_OUT if any(m in ms for ms in data.models.values())]
    return {
        "within-task": splits.within_task(data.workload, data.target, 0.2, 0),
        "by-task": splits.by_task(data.workload, 0.2, 0),
        f"by-model ({', '.join(held)})": splits.by_model(data.workload, data.models, held),
        f"by-hardware ({unseen})": splits.by_hardware(data.target, [unseen]),
    }


def compare(data, epochs: int, unseen: str) -> list[dict]:
    rows = []
    for split, (train, test) in make_splits(data, unseen).items():
        for name, factory in make_models(epochs).items():
            model = factory()
            start = time.perf_counter()
            model.fit(data, train)
            seconds = time.perf_counter() - start
            scores = model.score(data, test)
            rows.append({"split": split, "model": name, "train_seconds": seconds,
                         "train": len(train), "test": len(test), **scores})  # fmt: skip
            print(rows[-1], flush=True)
    return rows


def transfer(data, epochs: int, unseen: str) -> list[dict]:
    """Pre-train on the other configurations; adapt with k% of the unseen one's kernels."""
    rng = np.random.default_rng(0)
    others = np.flatnonzero(data.target != unseen)
    kernels = np.unique(data.workload[data.target == unseen])
    rng.shuffle(kernels)
    test_kernels = set(kernels[: len(kernels) // 2])  # evaluation half, fixed for every k
    pool = kernels[len(kernels) // 2 :]
    on_unseen = data.target == unseen
    test = np.flatnonzero(on_unseen & np.isin(data.workload, list(test_kernels)))
    factory = make_models(epochs)["attention"]
    base = factory().fit(data, others)
    rows = [{"k": 0.0, "method": "zero-shot", **base.score(data, test)}]
    for k in SHARES:
        chosen = pool[: max(1, int(round(k * len(pool))))]
        adapt = np.flatnonzero(on_unseen & np.isin(data.workload, chosen))
        tuned = copy.deepcopy(base)
        tuned.config.epochs = max(5, epochs // 3)
        tuned.fit(data, adapt)
        scratch = factory().fit(data, adapt)
        for method, model in (("fine-tune", tuned), ("from scratch", scratch)):
            rows.append({"k": k, "method": method, "records": len(adapt),
                         **model.score(data, test)})  # fmt: skip
            print(rows[-1], flush=True)
    return rows


def report(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transtune.targets import host_info

    host = host_info()
    lines = [
        "# Cost models: joint program + hardware features",
        "",
        f"Written by `benchmarks/costmodel.py` from `data/dataset` ({result['records']:,} "
        f"successful records, {result['kernels']} kernels, configurations "
        f"{', '.join(result['targets'])}). Host: {host.cpu_model}, {host.cores} cores; "
        f"PyTorch CPU; {result['epochs']} epochs for the networks; seed 0. Metrics: TenSet's "
        "definitions, record-weighted over (kernel, configuration) groups of the test side.",
        "",
        "| split | model | train / test records | PCA | peak@1 | peak@5 | recall@5 | train s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["compare"]:
        lines.append(
            f"| {r['split']} | {r['model']} | {r['train']:,} / {r['test']:,} | {r['pca']:.3f} "
            f"| {r['peak@1']:.3f} | {r['peak@5']:.3f} | {r['recall@5']:.3f} "
            f"| {r['train_seconds']:.0f} |"
        )
    lines += ["", f"## Transfer to `{result['unseen']}`", "",
              "| k | method | adapt records | PCA | peak@1 |", "|---|---|---|---|---|"]  # fmt: skip
    for r in result["transfer"]:
        lines.append(f"| {r['k']:.0%} | {r['method']} | {r.get('records', 0):,} "
                     f"| {r['pca']:.3f} | {r['peak@1']:.3f} |")  # fmt: skip
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method in ("fine-tune", "from scratch"):
        pts = [(r["k"], r["pca"]) for r in result["transfer"] if r["method"] == method]
        ax.plot([100 * k for k, _ in pts], [p for _, p in pts], "o-", label=method)
    zero = next(r["pca"] for r in result["transfer"] if r["method"] == "zero-shot")
    ax.axhline(zero, color="gray", ls="--", label="zero-shot")
    ax.set_xscale("log")
    ax.set_xlabel(f"% of {result['unseen']}'s kernels used")
    ax.set_ylabel("PCA on held-out kernels")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "costmodel_transfer.png", dpi=120)
    lines += ["", "![transfer curve](costmodel_transfer.png)", ""]
    (OUT / "costmodel.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    from transtune.costmodel import load_cost_data

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--unseen", default="host-sse4.2")
    args = parser.parse_args()
    data = load_cost_data(DATASET)
    result = {
        "records": len(data), "kernels": len(np.unique(data.workload)),
        "targets": sorted(set(data.target)), "epochs": args.epochs, "unseen": args.unseen,
        "compare": compare(data, args.epochs, args.unseen),
        "transfer": transfer(data, args.epochs, args.unseen),
    }  # fmt: skip
    (OUT / "costmodel").mkdir(parents=True, exist_ok=True)
    (OUT / "costmodel" / "result.json").write_text(json.dumps(result, indent=1))
    report(result)


if __name__ == "__main__":
    main()
