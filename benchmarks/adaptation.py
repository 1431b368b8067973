"""A pre-trained cost model adapted to a configuration it never saw: the experiment behind the
costmodel page's ISA transfer and the hardware page's transfer to a second CPU.

Pre-trained on the ``sources`` configurations; evaluated on half of the ``new``
configuration's kernels (a seeded draw), adapted with the records of k% of the other half:
zero-shot, fine-tuned (a few epochs at a tenth of the learning rate; validation-picked, the
pre-trained weights kept when no epoch beats them), the same network trained from scratch on
the k%, XGBoost on the sources' records plus the k%, the lookup baseline from each source (the
same program's latency there) and, from each source, the lookup plus a correction learned on
the k% (``lookup-residual``).
With ``blind``, also the same without the test kernels' programs in pre-training (methods named
``blind ...``): programs measured on no configuration at all, where no lookup exists, the
pre-trained model fine-tuned against XGBoost and against the network trained on the k% alone.
Metrics: PCA, peak@1, TenSet's top-1/top-5 network scores.
"""

from __future__ import annotations

import numpy as np
from resume import Steps

SHARES = (0.01, 0.02, 0.05, 0.10, 1.0)
METRICS = ("pca", "peak@1", "top1", "top5")


def scores(model, data, test: np.ndarray) -> dict:
    """TenSet's metrics of ``model`` on rows ``test`` (PCA, peak@k, recall@k) and its top-1 and
    top-5 network scores (each kernel weighted by its occurrences)."""
    from transtune.costmodel import evaluate, network_topk

    s = model.predict(data, test)
    weight = np.asarray([data.weights.get(w, 1) for w in data.workload[test]], float)
    lat, group = data.latency[test], data.group[test]
    return {**evaluate(s, lat, group),
            "top1": float(network_topk(s, lat, group, weight, 1)),
            "top5": float(network_topk(s, lat, group, weight, 5))}  # fmt: skip


