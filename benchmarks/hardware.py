"""Transfer to a second real CPU -> docs/results/hardware.md (+ hardware_transfer.png).

    python benchmarks/hardware.py collect [--minutes M]   # on a CPU the dataset lacks; alone
    python benchmarks/hardware.py costmodel [--new ID] [--seeds 0,1,2]   # needs two CPUs
    python benchmarks/hardware.py schedules [MODEL ...]   # on the new CPU; alone
    python benchmarks/hardware.py report

``collect``: the dataset's programs (those measured on the full-ISA 2-thread configuration of
the CPU with the most records) measured again on this host's ``host`` and ``host-1core``, model
by model and pass by pass as ``benchmarks/dataset.py`` collected them, test models first (each
a fresh, resumable ``transtune dataset collect --programs-from`` process). On a CPU the
dataset has already, it says so: deepen that CPU's data instead (``dataset.py deep``).

``costmodel``: pre-trained on every configuration of the other CPUs, evaluated on half of the
new CPU's kernels (its full-ISA 2-thread id), adapted with the records of k% of the other
half: zero-shot, fine-tuned (validation-picked epochs, the pre-trained weights kept when no
epoch beats them), trained from scratch on the same k%, XGBoost on the other CPUs' data plus
the k%, and the lookup baseline per source configuration (the same program's latency there).
Metrics: PCA, peak@1, TenSet's top-1/top-5 network score. Each fit is a resumable step.

``schedules``: each model held out, transfer-tuned on this CPU from the other CPU's finished
reference libraries (their records replayed and rebuilt for this target), and from this CPU's
own when it has them, timed end to end, interleaved, beside this CPU's full tuning (when its
reference finished), ONNX Runtime and PyTorch.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dataset
import numpy as np
import reference
from common import ROOT, merge_summary, meta_line, write_result
from resume import Steps

OUT = ROOT / "docs" / "results"
DATA = OUT / "hardware"
DATASET = ROOT / "data" / "dataset"
SHARES = (0.01, 0.02, 0.05, 0.10, 1.0)
EPOCHS = 15
MODELS = ["resnet50", "mobilenet_v2", "resnext50_32x4d", "bert_base"]
MAX_CANDIDATES = 8


def cpus() -> dict[str, list[str]]:
    """The dataset's hardware ids by the CPU they ran on (its host LLVM CPU)."""
    from transtune.dataset.store import DatasetStore

    out: dict[str, list[str]] = {}
    for hw_id, d in sorted(DatasetStore(DATASET).hardware().items()):
        out.setdefault(d["fingerprint"]["host_mcpu"], []).append(hw_id)
    return out


def full_isa(ids: list[str], threads: int = 2) -> str | None:
    """The full-ISA id of ``threads`` threads among a CPU's ``ids``."""
    from transtune.dataset.store import DatasetStore

    hardware = DatasetStore(DATASET).hardware()
    return next((i for i in ids if hardware[i]["fingerprint"]["mcpu"]
                 == hardware[i]["fingerprint"]["host_mcpu"]
                 and hardware[i]["threads"] == threads), None)  # fmt: skip


def collect(minutes: float) -> None:
    from transtune.machine import host_info

    here, held = host_info().mcpu, cpus()
    if here in held:
        print(f"the dataset has this CPU ({here}) already: deepen it instead, "
              "python benchmarks/dataset.py deep")  # fmt: skip
        return
    from transtune.dataset import load_records

    counts = load_records(DATASET, ["sample"])[0]["target"].value_counts().to_pylist()
    by_id = {c["values"]: c["counts"] for c in counts}
    source = max((full_isa(ids) for ids in held.values()), key=lambda i: by_id.get(i, 0))
    deadline = time.time() + 60 * minutes
    models = dataset.TEST_MODELS + [m for m in dataset.MODELS if m not in dataset.TEST_MODELS]
    for batch, image, sequence in dataset.PASSES:
        for model in models:
            if time.time() > deadline:
                return
            size = sequence if model.startswith(("bert", "mobilebert")) else image
            print(f"== {model} batch {batch} size {size or 'default'} from {source}", flush=True)
            command = [
                sys.executable, "-m", "transtune.cli", "dataset", "collect", "--models", model,
                "--batch-sizes", str(batch), "--targets", "host,host-1core",
                "--per-kernel", str(dataset.PER_KERNEL), "--programs-from", source,
                "--out", str(DATASET),
            ]  # fmt: skip
            if size:
                command += ["--sizes", str(size)]
            if subprocess.run(command).returncode != 0:
                return  # interrupted or failed: stop here, rerun resumes


