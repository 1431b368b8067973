"""The demo as a user runs it, repeated -> docs/results/demo/<hardware id>.json, summary.json
``transfer.demo_*`` (medians over the runs).

    python benchmarks/demo.py [--runs 3]   # alone on the host; after `make setup`

Each run executes the commands of the Makefile's ``demo`` target as they stand (a copy of the
shipped library, then ``transtune transfer`` of ResNeXt-50 with the cost model), timing their
wall clock: what a user waits for once installed. Then the model is compiled with the
schedules the demo left in its library and timed interleaved beside ONNX Runtime and PyTorch;
kernels the library holds no schedule for ran at TVM's naive build. The file keeps every run
of the latest invocation on this CPU (written after each run) and their median and range.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time

from common import ROOT, merge_summary, write_result

MAKEFILE = ROOT / "Makefile"
REPEAT = 10
RUNS = 3


def recipe(target: str = "demo") -> list[str]:
    """The shell commands of ``target`` in the Makefile, its ``$(VENV)`` expanded."""
    text = MAKEFILE.read_text().replace("\\\n", " ")
    venv = re.search(r"^VENV\s*:=\s*(\S+)", text, re.M).group(1)
    lines = text.split(f"\n{target}:", 1)[1].split("\n")[1:]
    commands = []
    for line in lines:
        if not line.startswith("\t"):
            break
        commands.append(" ".join(line.split()).replace("$(VENV)", venv))
    return commands


def run_once(commands: list[str], model, config) -> dict:
    """One demo: its commands' wall clock, then the model timed from the library they left."""
    from transtune.benchmark import compare
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase

    start = time.perf_counter()
    for command in commands:
        subprocess.run(command, shell=True, cwd=ROOT, check=True)
    seconds = time.perf_counter() - start
    words = next(c.split() for c in commands if " transfer " in c)
    library = words[words.index("--library") + 1]
    with open_library(ROOT / library, read_only=True) as lib:
        result = compare(model, {"tvm-transferred": (config, LibraryDatabase(lib, config))},
                         REPEAT)  # fmt: skip
    timings = {t.runtime: t.median_ms for t in result.timings}
    return {"seconds": seconds, "end_to_end": result.to_json(),
            "naive_kernels": len(result.missing_records),
            "vs_onnxruntime": timings["tvm-transferred"] / timings["onnxruntime"],
            "ms": timings}  # fmt: skip


def aggregate(runs: list[dict]) -> dict:
    """Median and (min, max) of each run figure the goal reads."""
    out = {"naive_kernels": max(r["naive_kernels"] for r in runs)}
    for key in ("vs_onnxruntime", "seconds"):
        values = [r[key] for r in runs]
        out[key], out[f"{key}_range"] = statistics.median(values), [min(values), max(values)]
    return out


def main() -> None:
    from transtune.frontend import load
    from transtune.targets import get_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    commands = recipe()
    words = next(c.split() for c in commands if " transfer " in c)
    model_name = words[words.index("transfer") + 1]
    layout = words[words.index("--layout") + 1] if "--layout" in words else None
    config = get_config("host", layout, "--prepack" in words)  # the lowering the demo tuned in
    model = load(model_name)
    path = ROOT / "docs" / "results" / "demo" / f"{config.name}.json"
    runs: list[dict] = []
    for i in range(args.runs):
        runs.append(run_once(commands, model, config))
        figures = aggregate(runs)
        write_result(path, {"commands": commands, "model": model_name, **figures,
                            "runs": runs}, config.num_threads)  # fmt: skip
        ms = runs[-1]["ms"]
        print(f"run {i + 1}/{args.runs}: {runs[-1]['seconds']:.0f} s; transferred "
              f"{ms['tvm-transferred']:.2f} ms, ONNX Runtime {ms['onnxruntime']:.2f} ms "
              f"({runs[-1]['vs_onnxruntime']:.2f}x), PyTorch {ms.get('pytorch', float('nan')):.2f}"
              f" ms; {runs[-1]['naive_kernels']} kernels naive", flush=True)  # fmt: skip
    merge_summary("transfer.demo", {"transfer.demo_vs_onnxruntime": figures["vs_onnxruntime"],
                                    "transfer.demo_seconds": figures["seconds"]})  # fmt: skip
    low, high = figures["vs_onnxruntime_range"]
    print(
        f"{model_name} on {config.name}, {len(runs)} runs: median {figures['seconds']:.0f} s "
        f"({figures['seconds_range'][0]:.0f}-{figures['seconds_range'][1]:.0f}), median "
        f"{figures['vs_onnxruntime']:.2f}x ONNX Runtime ({low:.2f}-{high:.2f}), at most "
        f"{figures['naive_kernels']} kernels naive"
    )


if __name__ == "__main__":
    main()