def rows(
    data, new: str, sources: list[str], seed: int, steps: Steps, epochs: int, blind: bool = False
) -> list[dict]:
    """One seed's rows of every method (each fit a resumable step)."""
    from transtune.costmodel import create

    on_new = data.target == new
    source_rows = np.flatnonzero(np.isin(data.target, sources))
    kernels = np.unique(data.workload[on_new])
    np.random.default_rng(seed).shuffle(kernels)
    test = np.flatnonzero(on_new & np.isin(data.workload, kernels[: len(kernels) // 2]))
    pool = kernels[len(kernels) // 2 :]
    unseen = source_rows[~np.isin(data.workload[source_rows], data.workload[test])]
    pretrained: dict[str, object] = {}

    def pre(prefix: str = ""):
        """The pre-trained model of this seed (``prefix`` "blind ": without the test kernels), kept
        beside the steps so that a rerun of the steps after it does not train it again."""
        if prefix not in pretrained:
            from transtune.costmodel import load

            key = f"s{seed} {prefix}pre-trained"
            suffix = "-blind" if prefix else ""
            path = steps.path.with_name(f"pretrained-s{seed}{suffix}-{new}.json")
            if key in steps.done and path.is_file():
                pretrained[prefix] = load(path)
            else:
                train = unseen if prefix else source_rows
                model = create("attention", seed=seed, epochs=epochs).fit(data, train)
                model.save(path)
                pretrained[prefix] = model
                steps.run(key, lambda: {"path": path.name})
        return pretrained[prefix]

    def fit(name: str, train: np.ndarray, **options):
        return lambda: scores(create(name, seed=seed, **options).fit(data, train), data, test)

    def fine_tune(adapt: np.ndarray, prefix: str = ""):
        return lambda: scores(pre(prefix).fine_tuned(data, adapt), data, test)

    plan = [("zero-shot", 0.0, 0, lambda: scores(pre(), data, test)),
            ("xgboost", 0.0, 0, fit("xgb", source_rows))]  # fmt: skip
    plan += [(f"lookup {s}", 0.0, 0, fit("lookup", source_rows, source=s)) for s in sources]
    if blind:
        plan += [("blind zero-shot", 0.0, 0, lambda: scores(pre("blind "), data, test)),
                 ("blind xgboost", 0.0, 0, fit("xgb", unseen))]  # fmt: skip
    for k in SHARES:
        chosen = pool[: max(1, int(round(k * len(pool))))]
        adapt = np.flatnonzero(on_new & np.isin(data.workload, chosen))
        with_sources = np.concatenate([source_rows, adapt])
        plan += [
            ("fine-tune", k, len(adapt), fine_tune(adapt)),
            ("from scratch", k, len(adapt), fit("attention", adapt, epochs=epochs)),
            ("xgboost", k, len(adapt), fit("xgb", with_sources)),
        ]
        plan += [(f"lookup-residual {s}", k, len(adapt),
                  fit("lookup-residual", with_sources, source=s)) for s in sources]  # fmt: skip
        if blind:
            plan += [("blind fine-tune", k, len(adapt), fine_tune(adapt, "blind ")),
                     ("blind xgboost", k, len(adapt),
                      fit("xgb", np.concatenate([unseen, adapt])))]  # fmt: skip
    return [{"seed": seed, "k": k, "method": method, "records": records,
             **steps.run(f"s{seed} {method} {k:.0%}", step)}
            for method, k, records, step in plan]  # fmt: skip


def means(result_rows: list[dict]) -> dict[tuple[str, float], dict]:
    """Per (method, k): each metric's mean over seeds, the PCA spread (max - min), records."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in result_rows:
        groups.setdefault((r["method"], r["k"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {m: float(np.mean([r[m] for r in rs])) for m in METRICS}
        out[key]["spread"] = float(np.ptp([r["pca"] for r in rs]))
        out[key]["records"] = rs[0].get("records", 0)
    return out


def best_lookup(mean: dict) -> str:
    """The lookup baseline (by source) of the highest PCA."""
    return max((v["pca"], m) for (m, _), v in mean.items() if m.startswith("lookup "))[1]


def headline(mean: dict, method: str = "fine-tune") -> tuple[float, float]:
    """(``method``'s PCA at 5% / the best PCA of any method fitted with all of the new
    configuration's adaptation kernels, that PCA minus the best lookup's): the issues' goals.
    ``method`` "lookup-residual" means the residual on the best lookup's source."""
    if method == "lookup-residual":
        method = best_lookup(mean).replace("lookup", "lookup-residual", 1)
    full = max(v["pca"] for (m, k), v in mean.items() if k == 1.0 and not m.startswith("blind"))
    pca = mean[method, 0.05]["pca"]
    return pca / full, pca - mean[best_lookup(mean), 0.0]["pca"]


def blind_line(mean: dict, k: float = 0.05) -> str | None:
    """The sentence comparing, on programs measured nowhere, the fine-tuned model with XGBoost
    and with the network trained on the k% alone (None without blind rows)."""
    if ("blind fine-tune", k) not in mean:
        return None
    pca = {m: mean[m, k]["pca"] for m in ("blind fine-tune", "blind xgboost", "from scratch")}
    return (f"- On programs measured on no configuration in training (pre-training without the "
            f"test kernels), with {k:.0%}: the fine-tuned model {pca['blind fine-tune']:.3f} PCA, "
            f"XGBoost {pca['blind xgboost']:.3f}, the network trained on the {k:.0%} alone "
            f"{pca['from scratch']:.3f}.")  # fmt: skip


def table(mean: dict) -> list[str]:
    """The Markdown table of :func:`means`, by k then method."""
    lines = ["| method | k | adapt records | PCA (spread) | peak@1 | top-1 | top-5 |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for (method, k), v in sorted(mean.items(), key=lambda x: (x[0][1], x[0][0])):
        lines.append(f"| {method} | {k:.0%} | {v['records']:,} | {v['pca']:.3f} "
                     f"({v['spread']:.3f}) | {v['peak@1']:.3f} | {v['top1']:.3f} "
                     f"| {v['top5']:.3f} |")  # fmt: skip
    return lines


def plot(mean: dict, new: str, path) -> None:
    """PCA against k for the adapting methods, with zero-shot and the best lookup as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    lookup = best_lookup(mean)
    residual = lookup.replace("lookup", "lookup-residual", 1)
    for method in ("fine-tune", "from scratch", "xgboost", residual, "blind fine-tune"):
        pts = sorted((k, v["pca"]) for (m, k), v in mean.items() if m == method and k > 0)
        if pts:
            ax.plot([100 * k for k, _ in pts], [p for _, p in pts], "o-", label=method)
    ax.axhline(mean["zero-shot", 0.0]["pca"], color="gray", ls="--", label="zero-shot")
    ax.axhline(mean[lookup, 0.0]["pca"], color="black", ls=":", label=f"best {lookup}")
    ax.set_xscale("log")
    ax.set_xlabel(f"% of {new}'s adaptation kernels")
    ax.set_ylabel("PCA on held-out kernels")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
