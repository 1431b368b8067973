"""Dataset benchmark -> docs/results/dataset.md: what the shipped dataset holds, collection
throughput against stock MetaSchedule measurement, size on disk, load time and memory.

    python benchmarks/dataset.py collect [--minutes M]   # grow data/dataset (resumable)
    python benchmarks/dataset.py compare [--kernels 4] [--samples 32]
    python benchmarks/dataset.py report

``collect`` works through MODELS in order with every host configuration (the deep data of the
cost-model issue: ``benchmarks/deep.py``); ``compare`` runs both sides on the same kernels,
sample count and evaluator, each in a fresh process, alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "dataset"
DATASET = ROOT / "data" / "dataset"
# Models whose kernels take long to time (large convolutions: VGG-16, Wide ResNet-50) come last.
MODELS = [
    "resnet18", "mobilenet_v2", "bert_tiny", "resnet50", "efficientnet_b0", "mnasnet1_0",
    "alexnet", "googlenet", "mobilenet_v3_large", "bert_base", "densenet121", "bert_medium",
    "resnext50_32x4d", "mobilebert", "inception_v3", "efficientnet_b4", "vgg16",
    "wide_resnet50_2",
]  # fmt: skip
# Each pass goes through every model: (batch size, image side for CNNs, sequence length for
# BERTs); None = the model's own. The second pass adds other batch and input sizes (TenSet's
# variants) at about the first pass's work per kernel.
PASSES = [(1, None, None), (4, 160, 64)]
CONFIGS = "host,host-1core,host-avx2,host-avx2-1core,host-sse4.2,host-sse4.2-1core"
PER_KERNEL = 32
# TenSet's by-model test models (collected first by the deep and the second-CPU collections).
TEST_MODELS = ["resnet50", "mobilenet_v2", "resnext50_32x4d", "bert_tiny", "bert_base"]


def cpus() -> dict[str, list[str]]:
    """The dataset's hardware ids by the CPU they ran on (its host LLVM CPU)."""
    from transtune.dataset.store import DatasetStore

    out: dict[str, list[str]] = {}
    for hw_id, d in sorted(DatasetStore(DATASET).hardware().items()):
        out.setdefault(d["fingerprint"]["host_mcpu"], []).append(hw_id)
    return out


def full_isa(ids: list[str], threads: int | None = 2) -> str | None:
    """The full-ISA id of ``threads`` threads among a CPU's ``ids`` (None: none)."""
    from transtune.dataset.store import DatasetStore

    hardware = DatasetStore(DATASET).hardware()
    return next((i for i in ids if hardware[i]["fingerprint"]["mcpu"]
                 == hardware[i]["fingerprint"]["host_mcpu"]
                 and hardware[i]["threads"] == threads), None)  # fmt: skip


def collect(
    minutes: float, models: list[str] = MODELS, targets: str = CONFIGS, options: tuple = ()
) -> None:
    """Model by model, pass by pass (a fresh ``transtune dataset collect`` process each, with
    ``options``), until ``minutes`` have passed; what the dataset holds already is skipped."""
    deadline = time.time() + 60 * minutes
    for batch, image, sequence in PASSES:
        for model in models:
            if time.time() > deadline:
                return
            size = sequence if model.startswith(("bert", "mobilebert")) else image
            print(f"== {model} batch {batch} size {size or 'default'}", flush=True)
            command = [
                sys.executable, "-m", "transtune.cli", "dataset", "collect", "--models", model,
                "--batch-sizes", str(batch), "--targets", targets,
                "--per-kernel", str(PER_KERNEL), "--out", str(DATASET), *options,
            ]  # fmt: skip
            if size:
                command += ["--sizes", str(size)]
            if subprocess.run(command).returncode != 0:
                return  # interrupted or failed: stop here, rerun resumes


def random_samples(collected_before: float | None = None):
    """The dataset's hardware descriptors, its full-ISA configurations (hardware id -> LLVM
    CPU) and its successful random-sample records (``workload``, ``sample``, ``target``;
    those collected before the Unix time ``collected_before``, or all)."""
    import pyarrow.compute as pc

    from transtune.dataset import load_records
    from transtune.dataset.store import DatasetStore

    hardware = DatasetStore(DATASET).hardware()
    full = {i: d["fingerprint"]["host_mcpu"] for i, d in hardware.items()
            if d["fingerprint"]["mcpu"] == d["fingerprint"]["host_mcpu"]}  # fmt: skip
    table, _ = load_records(DATASET, ["workload", "sample", "status", "source", "collected"])
    ok = table.filter(pc.equal(table["status"], "ok"))
    if collected_before is not None:
        ok = ok.filter(pc.less(ok["collected"], collected_before))
    return hardware, full, ok.filter(pc.equal(ok["source"], "random"))


