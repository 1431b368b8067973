"""Zoo benchmark: every zoo model at batch 1 imports, extracts kernels, compiles and matches.

For each model: kernels, classes, GFLOPs, and latency of untuned TVM (TVM's default build,
which applies no schedules), PyTorch eager and ONNX Runtime at the same thread count, with
numerics checked against PyTorch. Writes one JSON per model to docs/results/zoo/ (the run
resumes: models already there are skipped unless --force) and docs/results/zoo.md + zoo.png.
Each model is measured in a fresh process: runtimes left over from earlier models in the same
process (thread pools, sessions) were seen to slow ONNX Runtime down up to 4x.

    python benchmarks/zoo.py [--models a,b] [--repeat 3] [--force]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import file_meta, meta_lines, write_result
from rich.console import Console

from transtune import zoo
from transtune.benchmark import RTOL, benchmark
from transtune.frontend import from_zoo
from transtune.targets import get_config
from transtune.tasks import extract_kernels

OUT = Path(__file__).resolve().parent.parent / "docs" / "results"
console = Console()


def measure(name: str, repeat: int) -> dict:
    config = get_config("host")
    start = time.perf_counter()
    model = from_zoo(name)
    import_s = time.perf_counter() - start
    start = time.perf_counter()
    kernels = extract_kernels(model.mod, config)
    extract_s = time.perf_counter() - start
    result = benchmark(model, config, repeat=repeat, min_repeat_ms=100).to_json()
    result.update(
        kernels=len(kernels),
        kernel_instances=sum(k.weight for k in kernels),
        classes=len({k.kernel_class for k in kernels}),
        tvm_gflops=sum(k.flops * k.weight for k in kernels) / 1e9,
        torch_gflops=zoo.count_flops(model.torch_module, model.torch_inputs()) / 1e9,
        params=zoo.count_params(model.torch_module),
        input_shape=[list(x.shape) for x in model.inputs],
        import_seconds=import_s,
        extract_seconds=extract_s,
        repeat=repeat,
    )
    return result


def write_report(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metas = {r["model"]: file_meta(r) for r in results}
    threads = "/".join(sorted({str(r["num_threads"]) for r in results}))
    repeats = "/".join(sorted({str(r["repeat"]) for r in results}))
    cpus = ", ".join(sorted({(m or {}).get("cpu") or "an unrecorded CPU" for m in metas.values()}))
    lines = [
        "# Model zoo: import, kernels, untuned TVM vs PyTorch vs ONNX Runtime",
        "",
        f"Written by `benchmarks/zoo.py`. Target configuration `host`, {threads} threads for "
        "PyTorch and ONNX Runtime (untuned TVM code has no parallel loops, so it runs on one "
        "thread whatever the setting). "
        f"Batch 1; latency = median of {repeats} repeats after a warm-up (each "
        "repeat averages runs for at least 100 ms); the spread is min..max. "
        "*Untuned TVM* is TVM's default build, which applies no schedules (no parallelism, no "
        "vectorization): the starting point that tuning and transfer-tuning improve. "
        f"Numerics: an output matches when max|out - ref| <= {RTOL:g} x max|ref|, ref = PyTorch.",
        "",
        *meta_lines(metas),
        "",
        "| model | input | params (M) | GFLOPs | kernels (instances) | classes | untuned TVM ms "
        "| PyTorch ms | ONNX Runtime ms | numerics match (max rel. err) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        t = {x["runtime"]: x for x in r["timings"]}

        def cell(runtime, t=t):
            x = t[runtime]
            return f"{x['median_ms']:.1f} ({x['min_ms']:.1f}..{x['max_ms']:.1f})"

        tvm = t["tvm-untuned"]
        ort_ok = t["onnxruntime"]["matches"]
        lines.append(
            f"| {r['model']} | {'x'.join(map(str, r['input_shape'][0]))} | {r['params'] / 1e6:.2f} "
            f"| {r['torch_gflops']:.2f} | {r['kernels']} ({r['kernel_instances']}) "
            f"| {r['classes']} "
            f"| {cell('tvm-untuned')} | {cell('pytorch')} | {cell('onnxruntime')} "
            f"| TVM {'yes' if tvm['matches'] else 'NO'} ({tvm['max_rel_err']:.1e}), "
            f"ORT {'yes' if ort_ok else 'NO'} |"
        )
    ok = sum(
        1 for r in results for x in r["timings"] if x["runtime"] == "tvm-untuned" and x["matches"]
    )
    lines += [
        "",
        f"{ok} of {len(results)} models match PyTorch under TVM. GFLOPs are PyTorch's count "
        "(2 x multiply-accumulates of convolutions and matmuls); kernels are MetaSchedule tuning "
        "tasks after identical kernels are merged, instances count their occurrences.",
        "",
        "![latency per model](zoo.png)",
        "",
    ]
    (OUT / "zoo.md").write_text("\n".join(lines))

    names = [r["model"] for r in results]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.27
    for i, runtime in enumerate(("tvm-untuned", "pytorch", "onnxruntime")):
        values = [
            next(x["median_ms"] for x in r["timings"] if x["runtime"] == runtime) for r in results
        ]
        ax.bar([j + (i - 1) * width for j in range(len(names))], values, width, label=runtime)
    ax.set_yscale("log")
    ax.set_ylabel("latency, ms (log)")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_title(f"Batch-1 latency on {cpus}, {threads} threads")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "zoo.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated subset (default: the whole zoo)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--force", action="store_true", help="re-measure models already done")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # measure one model, in this process
    args = parser.parse_args()
    if args.one:
        result = measure(args.one, args.repeat)
        write_result(OUT / "zoo" / f"{args.one}.json", result, result.get("num_threads"))
        return
    names = args.models.split(",") if args.models else [s.name for s in zoo.list_models()]
    (OUT / "zoo").mkdir(parents=True, exist_ok=True)
    for name in names:
        path = OUT / "zoo" / f"{name}.json"
        if path.exists() and not args.force:
            continue
        console.print(f"[bold]{name}[/bold] ...")
        start = time.perf_counter()
        cmd = [sys.executable, __file__, "--one", name, "--repeat", str(args.repeat)]
        subprocess.run(cmd, check=True)
        console.print(f"  done in {time.perf_counter() - start:.0f} s")
    results = [
        json.loads((OUT / "zoo" / f"{s.name}.json").read_text())
        for s in zoo.list_models()
        if (OUT / "zoo" / f"{s.name}.json").exists()
    ]
    write_report(results)
    console.print(f"wrote {OUT / 'zoo.md'} ({len(results)} models)")


if __name__ == "__main__":
    main()
