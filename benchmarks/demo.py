"""The demo as a user runs it -> docs/results/demo.json, summary.json ``transfer.demo_*``.

    python benchmarks/demo.py   # alone on the host; after `make setup`

Runs the commands of the Makefile's ``demo`` target as they stand (a copy of the shipped
library, then ``transtune transfer`` of ResNeXt-50 with the cost model), timing their wall
clock: what a user waits for once installed. Then the model is compiled with the schedules the
demo left in its library and timed interleaved beside ONNX Runtime and PyTorch; kernels the
library holds no schedule for ran at TVM's naive build.
"""

from __future__ import annotations

import re
import subprocess
import time

from common import ROOT, merge_summary, write_result

MAKEFILE = ROOT / "Makefile"
REPEAT = 10


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


def main() -> None:
    from transtune.benchmark import compare
    from transtune.frontend import load
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.targets import get_config

    commands = recipe()
    start = time.perf_counter()
    for command in commands:
        subprocess.run(command, shell=True, cwd=ROOT, check=True)
    seconds = time.perf_counter() - start
    words = next(c.split() for c in commands if " transfer " in c)
    model_name, library = words[words.index("transfer") + 1], words[words.index("--library") + 1]
    layout = words[words.index("--layout") + 1] if "--layout" in words else None
    config = get_config("host", layout, "--prepack" in words)  # the lowering the demo tuned in
    model = load(model_name)
    with open_library(ROOT / library, read_only=True) as lib:
        result = compare(model, {"tvm-transferred": (config, LibraryDatabase(lib, config))},
                         REPEAT)  # fmt: skip
    timings = {t.runtime: t.median_ms for t in result.timings}
    naive = len(result.missing_records)
    ratio = timings["tvm-transferred"] / timings["onnxruntime"]
    write_result(ROOT / "docs" / "results" / "demo.json", {
        "commands": commands, "model": model_name, "seconds": seconds,
        "end_to_end": result.to_json(), "naive_kernels": naive, "vs_onnxruntime": ratio,
    }, config.num_threads)  # fmt: skip
    merge_summary("transfer.demo", {"transfer.demo_vs_onnxruntime": ratio,
                                    "transfer.demo_seconds": seconds})  # fmt: skip
    print(
        f"{model_name}: demo {seconds:.0f} s; transferred {timings['tvm-transferred']:.2f} ms, "
        f"ONNX Runtime {timings['onnxruntime']:.2f} ms ({ratio:.2f}x), "
        f"PyTorch {timings.get('pytorch', float('nan')):.2f} ms; {naive} kernels naive"
    )


if __name__ == "__main__":
    main()