def deep_data(full: dict, ok) -> tuple[str | None, dict[str, int]]:
    """The deep configuration (the full-ISA one with the most deep kernels) and its deep
    kernels (more than PER_KERNEL successful random samples) with their sample counts."""
    import pyarrow.compute as pc

    deep = {}
    for hw_id in full:
        rows = ok.filter(pc.equal(ok["target"], hw_id))
        counts = rows.group_by("workload").aggregate([("sample", "count")]).to_pylist()
        deep[hw_id] = {r["workload"]: r["sample_count"] for r in counts
                       if r["sample_count"] > PER_KERNEL}  # fmt: skip
    best = max(deep, key=lambda k: len(deep[k])) if deep else None
    return best, deep.get(best, {})


def summary() -> dict:
    """The dataset's headline counts, merged into summary.json: real CPUs (distinct LLVM CPUs
    of full-ISA configurations), the fewest successful records of one, and the deep kernels
    (:func:`deep_data`) with the fewest samples among them."""
    from common import merge_summary

    hardware, full, ok = random_samples()
    per_cpu: dict[str, int] = {}
    for row in ok.group_by("target").aggregate([("sample", "count")]).to_pylist():
        cpu = hardware.get(row["target"], {}).get("fingerprint", {}).get("host_mcpu", "?")
        per_cpu[cpu] = per_cpu.get(cpu, 0) + row["sample_count"]
    best, deep = deep_data(full, ok)
    figures = {
        "dataset.cpus": len(set(full.values())),
        "dataset.records_min_per_cpu": min(per_cpu.values()) if per_cpu else 0,
        "dataset.deep_kernels": len(deep),
        "dataset.deep_min_samples": min(deep.values(), default=0),
    }
    merge_summary("dataset", figures)
    print(json.dumps({**figures, "records_per_cpu": per_cpu, "deep_config": best}))
    return figures


def pick_kernels(count: int):
    from transtune.dataset import dataset_kernels

    kernels = dataset_kernels(["resnet18"])
    kernels.sort(key=lambda dk: (-dk.kernel.flops, dk.kernel.name))
    return kernels[:count]


def side(which: str, count: int, samples: int, out: Path) -> None:
    """One side of the comparison, in this process, on configuration ``host``."""
    from common import write_result

    from transtune.dataset import EVALUATOR, collect
    from transtune.measure import load_cpu_tensor_intrinsics, local_runner
    from transtune.targets import get_config
    from transtune.tuning.session import stock_tune

    load_cpu_tensor_intrinsics()
    kernels = pick_kernels(count)
    config = get_config("host")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        if which == "stock":
            db = stock_tune([dk.kernel for dk in kernels], config, tmp, samples, samples,
                            local_runner(EVALUATOR), strategy="replay-trace",
                            cost_model="random")  # fmt: skip
            records = len(db.get_all_tuning_records())
        else:
            records = collect(str(Path(tmp) / "ds"), kernels, ["host"], samples).records
        seconds = time.perf_counter() - start
    write_result(out, {
        "side": which, "kernels": [dk.kernel.name for dk in kernels], "samples": samples,
        "records": records, "seconds": seconds, "records_per_minute": 60 * records / seconds,
    }, config.num_threads)  # fmt: skip


def compare(count: int, samples: int) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for which in ("stock", "transtune"):
        out = DATA / f"compare_{which}.json"
        subprocess.run(
            [sys.executable, __file__, "side", which, "--kernels", str(count), "--samples",
             str(samples), "--out", str(out)],
            check=True,
        )  # fmt: skip
        print(out.read_text())