def scores(model, data, test: np.ndarray) -> dict:
    """PCA, peak@1 and TenSet's top-1/top-5 network score of ``model`` on rows ``test``."""
    from transtune.costmodel import network_topk

    s = model.predict(data, test)
    weight = np.asarray([data.weights.get(w, 1) for w in data.workload[test]], float)
    lat, group = data.latency[test], data.group[test]
    metrics = model.score(data, test)
    return {"pca": metrics["pca"], "peak@1": metrics["peak@1"],
            "top1": float(network_topk(s, lat, group, weight, 1)),
            "top5": float(network_topk(s, lat, group, weight, 5))}  # fmt: skip


def costmodel(new: str | None, seeds: list[int]) -> None:
    from transtune.costmodel import load_cost_data

    held = cpus()
    if len(held) < 2:
        raise SystemExit(
            f"the dataset holds one CPU ({', '.join(held)}): collect a second one first "
            "(python benchmarks/hardware.py collect, on another CPU)"
        )
    data = load_cost_data(DATASET)
    if new is None:  # the full-ISA 2-thread id of the CPU with the fewest records: the new one
        count = {cpu: int(np.isin(data.target, ids).sum()) for cpu, ids in held.items()}
        new = full_isa(held[min(count, key=count.get)])
    new_cpu = next((cpu for cpu, ids in held.items() if new in ids), None)
    if new_cpu is None:
        raise SystemExit(f"the dataset has no hardware id {new!r}")
    sources = [i for cpu, ids in held.items() if cpu != new_cpu for i in ids]
    steps = Steps(DATA / "steps.json", {"records": len(data), "new": new, "epochs": EPOCHS})
    rows = [row for seed in seeds for row in _seed_rows(data, new, sources, seed, steps)]
    result = write_result(DATA / "costmodel.json", {
        "new": new, "sources": sources, "epochs": EPOCHS, "seeds": seeds,
        "records_new": int((data.target == new).sum()),
        "records_sources": int(np.isin(data.target, sources).sum()), "rows": rows,
    })  # fmt: skip
    mean = _means(result["rows"])
    full = mean["from scratch", 1.0]["pca"]
    lookup = max(v["pca"] for (m, _), v in mean.items() if m.startswith("lookup"))
    merge_summary("hardware", {
        "hardware.k5_fraction_of_full": mean["fine-tune", 0.05]["pca"] / full,
        "hardware.k5_minus_lookup_pca": mean["fine-tune", 0.05]["pca"] - lookup,
    })  # fmt: skip


