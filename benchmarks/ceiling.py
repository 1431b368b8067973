"""Where a tuned model's time goes, and what raises it -> docs/results/ceiling.md (+ plots).

    python benchmarks/ceiling.py run [MODEL ...] [--lowering L] [--library L]   # alone
    python benchmarks/ceiling.py levers [MODEL ...] [--levers A,B]   # lowering, evaluator; alone
    python benchmarks/ceiling.py rerank [MODEL ...]   # the re-ranking lever; alone
    python benchmarks/ceiling.py report

``run``: for each model, on this host's ``host`` configuration, alone: every kernel's best
schedule from its reference library (``benchmarks/reference.py``, the converged queue, in the
given lowering; or one ``--library`` for all) is rebuilt and timed again, and set against the
measured peak GFLOP/s and memory bandwidth of the configuration's hardware descriptor (the
better of two measurements, before and after the kernels; a roofline: attainable =
min(peak, FLOPs/byte x bandwidth), bytes = the kernel's arguments, read or written once);
then the model end to end with those schedules, PyTorch and ONNX Runtime at the same thread
count, and the sum of weight x kernel time against the measured model time (what the Relax
VM, layout transforms and copies add), each call's time inside the model
(``CompiledModel.profile``) and ONNX Runtime's profile by operator. ``levers``: each model
tuned with BUDGET candidates per kernel under each lever of LEVERS (a lowering, and the
evaluator the candidates were timed with; ``data/library/levers/``, resumable), then timed
end to end with each beside ONNX Runtime and PyTorch, in one process.
Figures merge into summary.json as ``ceiling.<model>.*``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import reference
from common import ROOT, merge_summary, meta_lines, run_meta, write_result

OUT = ROOT / "docs" / "results"
DATA = OUT / "ceiling"
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "resnext50_32x4d", "efficientnet_b0",
          "bert_base"]  # fmt: skip
REPEAT = 10
BUDGET = 64  # per-kernel candidates at which the levers are compared as equals
RERANK_TOP, RERANK_KERNELS, RERANK_ROUNDS = 3, 10, 10  # the re-ranking lever (``rerank``)
# The levers: name -> (lowering, evaluator the tuning timed candidates with: "warm",
# MetaSchedule's default, or "flush", cold weights: ``transtune.measure.FLUSH_EVALUATOR``).
LEVERS = {"nchw": ("nchw", "warm"), "nhwc": ("nhwc", "warm"),
          "nhwc-prepack": ("nhwc-prepack", "warm"),
          "nhwc-prepack-flush": ("nhwc-prepack", "flush"),
          "nhwc-prepack-fastmath": ("nhwc-prepack-fastmath", "warm")}  # fmt: skip


def kernel_rows(model_name: str, library_path: Path, config) -> tuple[list[dict], dict, object]:
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
    from transtune.tasks import extract_kernels, multiply_add_flops

    load_cpu_tensor_intrinsics()
    target = config.tvm_target()
    device = describe(config)
    model = from_zoo(model_name)
    kernels = extract_kernels(model.mod, config)
    rows, mods = [], []
    with open_library(library_path, read_only=True) as lib:
        for k in kernels:
            best = _replayed(k, lib, config, 1)
            nbytes = sum(int(np.prod(s)) * 4 for s in k.arg_shapes)
            # A reduction's multiply-adds where it has one (what the FMA peak bounds), else
            # every float operation TVM counts.
            flops = multiply_add_flops(k.mod) or k.flops
            rows.append({"kernel": k.name, "class": k.kernel_class, "weight": k.weight,
                         "gflops": flops / 1e9, "bytes": nbytes,
                         "scheduled": bool(best)})  # fmt: skip
            mods.append(best[0][1] if best else k.mod)
    runner = local_runner(EVALUATOR, num_threads=config.num_threads)
    with warm_builder(None, config.num_threads) as builder:
        for row, m in zip(rows, measure_modules(mods, target, builder, runner), strict=True):
            row["seconds"] = m.seconds
    # Measured again after the kernels, the better of the two: one measurement on this noisy
    # host can fall on a slow moment (209 GFLOP/s once, with kernels at 219 in the same run).
    again = describe(config)
    peak = max(device.measured_peak_gflops, again.measured_peak_gflops)
    bandwidth = max(device.measured_bandwidth_gbs, again.measured_bandwidth_gbs)
    device = dataclasses.replace(
        device, measured_peak_gflops=peak, measured_bandwidth_gbs=bandwidth
    )
    for row in rows:
        secs = row["seconds"] or float("nan")
        row["achieved_gflops"] = row["gflops"] / secs
        intensity = row["gflops"] * 1e9 / max(row["bytes"], 1)
        row["attainable_gflops"] = min(peak, intensity * bandwidth)
        row["peak_fraction"] = row["achieved_gflops"] / peak
    return rows, device.as_dict(), model


def _replayed(kernel, lib, config, top_k: int) -> list[tuple]:
    """(record, scheduled module) of the ``top_k`` best records of ``kernel`` in ``lib``."""
    from transtune.transfer import postprocessors, replay

    wid = lib.find_workload(kernel.mod)
    records = lib.records(wid, config, top_k, ok_only=True) if wid is not None else []
    post = postprocessors(kernel.mod, config.tvm_target())
    return [(r, replay(r.trace, kernel.mod, post).schedule.mod) for r in records]


def rerank(models: list[str], lowering: str) -> None:
    """The re-ranking lever: does a kernel's best record stay its best when its RERANK_TOP
    best records are timed again, interleaved? Chosen on one pass of RERANK_ROUNDS rounds,
    judged on a second, independent one (so that a lucky pass does not judge itself)."""
    import statistics

    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.measure import (
        EVALUATOR,
        load_cpu_tensor_intrinsics,
        local_runner,
        measure_on,
        warm_builder,
    )  # fmt: skip
    from transtune.tasks import extract_kernels

    load_cpu_tensor_intrinsics()
    config = reference.config(lowering)
    for name in models:
        path = reference.folder(lowering) / f"{name}.db"
        kernels = extract_kernels(from_zoo(name).mod, config)
        with open_library(path, read_only=True) as lib:
            tops = [(k, _replayed(k, lib, config, RERANK_TOP)) for k in kernels]
        tops = [t for t in tops if len(t[1]) > 1]  # the largest shares of the model's time
        tops.sort(key=lambda t: -t[0].weight * t[1][0][0].mean_secs)
        tops = tops[:RERANK_KERNELS]
        mods = [mod for _, recs in tops for _, mod in recs]
        runner = local_runner(EVALUATOR, num_threads=config.num_threads)
        with warm_builder(None, config.num_threads) as builder:
            passes = [measure_on(mods, config.tvm_target(), builder, [runner] * RERANK_ROUNDS)
                      for _ in range(2)]  # fmt: skip
        medians = [[statistics.median(m.seconds or float("inf") for m in row) for row in p]
                   for p in passes]  # fmt: skip
        rows, at = [], 0
        for k, recs in tops:
            first, second = (m[at : at + len(recs)] for m in medians)
            at += len(recs)
            pick, again = (min(range(len(recs)), key=m.__getitem__) for m in (first, second))
            rows.append({"kernel": k.name, "weight": k.weight,
                         "stored_ms": [1e3 * r.mean_secs for r, _ in recs],
                         "first_ms": [1e3 * x for x in first],
                         "second_ms": [1e3 * x for x in second], "pick": pick,
                         "agrees": pick == again})  # fmt: skip
        best = sum(r["weight"] * r["second_ms"][0] for r in rows)
        picked = sum(r["weight"] * r["second_ms"][r["pick"]] for r in rows)
        write_result(DATA / f"rerank-{name}.json",
                     {"model": name, "lowering": lowering, "library": str(path.relative_to(ROOT)),
                      "top": RERANK_TOP, "rounds": RERANK_ROUNDS, "kernels": rows,
                      "stored_best_ms": best, "picked_ms": picked},
                     config.num_threads)  # fmt: skip
        print(
            f"{name}: the stored best records {best:.2f} ms, re-ranked {picked:.2f} ms (second "
            f"pass, weighted); picks agree on {sum(r['agrees'] for r in rows)} of {len(rows)}"
        )


def end_to_end(model, config, library_path: Path, beside: tuple[str, ...] = ()):
    """The model with ``library_path``'s schedules timed beside PyTorch and ONNX Runtime
    (interleaved), and beside its builds in the ``beside`` lowerings (their reference
    libraries; labelled ``tvm-<lowering>``); then where its inference goes (each call in the
    model, the Relax VM's builtins among them) and where ONNX Runtime's goes (its profiler,
    by node and operator)."""
    import contextlib

    from transtune.benchmark import compare, onnxruntime_profile
    from transtune.compile import compile_model
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase

    with contextlib.ExitStack() as stack:
        lib = stack.enter_context(open_library(library_path, read_only=True))
        database = LibraryDatabase(lib, config)
        builds = {"tvm-tuned": (config, database)}
        for lowering in beside:
            other = reference.config(lowering)
            path = reference.folder(lowering) / f"{model.name}.db"
            builds[f"tvm-{lowering}"] = (
                other,
                LibraryDatabase(stack.enter_context(open_library(path, True)), other),
            )
        timings = _timings(compare(model, builds, REPEAT))
        profile = compile_model(model, config, database).profile(model.inputs, REPEAT)
    ort = onnxruntime_profile(model, config.num_threads, REPEAT)
    return timings, profile, {**ort, "nodes": ort["nodes"][:20]}


def _timings(result) -> dict:
    return {t.runtime: {"median_ms": t.median_ms, "spread_ms": list(t.spread_ms),
                        "max_rel_err": t.max_rel_err} for t in result.timings}  # fmt: skip


def tuning(library_path: Path, model: str) -> dict:
    """Trials, tuning seconds and how the model's tuning in the library finished."""
    from transtune.library import open_library

    with open_library(library_path, read_only=True) as lib:
        run_id = lib.tune_run(model)
        curve = lib.curve(run_id) if run_id else []
        finished = lib.get_meta(reference.FINISHED)
    trials, seconds = (curve[-1][0], curve[-1][1]) if curve else (None, None)
    return {"trials": trials, "seconds": seconds, "finished": finished}


def run(models: list[str], lowering: str, library: str | None, beside: tuple[str, ...] = ()):
    """Each model's kernels and end-to-end time with ``lowering``'s reference library (or
    ``library``), beside its builds in the ``beside`` lowerings."""
    DATA.mkdir(parents=True, exist_ok=True)
    config = reference.config(lowering)
    for name in models:
        path = Path(library) if library else reference.folder(lowering) / f"{name}.db"
        if not path.is_file():
            print(f"{name}: no library at {path}; skipped")
            continue
        rows, device, model = kernel_rows(name, path, config)
        e2e, profile, ort = end_to_end(model, config, path, beside)
        # Earlier runs of the same library stay as repeats (their end-to-end times only).
        out = DATA / f"{name}.json"
        last = json.loads(out.read_text()) if out.is_file() else {}
        repeats = []
        if last.get("library") == str(path.relative_to(ROOT)):
            repeats = [*last.get("repeats", []),
                       {"end_to_end": last["end_to_end"], "meta": last["meta"]}]  # fmt: skip
        write_result(out,
                     {"model": name, "lowering": lowering, "library": str(path.relative_to(ROOT)),
                      "tuning": tuning(path, name), "kernels": rows, "device": device,
                      "end_to_end": e2e, "tvm_profile": profile, "ort_profile": ort,
                      "repeats": repeats},
                     config.num_threads)  # fmt: skip
        print(name, json.dumps(e2e))


def lever_library(name: str, lever: str) -> Path:
    """The library of ``name`` tuned with BUDGET candidates per kernel under ``lever``."""
    hardware = reference.config(LEVERS[lever][0]).name
    return ROOT / "data" / "library" / "levers" / hardware / lever / f"{name}.db"


def lever_tune(name: str, lever: str) -> None:
    """Tune ``name`` under ``lever`` with BUDGET candidates per kernel (resumable), then keep
    the whole search archived and the library compacted, as the reference queue does."""
    from transtune.library import open_library
    from transtune.measure import EVALUATOR, FLUSH_EVALUATOR, SyncRunner, local_runner
    from transtune.workflow import Workflow

    lowering, evaluator = LEVERS[lever]
    config = reference.config(lowering)
    runner = SyncRunner(local_runner({"warm": EVALUATOR, "flush": FLUSH_EVALUATOR}[evaluator],
                                     num_threads=config.num_threads))  # fmt: skip
    path = lever_library(name, lever)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_library(path) as lib:
        with Workflow(name, lib, config, runner=runner) as wf:
            result = wf.tune(trials=BUDGET * len(wf.kernels), per_kernel=BUDGET,
                             seed=reference.SEED)  # fmt: skip
        print(f"{name}, {lever}: {result.stopped}, est. {1e3 * result.estimated_latency:.2f} "
              f"ms; {reference.archive(lib, path)}", flush=True)  # fmt: skip
        lib.compact(reference.TOP_K)


def levers(models: list[str], chosen: list[str]) -> None:
    """The levers (data layout, prepacked weights, fast math, the tuning's evaluator), each
    measured alone on the same kernels: every model tuned with BUDGET candidates per kernel
    under each ``chosen`` lever (each in a fresh process, skipped where done), then built with
    each library and timed end to end in one process beside ONNX Runtime and PyTorch."""
    import contextlib
    import subprocess
    import sys

    from transtune.benchmark import compare
    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase

    DATA.mkdir(parents=True, exist_ok=True)
    for name in models:
        tuned = {}
        for lever in chosen:
            path = lever_library(name, lever)
            if not path.is_file() or tuning(path, name)["trials"] is None:
                subprocess.run([sys.executable, __file__, "lever-tune", name, "--lever", lever],
                               check=True)  # fmt: skip
            with open_library(path, read_only=True) as lib:
                est, trials = reference.estimate_at(lib, name)
            tuned[lever] = {"est_ms": 1e3 * est, "kernel_trials": trials, **tuning(path, name)}
        with contextlib.ExitStack() as stack:
            builds = {}
            for lever in tuned:
                config = reference.config(LEVERS[lever][0])
                lib = stack.enter_context(open_library(lever_library(name, lever), True))
                builds[f"tvm-{lever}"] = (config, LibraryDatabase(lib, config))
            result = compare(from_zoo(name), builds, REPEAT)
        e2e = _timings(result)
        path = DATA / f"levers-{name}.json"
        runs = json.loads(path.read_text()).get("runs", []) if path.is_file() else []
        meta = run_meta()
        runs.append({"end_to_end": e2e, "meta": meta})  # each rerun adds a repeat
        # The file's own "meta" is its latest run's (the one that wrote it).
        write_result(path, {"model": name, "budget": BUDGET, "levers": tuned, "runs": runs,
                            "meta": meta})  # fmt: skip
        print(name, json.dumps({k: v["median_ms"] for k, v in e2e.items()}))


def _ms(timing: dict | None) -> str:
    if not timing:
        return "-"
    low, high = timing["spread_ms"]
    return f"{timing['median_ms']:.2f} ({low:.1f}-{high:.1f})"


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [json.loads((DATA / f"{m}.json").read_text()) for m in MODELS
               if (DATA / f"{m}.json").is_file()]  # fmt: skip
    lever_runs = [json.loads((DATA / f"levers-{m}.json").read_text()) for m in MODELS
                  if (DATA / f"levers-{m}.json").is_file()]  # fmt: skip
    first, device = results[0]["model"], results[0]["device"]
    peak, bandwidth = device["measured_peak_gflops"], device["measured_bandwidth_gbs"]
    lines = [
        "# Where a tuned model's time goes, and what raises the ceiling",
        "",
        f"Written by `benchmarks/ceiling.py report`. Measured peak {peak:.0f} GFLOP/s (FMA "
        f"chains), bandwidth {bandwidth:.0f} GB/s (triad), from the configuration's descriptor "
        f"in {first}'s run (each model's % of peak and of roofline use its own run's). "
        "Each row names the commit and date it was measured at, the lowering (data layout, "
        "weights, fast math; see the levers) and the library its schedules came from (best "
        "record each), with the trials and tuning seconds that library's tuning took "
        "(*unfinished*: its converged queue has not finished yet: more tuning may "
        "still lower its latency).",
        "",
        *meta_lines({r["model"]: r.get("meta") for r in results}),
        "",
        "Sum of kernels = weight x each kernel rebuilt and timed alone; TVM tuned = the whole "
        f"model on the Relax VM (median of {REPEAT}, min-max in brackets), beside PyTorch and "
        "ONNX Runtime in the same process (interleaved, `benchmark.compare`, in runs since "
        "2026-12-01), numerics checked (max relative error below 1e-3); TVM / ORT: the "
        "ratio of medians in this run, then in earlier runs of the same library (newest "
        "first, since 2026-12-04). "
        "The bandwidth is DRAM's (a triad over 3 x 64 MiB): kernels whose data stays in cache "
        "run above that roof. GFLOP: 2 x the multiply-adds of a kernel's convolution or "
        "matmul (in runs since 2026-12-04 16:00; before, TVM's count of every float "
        "operation, its epilogue's too, within a few percent for these models' kernels then, "
        "but 1.5-2x with fast math's sigmoid, which had not yet been fused into them), "
        "TVM's count of every float operation for a kernel without a reduction; for a "
        "Winograd kernel, the multiply-adds its TIR spells out (transforms and matrix "
        "multiplications: 0.105 GFLOP for ResNet's 56x56x64 convolution, whose direct form "
        "does 0.231), more than it executes once the transforms' products by 0 and 1 fold "
        "away, so its % of peak can pass 100 and the best conv/matmul column counts direct "
        "kernels only.",
        "",
        "| model | lowering | schedules from | tuning trials (s) | sum of kernels ms "
        "| TVM tuned ms | ONNX Runtime ms | PyTorch ms | TVM / ORT | best conv/matmul % of peak "
        "| measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    figures = {}
    best_fraction = 0.0
    for r in results:
        e2e, tuned = r["end_to_end"], r.get("tuning", {})
        total = sum(k["weight"] * (k["seconds"] or 0) for k in r["kernels"]) * 1e3
        # Direct convolutions and matmuls (a Winograd kernel's count overstates its work).
        heavy = [k for k in r["kernels"] if k["class"].startswith(("conv2d+", "matmul"))
                 or k["class"] == "conv2d"]  # fmt: skip
        top = max((k["peak_fraction"] for k in heavy if k["seconds"]), default=0.0)
        best_fraction = max(best_fraction, top)
        tvm, ort, torch_ms = (e2e.get(x, {}).get("median_ms")
                              for x in ("tvm-tuned", "onnxruntime", "pytorch"))  # fmt: skip
        trials = f"{tuned['trials']} ({tuned['seconds']:.0f})" if tuned.get("trials") else "-"
        if tuned.get("trials") and not tuned.get("finished"):
            trials += ", unfinished"
        lines.append(
            f"| {r['model']} | {r.get('lowering', 'nchw')} | "
            f"`{r.get('library', 'data/library/zoo-host.db')}` | {trials} | {total:.2f} | "
            f"{_ms(e2e.get('tvm-tuned'))} | {_ms(e2e.get('onnxruntime'))} | "
            f"{_ms(e2e.get('pytorch'))} | {_ratios(r)} | {100 * top:.0f}% | "
            f"{r['meta']['commit']}, {r['meta']['date']} |"
        )
        figures |= {f"ceiling.{r['model']}.tuned_ms": tvm,
                    f"ceiling.{r['model']}.onnxruntime_ms": ort,
                    f"ceiling.{r['model']}.pytorch_ms": torch_ms,
                    f"ceiling.{r['model']}.tuning_seconds": tuned.get("seconds")}  # fmt: skip
    lines += _beside_lines(results)
    lines += _lever_lines(lever_runs)
    lines += _rerank_lines([json.loads((DATA / f"rerank-{m}.json").read_text()) for m in MODELS
                            if (DATA / f"rerank-{m}.json").is_file()])  # fmt: skip
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
                f"{_percent(k['achieved_gflops'], k['attainable_gflops'])} |"
            )
        lines += _profile_lines(r)
    lines += ["", "![roofline](ceiling_roofline.png)", ""]
    (OUT / "ceiling.md").write_text("\n".join(lines))
    hardware = sorted({r["meta"].get("hardware_id", "?") for r in results})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        ks = [k for k in r["kernels"] if k["seconds"]]
        ax.scatter([k["gflops"] * 1e9 / k["bytes"] for k in ks],
                   [k["achieved_gflops"] for k in ks], label=r["model"], s=18)  # fmt: skip
    xs = [2**i for i in range(-4, 12)]
    ax.plot(xs, [min(peak, x * bandwidth) for x in xs], "k--", label="measured roofline")
    ax.set(xscale="log", yscale="log", xlabel="FLOPs per byte", ylabel="GFLOP/s",
           title=f"Tuned kernels on {', '.join(hardware)}")  # fmt: skip
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ceiling_roofline.png", dpi=110)
    _lever_plot(lever_runs, plt)
    merge_summary("ceiling", {**figures, "ceiling.best_conv_peak_fraction": best_fraction})


def _ratios(r: dict) -> str:
    """TVM / ONNX Runtime of a model's run, then of its earlier runs of the same library."""
    runs = [r["end_to_end"], *(x["end_to_end"] for x in reversed(r.get("repeats", [])))]
    ratios = [_vs_ort(e2e, "tvm-tuned") for e2e in runs]
    return f"{ratios[0]:.2f}" + (f" (earlier: {', '.join(f'{x:.2f}' for x in ratios[1:])})"
                                 if len(ratios) > 1 else "")  # fmt: skip


def _percent(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``; "-" where ``whole`` is 0 (a kernel that does no
    arithmetic has no FLOP roofline)."""
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _profile_lines(r: dict) -> list[str]:
    """Where an inference goes, in the model against alone, and ONNX Runtime's by operator."""
    profile, ort = r.get("tvm_profile"), r.get("ort_profile")
    if not profile:
        return []
    alone = {k["kernel"]: k["seconds"] for k in r["kernels"] if k["seconds"]}
    calls = {n: v for n, v in profile.items() if n != "total"}
    builtins = sum(v["seconds"] for n, v in calls.items() if n.startswith("vm.builtin"))
    total = profile["total"]["seconds"]
    e2e = r["end_to_end"].get("tvm-tuned", {}).get("median_ms", float("nan"))
    lines = ["", f"In the model (one inference, the median of {REPEAT}; instrumented around each "
             f"call, which costs time itself: {1e3 * total:.2f} ms against {e2e:.2f} ms "
             "uninstrumented, the callbacks and the thread pool idling between calls): kernels "
             f"{1e3 * (sum(v['seconds'] for v in calls.values()) - builtins):.2f} ms, the VM's "
             f"builtins (allocation, checks) {1e3 * builtins:.2f} ms, the rest between calls. "
             "Per call: in the model, and the kernel timed by itself (warm caches) where the "
             "call's name is a tuned kernel's.", "",
             "| call | calls | in the model ms (per call) | alone ms |",
             "|---|---|---|---|"]  # fmt: skip
    for name, v in sorted(calls.items(), key=lambda kv: -kv[1]["seconds"])[:12]:
        # A build renames some kernels: a prepacked copy, or a uniquifying number.
        names = (name, name.removesuffix("_prepacked"), re.sub(r"\d+$", "", name))
        kernel = next((n for n in names if n in alone), None)
        solo = f"{1e3 * alone[kernel]:.3f}" if kernel else "-"
        lines.append(f"| {name} | {v['calls']} | {1e3 * v['seconds']:.3f} "
                     f"({1e3 * v['seconds'] / v['calls']:.3f}) | {solo} |")  # fmt: skip
    if ort:
        ops = ", ".join(f"{op} {1e3 * secs:.2f}" for op, secs in list(ort["by_op"].items())[:6])
        lines += ["", f"ONNX Runtime's profile: {1e3 * ort['total']:.2f} ms an inference; "
                  f"by operator, ms: {ops}."]  # fmt: skip
    return lines


def _beside_lines(results: list[dict]) -> list[str]:
    """Rows measured beside a model's build in another lowering (``run --beside``): both
    libraries' builds and ONNX Runtime timed interleaved in one process."""
    rows = [(r, label) for r in results for label in r["end_to_end"]
            if label.startswith("tvm-") and label != "tvm-tuned"]  # fmt: skip
    if not rows:
        return []
    lines = ["", "Side by side (`ceiling.py run --beside`): the row's build and the model built "
             "in another lowering from that lowering's reference library, timed interleaved in "
             "the same run, beside ONNX Runtime.", "",
             "| model | lowering | ms | beside it | ms | ratio | ONNX Runtime ms | measured |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r, label in rows:
        e2e = r["end_to_end"]
        tvm, other = e2e["tvm-tuned"]["median_ms"], e2e[label]["median_ms"]
        lines.append(f"| {r['model']} | {r['lowering']} | {_ms(e2e['tvm-tuned'])} | "
                     f"{label.removeprefix('tvm-')} | {_ms(e2e[label])} | {tvm / other:.2f} | "
                     f"{_ms(e2e.get('onnxruntime'))} | {r['meta']['commit']}, "
                     f"{r['meta']['date']} |")  # fmt: skip
    return lines


def _lever_lines(runs: list[dict]) -> list[str]:
    lines = [
        "",
        "## Levers",
        "",
        "**Lowering** (`--layout`, `--prepack`; both kept in every record's key): the data "
        "layout convolutions are lowered in (NCHW as imported, or NHWC with HWIO weights), and "
        "whether each kernel's weights are repacked for its schedule (MetaSchedule's "
        "`RewriteLayout`, folded into the constants at compile time). **Fast math** "
        "(`--fast-math`, `nhwc-prepack-fastmath`): exp, erf, tanh, sigmoid, softmax and GELU "
        "computed by TVM's vectorisable approximations (`transtune.fastmath`; LLVM on x86 "
        "calls scalar libm for each element otherwise); the kernels it rewrites are other "
        "workloads, the rest are the same programs. **Fusion** (since commit 0514d0c, "
        "2026-12-04): under NHWC, ReLU6 and fast math's sigmoid are the "
        "convolution's epilogue; before, Relax's `ConvertLayout` (no rule for `clip`, and "
        "fast math's TIR is opaque to it) wrapped each in a transpose pair, a "
        "`transpose+activation+transpose` kernel at 2% of peak: 37% of MobileNetV2's summed "
        "kernel time (1.84 of 4.92 ms) and 54% of EfficientNet-B0's (6.03 of 11.20 ms) in "
        "their last measurement before the fix (commit 632b2b4, Zen 4: 6.32 and 12.73 ms "
        "against ONNX Runtime's 4.69 and 8.30). **Winograd** (`--winograd`, "
        "`nhwc-prepack-winograd`, since 2026-12-04; `transtune.winograd`): stride-1 3x3 "
        "convolutions on images of at least 32 output tiles of 4x4 (ResNets' first two "
        "stages) computed as Winograd's F(4x4, 3x3), 4x fewer multiply-adds in their matrix "
        "multiplications, weights transformed once when the model is lowered; the smaller "
        "images stay direct: their transformed weights (4x the direct ones) are reused by too "
        "few tiles (7x7x512: 1.53 ms against 1.03 direct, after 32 candidates). Its library "
        "starts as a copy of the converged `nhwc-prepack` one, whose other kernels are the "
        "same programs, and tunes the new kernels only (the side-by-side table). "
        "**Evaluator**: how the "
        "tuning timed each candidate: warm (MetaSchedule's default: back-to-back runs for "
        "100 ms, caches hot) or flush (`nhwc-prepack-flush`: 20 runs each after every argument "
        "but the input is flushed from the caches, as weights stream from memory inside a "
        "model). Each model was tuned from scratch under each lever with "
        f"{BUDGET} candidates per kernel (`ceiling.py levers`: same code, seed and runner "
        "otherwise), then built with each library and timed end to end in one process beside "
        f"ONNX Runtime and PyTorch, interleaved ({REPEAT} rounds, each timing every runtime "
        "once in turn, so that a drift of the host falls on all alike; numerics of every "
        "build checked against PyTorch). Est. = sum of weight x each kernel's best time "
        "measured during tuning (optimistic: the best of many noisy measurements; with the "
        "flush evaluator, cold-weight times, not comparable with the warm rows').",
        "",
        "| model | lever | est. ms | tuning trials (s) | end to end ms | ONNX Runtime ms "
        "| PyTorch ms | TVM / ORT, each run | measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        last = r["runs"][-1]
        e2e = last["end_to_end"]
        for lever, d in r["levers"].items():
            label = f"tvm-{lever}"
            ratios = ", ".join(f"{_vs_ort(run['end_to_end'], label):.2f}" for run in r["runs"]
                               if label in run["end_to_end"])  # fmt: skip
            lines.append(
                f"| {r['model']} | {lever} | {d['est_ms']:.2f} | {d['trials']} "
                f"({d['seconds']:.0f}) | {_ms(e2e.get(label))} "
                f"| {_ms(e2e.get('onnxruntime'))} | {_ms(e2e.get('pytorch'))} | {ratios} "
                f"| {last['meta']['commit']}, {last['meta']['date']} |"
            )
    if runs:
        lines += ["", "End to end: the last run's medians (min-max); TVM / ONNX Runtime: the "
                  "ratio of medians in each run the lever was timed in, oldest first (each run "
                  "one process).", "",
                  *meta_lines({f"{r['model']} run {i}": run.get("meta") for r in runs
                               for i, run in enumerate(r["runs"], 1)}, "Lever runs")]  # fmt: skip
    return [*lines, "", "![levers](ceiling_levers.png)"] if runs else lines


def _rerank_lines(reranks: list[dict]) -> list[str]:
    if not reranks:
        return []
    r0 = reranks[0]
    lines = [
        "",
        f"**Re-ranking** (`ceiling.py rerank`): each of the {RERANK_KERNELS} kernels with the "
        f"largest share of the model's time has its {r0['top']} best records (by the time the "
        f"tuning measured) timed again, interleaved, {r0['rounds']} rounds (median): a pick "
        "on a first pass, judged on a second, independent one. If the tuning's best were a "
        "lucky measurement of a slower schedule, the pick would beat it on the second pass.",
        "",
        "| model | kernels | picks that the second pass agrees with | stored best, second pass "
        "ms | picked, second pass ms | change | measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reranks:
        k = r["kernels"]
        lines.append(
            f"| {r['model']} | {len(k)} | {sum(x['agrees'] for x in k)} | "
            f"{r['stored_best_ms']:.2f} | {r['picked_ms']:.2f} | "
            f"{100 * (r['picked_ms'] / r['stored_best_ms'] - 1):+.1f}% | "
            f"{r['meta']['commit']}, {r['meta']['date']} |"
        )
    return [*lines, "", *meta_lines({r["model"]: r.get("meta") for r in reranks},
                                    "Re-ranking runs")]  # fmt: skip


def _vs_ort(e2e: dict, label: str) -> float:
    return e2e[label]["median_ms"] / e2e["onnxruntime"]["median_ms"]


def _lever_plot(runs: list[dict], plt) -> None:
    """One panel per model (each its own scale): every timed build's last-run median."""
    if not runs:
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(3.5 * len(runs) + 1, 3.5), squeeze=False)
    every = [f"tvm-{lever}" for lever in LEVERS] + ["onnxruntime", "pytorch"]
    for ax, r in zip(axes[0], runs, strict=True):
        e2e = r["runs"][-1]["end_to_end"]
        labels = [f"tvm-{lever}" for lever in LEVERS if f"tvm-{lever}" in e2e]
        labels += ["onnxruntime", "pytorch"]
        ax.bar(range(len(labels)), [e2e.get(x, {}).get("median_ms", 0) for x in labels],
               color=[f"C{every.index(x)}" for x in labels])  # fmt: skip
        ax.set_xticks(range(len(labels)), [x.removeprefix("tvm-") for x in labels],
                      rotation=40, ha="right", fontsize=7)  # fmt: skip
        ax.set(title=r["model"], ylabel="end to end ms (median)")
    fig.suptitle(f"Levers, {BUDGET} trials per kernel")
    fig.tight_layout()
    fig.savefig(OUT / "ceiling_levers.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["run", "levers", "lever-tune", "rerank", "report"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--lowering", choices=list(reference.LOWERINGS), default=reference.LOWERING)
    parser.add_argument("--library", help="one library for every model (default: the reference)")
    parser.add_argument(
        "--beside",
        action="append",
        default=[],
        choices=list(reference.LOWERINGS),
        help="run: also time the build in this lowering (its reference library)",
    )
    parser.add_argument("--lever", choices=list(LEVERS), help="lever-tune: the lever to tune under")
    parser.add_argument("--levers", default=",".join(LEVERS),
                        help="levers: which, comma-separated (default: all)")  # fmt: skip
    args = parser.parse_args()
    if args.step == "lever-tune":
        lever_tune(args.models[0], args.lever)
        return
    if args.step == "run":
        run(args.models or MODELS, args.lowering, args.library, tuple(args.beside))
    elif args.step == "levers":
        chosen = args.levers.split(",")
        if unknown := sorted(set(chosen) - set(LEVERS)):
            parser.error(f"unknown levers {unknown}; known: {', '.join(LEVERS)}")
        levers(args.models or ["resnet18"], chosen)
    elif args.step == "rerank":
        rerank(args.models or ["resnet18"], args.lowering)
    report()


if __name__ == "__main__":
    main()