def load_stats(out: Path, copies: int = 1) -> None:
    """Load time and peak memory of reading every record (run in a fresh process); with
    ``copies`` > 1, of a dataset whose record files are the shipped ones repeated that often
    (links in a temporary folder), to measure a million-record load on this data."""
    from transtune.dataset import load_records

    with tempfile.TemporaryDirectory() as tmp:
        path = DATASET
        if copies > 1:
            path = Path(tmp)
            (path / "dataset.json").symlink_to(DATASET / "dataset.json")
            for part in DATASET.glob("records/*/part-*.parquet"):
                folder = path / "records" / part.parent.name
                folder.mkdir(parents=True, exist_ok=True)
                for i in range(copies):
                    (folder / f"part-copy{i}-{part.name[5:]}").symlink_to(part)
        before = _memory_kib("VmRSS")
        start = time.perf_counter()
        table, report = load_records(path)
        seconds = time.perf_counter() - start
        peak = _memory_kib("VmHWM")
    from common import write_result  # imported only now: nothing added to the memory figures

    write_result(out, {
        "records": len(table), "copies": copies, "seconds": seconds,
        "peak_rss_mib": peak / 1024, "rss_before_mib": before / 1024,
        "arrow_mib": table.nbytes / 2**20, "skipped": report.summary(),
    })  # fmt: skip


