"""Where a tuned model's time goes -> docs/results/ceiling.md (+ ceiling_roofline.png).

    python benchmarks/ceiling.py [--models resnet18,resnet50] [--library data/library/zoo-host.db]

For each model, on this host's ``host`` configuration, alone: every kernel's best library
schedule is rebuilt and timed again, and set against the measured peak GFLOP/s and memory
bandwidth of the configuration's hardware descriptor (a roofline: attainable = min(peak,
FLOPs/byte x bandwidth), bytes = the kernel's arguments, read or written once); then the
model end to end with those schedules, PyTorch and ONNX Runtime at the same thread count, and
the sum of weight x kernel time against the measured model time (what the Relax VM, layout
transforms and copies add). Figures merge into summary.json as ``ceiling.<model>.*``.
"""

from __future__ import annotations

import argparse
import json

from common import ROOT, merge_summary, run_meta

OUT = ROOT / "docs" / "results"
DATA = OUT / "ceiling"


def kernel_rows(model_name: str, library_path: str) -> tuple[list[dict], dict, object]:
    """Per kernel: class, weight, GFLOPs, bytes, re-timed best seconds; the descriptor; the
    imported model."""
    import numpy as np

    from transtune.frontend import from_zoo
    from transtune.hardware import describe
    from transtune.library import open_library
    from transtune.measure import (
        EVALUATOR,
        load_cpu_tensor_intrinsics,
        local_runner,
        measure_modules,
        warm_builder,
    )  # fmt: skip
    from transtune.targets import get_config
    from transtune.tasks import extract_kernels
    from transtune.transfer import postprocessors, replay

    load_cpu_tensor_intrinsics()
    config = get_config("host")
    target = config.tvm_target()
    device = describe(config)
    model = from_zoo(model_name)
    kernels = extract_kernels(model.mod, target)
    rows, mods = [], []
    with open_library(library_path, read_only=True) as lib:
        for k in kernels:
            wid = lib.find_workload(k.mod)
            best = lib.records(wid, config, 1, ok_only=True) if wid is not None else []
            schedule = None
            if best:
                schedule = replay(best[0].trace, k.mod, postprocessors(k.mod, target)).schedule
            nbytes = sum(int(np.prod(s)) * 4 for s in k.arg_shapes)
            rows.append({"kernel": k.name, "class": k.kernel_class, "weight": k.weight,
                         "gflops": k.flops / 1e9, "bytes": nbytes,
                         "scheduled": schedule is not None})  # fmt: skip
            mods.append(schedule.mod if schedule is not None else k.mod)
    runner = local_runner(EVALUATOR, num_threads=config.num_threads)
    with warm_builder(None, config.num_threads) as builder:
        for row, m in zip(rows, measure_modules(mods, target, builder, runner), strict=True):
            row["seconds"] = m.seconds
    peak, bandwidth = device.measured_peak_gflops, device.measured_bandwidth_gbs
    for row in rows:
        secs = row["seconds"] or float("nan")
        row["achieved_gflops"] = row["gflops"] / secs
        intensity = row["gflops"] * 1e9 / max(row["bytes"], 1)
        row["attainable_gflops"] = min(peak, intensity * bandwidth)
        row["peak_fraction"] = row["achieved_gflops"] / peak
    return rows, device.as_dict(), model


def end_to_end(model, library_path: str, repeat: int = 10) -> dict:
    from transtune.benchmark import benchmark
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.targets import get_config

    config = get_config("host")
    with open_library(library_path, read_only=True) as lib:
        result = benchmark(model, config, LibraryDatabase(lib, config), repeat=repeat)
    return {t.runtime: {"median_ms": t.median_ms, "spread_ms": t.spread_ms,
                        "max_rel_err": t.max_rel_err} for t in result.timings}  # fmt: skip


def run(models: list[str], library_path: str) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    for name in models:
        rows, device, model = kernel_rows(name, library_path)
        e2e = end_to_end(model, library_path)
        (DATA / f"{name}.json").write_text(json.dumps(
            {"model": name, "kernels": rows, "device": device, "end_to_end": e2e,
             "meta": run_meta()}, indent=1))  # fmt: skip
        print(name, json.dumps(e2e))