def _seed_rows(data, new: str, sources: list[str], seed: int, steps: Steps) -> list[dict]:
    """One seed's rows: its evaluation half of the new CPU's kernels, and every method."""
    from transtune.costmodel import create

    on_new = data.target == new
    source_rows = np.flatnonzero(np.isin(data.target, sources))
    kernels = np.unique(data.workload[on_new])
    np.random.default_rng(seed).shuffle(kernels)
    test = np.flatnonzero(on_new & np.isin(data.workload, kernels[: len(kernels) // 2]))
    pool = kernels[len(kernels) // 2 :]
    pretrained = []

    def pre():
        if not pretrained:
            pretrained.append(create("attention", seed=seed, epochs=EPOCHS).fit(data, source_rows))
        return pretrained[0]

    def fit(name: str, train: np.ndarray, **options):
        return lambda: scores(create(name, seed=seed, **options).fit(data, train), data, test)

    def fine_tune(adapt: np.ndarray, kernel_count: int):
        def run() -> dict:
            tuned = copy.deepcopy(pre())
            tuned.config.epochs = max(5, EPOCHS // 3)
            tuned.config.validation = 0.2 if kernel_count >= 5 else 0.0
            return scores(tuned.fit(data, adapt), data, test)

        return run

    steps_of = [("zero-shot", 0.0, 0, lambda: scores(pre(), data, test)),
                ("xgboost", 0.0, 0, fit("xgb", source_rows))]  # fmt: skip
    steps_of += [(f"lookup {s}", 0.0, 0, fit("lookup", source_rows, source=s)) for s in sources]
    for k in SHARES:
        chosen = pool[: max(1, int(round(k * len(pool))))]
        adapt = np.flatnonzero(on_new & np.isin(data.workload, chosen))
        steps_of += [
            ("fine-tune", k, len(adapt), fine_tune(adapt, len(chosen))),
            ("from scratch", k, len(adapt), fit("attention", adapt, epochs=EPOCHS)),
            ("xgboost", k, len(adapt), fit("xgb", np.concatenate([source_rows, adapt]))),
        ]
    return [{"seed": seed, "k": k, "method": method, "records": records,
             **steps.run(f"s{seed} {method} {k:.0%}", step)}
            for method, k, records, step in steps_of]  # fmt: skip


def _means(rows: list[dict]) -> dict[tuple[str, float], dict]:
    """Per (method, k): the mean of each metric over seeds, and their spread (max - min)."""
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["k"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {
            m: float(np.mean([r[m] for r in rs])) for m in ("pca", "peak@1", "top1", "top5")
        }
        out[key]["spread"] = float(np.ptp([r["pca"] for r in rs]))
        out[key]["records"] = rs[0].get("records", 0)
    return out


def _donor_library(path: Path, folder: Path, held_out: str) -> list[str]:
    """A library at ``path`` of the best records of every finished reference in ``folder``
    but ``held_out``'s; returns the donor models."""
    from transtune.library import open_library

    donors = [p.stem for p in sorted(folder.glob("*.db"))
              if p.stem != held_out and reference.finished(p)]  # fmt: skip
    with open_library(path) as lib:
        for model in donors:
            with open_library(folder / f"{model}.db", read_only=True) as source:
                lib.merge(source, top_k=reference.TOP_K)
    return donors


def schedules(models: list[str]) -> None:
    from transtune.benchmark import compare
    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.transfer import transfer_tune

    config = reference.config()
    root = reference.folder().parent.parent  # data/library/reference
    others = [p / reference.LOWERING for p in sorted(root.iterdir())
              if p.name != config.name and (p / reference.LOWERING).is_dir()]  # fmt: skip
    for name in models:
        model = from_zoo(name)
        builds, rows = {"untuned": (config, None)}, {}
        with tempfile.TemporaryDirectory() as tmp:
            libraries = {}
            for folder in [*others, reference.folder()]:
                path = Path(tmp) / f"{folder.parent.name}.db"
                donors = _donor_library(path, folder, name)
                if not donors:
                    continue
                lib = libraries[folder.parent.name] = open_library(path)
                result = transfer_tune(model, lib, config, donors=donors,
                                       max_candidates=MAX_CANDIDATES)  # fmt: skip
                label = f"from {folder.parent.name}"
                builds[label] = (config, LibraryDatabase(lib, config))
                rows[label] = {"donors": donors, "estimated_ms": 1e3 * result.estimated_latency,
                               "search_seconds": result.search_seconds,
                               "stages": _stages(result)}  # fmt: skip
            own = reference.folder() / f"{name}.db"
            if reference.finished(own):
                full = libraries["full"] = open_library(own, read_only=True)
                builds["full tuning"] = (config, LibraryDatabase(full, config, read=("tuned",)))
            e2e = compare(model, builds, repeat=10)
            for lib in libraries.values():
                lib.close()
        write_result(DATA / f"schedules-{name}.json", {
            "model": name, "config": config.name, "lowering": reference.LOWERING,
            "transfers": rows, "end_to_end": e2e.to_json(),
        }, config.num_threads)  # fmt: skip


def _stages(result) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in result.kernels:
        out[k.stage] = out.get(k.stage, 0) + 1
    return out


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transtune.dataset import dataset_info

    info = dataset_info(DATASET)
    lines = ["# Hardware: the same programs on two real CPUs", "",
             "Written by `benchmarks/hardware.py report`.", "", "## The CPUs", "",
             "| hardware id | as | CPU | LLVM CPU | family/model | threads | L1d / L2 / L3 KiB "
             "| SIMD bits | peak GFLOP/s | bandwidth GB/s | records |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for hw_id, d in sorted(info["hardware"].items()):
        fp = d.get("fingerprint", {})
        lines.append(
            f"| `{hw_id}` | {d.get('config')} | {d.get('device')} | {fp.get('host_mcpu')} "
            f"(build {fp.get('mcpu')}) | {fp.get('family', '?')}/{fp.get('model', '?')} "
            f"| {d.get('threads')} | {d.get('l1d_kib')} / {d.get('l2_kib')} / {d.get('l3_kib')} "
            f"| {d.get('simd_bits')} | {d.get('measured_peak_gflops', 0):.0f} "
            f"| {d.get('measured_bandwidth_gbs', 0):.0f} "
            f"| {info['by_hardware'].get(hw_id, {}).get('records', 0):,} |"
        )
    path = DATA / "costmodel.json"
    if path.exists():
        result = json.loads(path.read_text())
        mean = _means(result["rows"])
        lines += ["", f"## Cost models on `{result['new']}`", "", meta_line(result.get("meta")),
                  "", f"Pre-trained on {', '.join(f'`{s}`' for s in result['sources'])} "
                  f"({result['records_sources']:,} records); evaluated on half of "
                  f"`{result['new']}`'s kernels, adapted with k% of the other half; seeds "
                  f"{result['seeds']} (mean, PCA spread max - min). Attention model, "
                  f"{result['epochs']} epochs; fine-tuning {max(5, result['epochs'] // 3)}.",
                  "", "| method | k | adapt records | PCA (spread) | peak@1 | top-1 | top-5 |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for (method, k), v in sorted(mean.items(), key=lambda x: (x[0][1], x[0][0])):
            lines.append(f"| {method} | {k:.0%} | {v['records']:,} | {v['pca']:.3f} "
                         f"({v['spread']:.3f}) | {v['peak@1']:.3f} | {v['top1']:.3f} "
                         f"| {v['top5']:.3f} |")  # fmt: skip
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for method in ("fine-tune", "from scratch", "xgboost"):
            pts = sorted((k, v["pca"]) for (m, k), v in mean.items() if m == method and k > 0)
            ax.plot([100 * k for k, _ in pts], [p for _, p in pts], "o-", label=method)
        ax.axhline(mean["zero-shot", 0.0]["pca"], color="gray", ls="--", label="zero-shot")
        best = max((v["pca"], m) for (m, _), v in mean.items() if m.startswith("lookup"))
        ax.axhline(best[0], color="black", ls=":", label=f"best {best[1]}")
        ax.set_xscale("log")
        ax.set_xlabel(f"% of {result['new']}'s adaptation kernels")
        ax.set_ylabel("PCA on held-out kernels")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(OUT / "hardware_transfer.png", dpi=120)
        lines += ["", "![transfer](hardware_transfer.png)"]
    for path in sorted(DATA.glob("schedules-*.json")):
        r = json.loads(path.read_text())
        timings = {t["runtime"]: t for t in r["end_to_end"]["timings"]}
        lines += ["", f"## Schedules across CPUs: {r['model']} on `{r['config']}`", "",
                  meta_line(r.get("meta")), "", "| build | donors | stages | est. ms | "
                  "search s | end to end ms (min..max) |", "|---|---|---|---|---|---|"]  # fmt: skip
        for label, t in timings.items():
            x = r["transfers"].get(label, {})
            stages = ", ".join(f"{s} {n}" for s, n in x.get("stages", {}).items())
            spread = f"{t['median_ms']:.2f} ({t['min_ms']:.2f}..{t['max_ms']:.2f})"
            lines.append(f"| {label} | {', '.join(x.get('donors', []))} | {stages} "
                         f"| {x.get('estimated_ms', float('nan')):.2f} "
                         f"| {x.get('search_seconds', float('nan')):.0f} | {spread} |")  # fmt: skip
    (OUT / "hardware.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'hardware.md'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["collect", "costmodel", "schedules", "report"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--new", help="costmodel: the new CPU's hardware id")
    parser.add_argument("--seeds", default="0", help="costmodel: comma-separated seeds")
    args = parser.parse_args()
    if args.step == "collect":
        collect(args.minutes)
    elif args.step == "costmodel":
        costmodel(args.new, [int(s) for s in args.seeds.split(",")])
        report()
    elif args.step == "schedules":
        schedules(args.models or MODELS)
        report()
    else:
        report()


if __name__ == "__main__":
    main()