def _memory_kib(field: str) -> int:
    """This process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), in KiB.
    (``getrusage``'s peak is no use here: Linux carries it over from the parent process.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def variants() -> dict[str, tuple[int, int]]:
    """Per model variant tag: (kernels with records, kernels)."""
    from transtune.dataset import load_records
    from transtune.dataset.store import DatasetStore

    measured = set(load_records(DATASET, ["workload"])[0]["workload"].to_pylist())
    counts: dict[str, list[int]] = {}
    for workload, tags in DatasetStore(DATASET).occurrences().items():
        for tag in tags:
            entry = counts.setdefault(tag, [0, 0])
            entry[0] += workload in measured
            entry[1] += 1
    return {tag: (done, total) for tag, (done, total) in sorted(counts.items())}


def json_size(out: Path, target: str = "host", limit: int = 2000) -> None:
    """Bytes per record of the same records as MetaSchedule/TenSet-style JSON lines."""
    from common import write_result

    from transtune.dataset.info import export_json
    from transtune.targets import hardware_name

    with tempfile.TemporaryDirectory() as tmp:
        count = export_json(DATASET, tmp, hardware_name(target), limit=limit)
        size = sum(p.stat().st_size for p in Path(tmp).glob("*.json"))
    write_result(out, {"records": count, "bytes": size, "bytes_per_record": size / count})


def report() -> None:
    from common import meta_lines

    from transtune.dataset import dataset_info
    from transtune.dataset.info import collection_rate

    DATA.mkdir(parents=True, exist_ok=True)
    info = dataset_info(DATASET)
    copies = -(-1_000_000 // max(1, info["records"]))  # enough copies for a million records
    for step, extra in (("load", []), ("load_million", ["--copies", str(copies)]),
                        ("json", [])):  # fmt: skip
        subprocess.run([sys.executable, __file__, step.split("_")[0], *extra, "--out",
                        str(DATA / f"{step}.json")], check=True)  # fmt: skip
    load = json.loads((DATA / "load.json").read_text())
    million = json.loads((DATA / "load_million.json").read_text())
    js = json.loads((DATA / "json.json").read_text())
    per_record = info["bytes_on_disk"] / max(1, info["records"])
    collected, seconds = collection_rate(DATASET)
    cpus = sorted({counts["cpu"] for counts in info["by_hardware"].values()})
    stats = {"load": load.get("meta"), "million-record load": million.get("meta"),
             "JSON size": js.get("meta")}  # fmt: skip
    lines = [
        "# Dataset: measured schedules of zoo kernels on this host's configurations",
        "",
        f"Written by `benchmarks/dataset.py`. Records measured on {', '.join(cpus) or '?'} (CPU "
        "and LLVM CPU, as the dataset's hardware descriptors record them); TVM 0.27.0. "
        "Collected with `transtune dataset collect --models M "
        f"--targets {CONFIGS} --per-kernel {PER_KERNEL}` for each model in turn, in passes at "
        + ", then at ".join(
            f"batch {b} and "
            + (f"{i}-pixel images / {q}-token sequences" if i else "the model's input size")
            for b, i, q in PASSES
        )
        + " (`python benchmarks/dataset.py collect`), into `data/dataset/`; the model "
        "variants below say how far the passes have got.",
        "",
        "The six targets are *configurations of one physical CPU*: the full ISA, code "
        "restricted to AVX2 (`-mcpu=haswell`) and to SSE4.2 (`-mcpu=nehalem`), each on 2 "
        "threads and on 1 thread (one binary per ISA level, timed on both). "
        "Evaluator for every record: "
        f"{json.dumps(info['evaluator'])}; all repeats are kept.",
        "",
        "| | |",
        "|---|---|",
        f"| records | {info['records']:,} ({info['ok_records']:,} ok; {info['by_status']}) |",
        f"| kernels | {info['kernels']} ({info['classes']} classes) |",
        f"| collection rate (all configurations) | {60 * collected / max(seconds, 1):.0f} "
        f"records/min over {seconds / 3600:.1f} h of collection |",
        f"| models | {len(info['models'])}: {', '.join(info['models'])} |",
        f"| measurement noise (median CV of repeats) | {info['median_cv']:.3%} |",
        f"| size on disk | {info['bytes_on_disk'] / 2**20:.1f} MiB, {per_record:.0f} B/record "
        f"({per_record * 1e6 / 2**30:.2f} GiB per million records) |",
        f"| same records as MetaSchedule JSON lines | {js['bytes_per_record']:.0f} B/record "
        f"(sample of {js['records']}; {js['bytes_per_record'] / per_record:.0f}x larger) |",
        *[
            f"| load {what} (fresh process) | {r['seconds']:.2f} s, peak RSS "
            f"{r['peak_rss_mib']:.0f} MiB ({r['rss_before_mib']:.0f} MiB before: interpreter and "
            f"imports; Arrow table {r['arrow_mib']:.0f} MiB) |"
            for what, r in (
                ("every record", load),
                (
                    f"{million['records']:,} records (the record files linked "
                    f"{million['copies']}x)",
                    million,
                ),
            )
        ],
        "",
        *meta_lines(stats, "Load and size figures"),
    ]
    lines += ["", "Model variants (tag = model@batch and size) and how many of their kernels are "
              "measured (a kernel shared by several variants is measured once):", "",
              "; ".join(f"{tag} {done}/{total}" for tag, (done, total) in variants().items()),
              "", "| target | records | ok | kernels | descriptor: bandwidth GB/s, peak "
              "GFLOP/s |", "|---|---|---|---|---|"]  # fmt: skip
    for target, counts in info["by_hardware"].items():
        d = info["hardware"].get(target, {})
        lines.append(
            f"| {target} | {counts['records']:,} | {counts['ok']:,} | {counts['kernels']} "
            f"| {d.get('measured_bandwidth_gbs', 0):.1f}, {d.get('measured_peak_gflops', 0):.1f} |"
        )
    stock, ours = (DATA / "compare_stock.json", DATA / "compare_transtune.json")
    if stock.exists() and ours.exists():
        s, t = json.loads(stock.read_text()), json.loads(ours.read_text())
        lines += [
            "",
            "## Collection throughput against stock MetaSchedule",
            "",
            f"Same {len(s['kernels'])} ResNet-18 kernels, {s['samples']} sampled schedules each, "
            "configuration `host`, the evaluator above; stock = `ms.tune_tasks` with the "
            "`replay-trace` strategy (random samples of the design space), `LocalBuilder`, "
            "`LocalRunner`; transtune = `collect` (warm builder, features extracted too).",
            "",
            "| | records | seconds | records/min |",
            "|---|---|---|---|",
            *[
                f"| {name} | {r['records']} | {r['seconds']:.0f} | {r['records_per_minute']:.0f} |"
                for name, r in (("stock MetaSchedule", s), ("transtune collect", t))
            ],
            f"| ratio | | | {t['records_per_minute'] / s['records_per_minute']:.2f}x |",
            "",
            *meta_lines({"stock": s.get("meta"), "transtune": t.get("meta")}),
        ]
    (OUT / "dataset.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "step", choices=["collect", "summary", "compare", "side", "load", "json", "report"]
    )
    parser.add_argument("which", nargs="?")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--kernels", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.step == "collect":
        collect(args.minutes)
    elif args.step == "summary":
        summary()
    elif args.step == "compare":
        compare(args.kernels, args.samples)
    elif args.step == "side":
        side(args.which, args.kernels, args.samples, args.out)
    elif args.step == "load":
        load_stats(args.out, args.copies)
    elif args.step == "json":
        json_size(args.out)
    else:
        report()


if __name__ == "__main__":
    main()