def report(models: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads((DATA / f"{m}.json").read_text()) for m in models]
    meta, device = results[0]["meta"], results[0]["device"]
    peak, bandwidth = device["measured_peak_gflops"], device["measured_bandwidth_gbs"]
    lines = [
        "# Where a tuned model's time goes (roofline)",
        "",
        f"Written by `benchmarks/ceiling.py` at commit {meta['commit']} on {meta['date']}. CPU: "
        f"{meta['cpu']} (`{meta['mcpu']}`, hardware id `{meta['hardware_id']}`), "
        f"{device['threads']} threads; TVM {meta['versions'].get('apache-tvm')}, PyTorch "
        f"{meta['versions'].get('torch')}, ONNX Runtime {meta['versions'].get('onnxruntime')}. "
        f"Schedules: the shipped library's best record per kernel (tuned with 64+ trials per "
        f"kernel), rebuilt and timed again here, alone. Measured peak {peak:.0f} GFLOP/s (FMA "
        f"chains), bandwidth {bandwidth:.0f} GB/s (triad), from the configuration's descriptor.",
        "",
        "Models: " + ", ".join(r["model"] for r in results) + ", those the shipped library "
        "holds tuned schedules for. Sum of kernels = weight x each kernel timed alone; TVM "
        "tuned = the whole model on the Relax VM (median of 10), beside PyTorch and ONNX "
        "Runtime in the same process, numerics checked (max relative error below 1e-3). The "
        "bandwidth is DRAM's (a triad over 3 x 64 MiB): kernels whose data stays in cache run "
        "above that roof.",
        "",
        "| model | kernels | sum of kernels ms | TVM tuned ms | ONNX Runtime ms | PyTorch ms | "
        "TVM / ORT | best conv/matmul % of peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    figures = {}
    best_fraction = 0.0
    for r in results:
        e2e = r["end_to_end"]
        total = sum(k["weight"] * (k["seconds"] or 0) for k in r["kernels"]) * 1e3
        heavy = [k for k in r["kernels"] if k["class"].startswith(("conv2d", "matmul"))]
        top = max((k["peak_fraction"] for k in heavy if k["seconds"]), default=0.0)
        best_fraction = max(best_fraction, top)
        tvm = e2e.get("tvm-tuned", {}).get("median_ms")
        ort = e2e.get("onnxruntime", {}).get("median_ms")
        torch_ms = e2e.get("pytorch", {}).get("median_ms")
        lines.append(
            f"| {r['model']} | {len(r['kernels'])} | {total:.2f} | {tvm:.2f} | {ort:.2f} | "
            f"{torch_ms:.2f} | {tvm / ort:.2f} | {100 * top:.0f}% |"
        )
        figures |= {f"ceiling.{r['model']}.tuned_ms": tvm,
                    f"ceiling.{r['model']}.onnxruntime_ms": ort,
                    f"ceiling.{r['model']}.pytorch_ms": torch_ms}  # fmt: skip
    for r in results:
        lines += ["", f"## {r['model']}: kernels by time share", "",
                  "| kernel | class | weight | GFLOP | ms | GFLOP/s | % of peak | "
                  "% of roofline |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        total = sum(k["weight"] * (k["seconds"] or 0) for k in r["kernels"])
        for k in sorted(r["kernels"], key=lambda k: -k["weight"] * (k["seconds"] or 0))[:12]:
            if not k["seconds"]:
                continue
            lines.append(
                f"| {k['kernel']} | {k['class']} | {k['weight']} | {k['gflops']:.3f} | "
                f"{1e3 * k['seconds']:.3f} ({100 * k['weight'] * k['seconds'] / total:.0f}%) | "
                f"{k['achieved_gflops']:.0f} | {100 * k['peak_fraction']:.0f}% | "
                f"{100 * k['achieved_gflops'] / k['attainable_gflops']:.0f}% |"
            )
    lines += ["", "![roofline](ceiling_roofline.png)", ""]
    (OUT / "ceiling.md").write_text("\n".join(lines))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        ks = [k for k in r["kernels"] if k["seconds"]]
        ax.scatter([k["gflops"] * 1e9 / k["bytes"] for k in ks],
                   [k["achieved_gflops"] for k in ks], label=r["model"], s=18)  # fmt: skip
    xs = [2**i for i in range(-4, 12)]
    ax.plot(xs, [min(peak, x * bandwidth) for x in xs], "k--", label="measured roofline")
    ax.set(xscale="log", yscale="log", xlabel="FLOPs per byte", ylabel="GFLOP/s",
           title=f"Tuned kernels on {meta['hardware_id']}")  # fmt: skip
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ceiling_roofline.png", dpi=110)
    merge_summary("ceiling", {**figures, "ceiling.best_conv_peak_fraction": best_fraction})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["run", "report"])
    parser.add_argument("--models", default="resnet18,resnet50")
    parser.add_argument("--library", default=str(ROOT / "data" / "library" / "zoo-host.db"))
    args = parser.parse_args()
    models = args.models.split(",")
    if args.step == "run":
        run(models, args.library)
    report(models)


if __name__ == "__main__":
    main()
