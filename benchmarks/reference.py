"""Converged reference tunings: one resumable queue serving the transfer experiment (its
full-tuning reference), the ceiling page and the shipped library (the transfer issue, item 3).

    python benchmarks/reference.py run [MODEL ...] [--minutes M] [--lowering L]   # resumable
    python benchmarks/reference.py run resnet18 --config host-1core   # the constrained CPU
    python benchmarks/reference.py report   # docs/results/reference.md + reference_curves.png
    python benchmarks/reference.py compact  # archive and compact what a killed session left

Every model tunes in a fresh process into its own library,
``data/library/reference/<hardware id>/<lowering>/MODEL.db``, the model lowered as LOWERING
says (data layout, prepacked weights: the ceiling's levers, ``docs/results/ceiling.md``; the
libraries an earlier queue made in another lowering stay beside them), with the synchronous
runner and seed 0:
the models of REFERENCE until every kernel converges (``transtune tune --until-converged``:
at least 256 measured candidates, the last quarter improving its best by under 2%; at most
MAX_PER_KERNEL), the rest of the zoo (COVERAGE) with COVERAGE_PER_KERNEL candidates per
kernel, so that the library ends with every kernel class of the zoo. After each session the
whole library (every measured candidate: a search trajectory, which the cost-model issue
wants as training data beside random samples) is kept xz-compressed under ``search/``, then
the library is compacted to its best TOP_K records per kernel; the model's curve and every
kernel's (trials, best) curve stay, so the next session (on any checkout) resumes with the
counts. A model is finished once a session ends without reaching its time limit; that is
kept in the library (meta ``reference:finished``). Commit the folder as it grows. A lowering
that changes some kernels only (``EXTENDS``: Winograd's convolutions) starts each model's
library as a copy of the converged one it extends, so that only its new kernels are tuned.
``--new-classes`` tunes, of each model, only the NEW_CLASS_KERNELS heaviest kernels of every
class that none of this CPU's other reference libraries holds a schedule of yet (the cheapest
way to a library covering the zoo; kept in the library's meta ``reference:kernels``, and a
model tuned so that converges is never marked finished: its other kernels are still owed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ["resnet18", "mobilenet_v2", "resnext50_32x4d", "efficientnet_b0", "resnet50",
             "bert_base", "bert_tiny"]  # fmt: skip
COVERAGE = [
    "alexnet", "googlenet", "mobilenet_v3_large", "mnasnet1_0", "densenet121",
    "bert_medium", "mobilebert", "inception_v3", "efficientnet_b4", "vgg16", "wide_resnet50_2",
]  # fmt: skip
MAX_PER_KERNEL = 1024
COVERAGE_PER_KERNEL = 64
TOP_K = 3
SEED = 0
FINISHED = "reference:finished"
NEW_CLASS_KERNELS = 3
SUBSET = "reference:kernels"  # meta: "new classes" when --new-classes chose the kernels
# How a model is lowered before its kernels are extracted: (data layout, prepacked weights,
# fast math: transcendentals by vectorisable approximations, ``transtune.fastmath``;
# Winograd: 3x3 convolutions as Winograd's F(4x4, 3x3), ``transtune.winograd``).
LOWERINGS = {"nchw": ("NCHW", False, False, False), "nhwc": ("NHWC", False, False, False),
             "nhwc-prepack": ("NHWC", True, False, False),
             "nhwc-prepack-fastmath": ("NHWC", True, True, False),
             "nhwc-prepack-winograd": ("NHWC", True, False, True)}  # fmt: skip
# A lowering that changes some kernels only starts a model's library as a copy of the one it
# extends (its other kernels are the same programs: their records and curves carry over).
EXTENDS = {"nhwc-prepack-winograd": "nhwc-prepack"}
LOWERING = "nhwc-prepack"
# The configuration tuned for: ``host`` (every core), or ``host-1core`` (the constrained CPU
# of the transfer issue); its hardware id names the folder. Set by ``--config``.
CONFIG = "host"


def config(lowering: str = LOWERING):
    """The CONFIG target configuration of a lowering."""
    from transtune.targets import get_config

    return get_config(CONFIG, *LOWERINGS[lowering])


def folder(lowering: str = LOWERING) -> Path:
    """Where this host's reference libraries of ``lowering`` live (named by its hardware id)."""
    return ROOT / "data" / "library" / "reference" / config(lowering).name / lowering


def finished(path: Path) -> str | None:
    """How the model's tuning finished ("budget", "converged", "done"), or None."""
    from transtune.library import open_library

    if not path.is_file():
        return None
    with open_library(path, read_only=True) as lib:
        return lib.get_meta(FINISHED)


def estimate_at(lib, model: str, budget: int | None = None) -> tuple[float, int]:
    """(estimated latency, trials) of ``model``'s tuning in ``lib`` once each kernel had
    measured at most ``budget`` candidates (None: all it measured), from the kernel curves:
    sum over kernels of weight x best seconds so far."""
    curves = lib.kernel_curves(lib.tune_run(model))
    latency, trials = 0.0, 0
    for wid, weight in lib.model_weights(model).items():
        points = curves.get(wid, [])
        within = [p for p in points if budget is None or p[0] <= budget] or points[:1]
        if within:
            latency += weight * within[-1][1]
            trials += within[-1][0]
    return latency, trials


def held_classes(lib) -> dict[str, set[str]]:
    """Per target key of ``lib``: the kernel classes it holds a successful schedule of."""
    class_of = lib.kernel_classes()
    return {key: {class_of[wid] for wid, *_ in lib.best_by_class(None, key)}
            for key in lib.target_keys()}  # fmt: skip


def new_class_kernels(kernels: list, path: Path) -> list:
    """The NEW_CLASS_KERNELS heaviest (weight x FLOPs) ``kernels`` of each class that no
    reference library in ``path``'s folder but ``path`` itself holds a schedule of."""
    from transtune.library import open_library

    held: set[str] = set()
    for other in sorted(path.parent.glob("*.db")):
        if other != path:
            with open_library(other, read_only=True) as lib:
                held.update(*held_classes(lib).values())
    chosen: dict[str, list] = {}
    for k in sorted(kernels, key=lambda k: -k.weight * k.flops):
        if k.kernel_class not in held:
            chosen.setdefault(k.kernel_class, []).append(k)
    return [k for group in chosen.values() for k in group[:NEW_CLASS_KERNELS]]


def one(model_name: str, seconds: float, lowering: str = LOWERING,
        new_classes: bool = False) -> None:  # fmt: skip
    """One session of ``model_name``'s tuning (at most ``seconds``), then compaction; with
    ``new_classes``, of the kernels :func:`new_class_kernels` chooses only."""
    from transtune.library import open_library
    from transtune.tuning import Convergence
    from transtune.workflow import Workflow

    path = folder(lowering) / f"{model_name}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = folder(EXTENDS.get(lowering, lowering)) / f"{model_name}.db"
    if not path.exists() and base != path and base.is_file():
        with open_library(base, read_only=True) as lib:
            lib.snapshot(path)
        with open_library(path) as lib:  # the kernels this lowering's tuning registers
            lib.set_meta(FINISHED, None)
            lib.forget_model(model_name)
        print(f"  started from {base.relative_to(ROOT)}", flush=True)
    converge = model_name in REFERENCE
    with open_library(path) as lib:
        try:
            with Workflow(model_name, lib, config(lowering)) as wf:
                kernels = new_class_kernels(wf.kernels, path) if new_classes else wf.kernels
                lib.set_meta(SUBSET, "new classes" if new_classes else None)
                count = len(kernels)
                print(f"  {count} of {len(wf.kernels)} kernels", flush=True)
                per_kernel = MAX_PER_KERNEL if converge else COVERAGE_PER_KERNEL
                last = [0.0]

                def update(tuner) -> None:
                    if time.time() - last[0] > 60:  # a line a minute
                        last[0] = time.time()
                        done = sum(tuner.converged(s) for s in tuner.states)
                        print(f"  {tuner.new_trials} trials, est. {1e3 * tuner.curve[-1][2]:.2f}"
                              f" ms, {done}/{count} converged", flush=True)  # fmt: skip

                result = wf.tune(
                    trials=None if converge else per_kernel * count, per_kernel=per_kernel,
                    kernels=kernels,
                    time_budget=seconds, seed=SEED, on_update=update,
                    until=Convergence() if converge else None,
                )  # fmt: skip
            print(f"  {model_name}: {result.stopped} after {result.new_trials} new trials, "
                  f"est. {1e3 * result.estimated_latency:.2f} ms", flush=True)  # fmt: skip
            if result.stopped not in ("time", "interrupted") and not (new_classes and converge):
                lib.set_meta(FINISHED, result.stopped)
        finally:
            kept = archive(lib, path)
            deleted = lib.compact(TOP_K)
    print(f"  compacted: {deleted} records deleted ({kept}), {path.stat().st_size / 2**20:.1f} MiB")
    if result.stopped == "interrupted":
        sys.exit(130)  # the queue stops too


def archive(lib, path: Path) -> str:
    """The whole library at ``path``, xz-compressed, as ``search/MODEL-<time>.db.xz`` beside
    it (skipped when compaction would drop nothing). Returns what was kept, for the log."""
    import lzma
    import os
    import shutil
    import tempfile

    if not lib.compactable(TOP_K):
        return "nothing to keep"
    out = path.parent / "search" / f"{path.stem}-{time.strftime('%Y%m%dT%H%M%S')}.db.xz"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        lib.snapshot(copy)
        with open(copy, "rb") as src, lzma.open(Path(tmp) / "out.xz", "wb", preset=6) as dst:
            shutil.copyfileobj(src, dst)
        shutil.move(Path(tmp) / "out.xz", out.with_suffix(".tmp"))
        os.replace(out.with_suffix(".tmp"), out)
    return f"all {lib.count_records()} kept in {out.name}, {out.stat().st_size / 2**20:.1f} MiB"


def compact(models: list[str], lowering: str = LOWERING) -> None:
    """Archive and compact the libraries of ``models`` (what a SIGKILLed session left)."""
    from transtune.library import open_library

    for model in models:
        path = folder(lowering) / f"{model}.db"
        if path.is_file():
            with open_library(path) as lib:
                kept = archive(lib, path)
                print(f"{model}: {lib.compact(TOP_K)} records deleted ({kept})")


def run(models: list[str], minutes: float, lowering: str = LOWERING,
        new_classes: bool = False) -> None:  # fmt: skip
    """Work through ``models`` in order until ``minutes`` have passed."""
    deadline = time.time() + 60 * minutes
    for model in models:
        left = deadline - time.time()
        if left < 120:
            return
        if finished(folder(lowering) / f"{model}.db"):
            continue
        print(f"== {model}, {lowering} ({left / 60:.0f} min left)", flush=True)
        # The tuning's clock starts after extraction and the untuned runs: leave them time.
        child = subprocess.Popen([sys.executable, __file__, "one", model, "--seconds",
                                  str(left - 90), "--lowering", lowering, "--config", CONFIG]
                                 + ["--new-classes"] * new_classes)  # fmt: skip
        try:
            code = child.wait()
        except KeyboardInterrupt:  # the child has it too: it stops after its batch, compacts
            child.wait()
            return
        if code == 130:  # interrupted (a background queue ignores SIGINT, its child does not)
            return


def progress() -> list[dict]:
    """Per hardware id (every folder under ``data/library/reference/``), lowering and model
    with a reference library: kernels, converged, trials, estimated latency, tuning seconds,
    finished, and the curve."""
    from transtune.library import open_library
    from transtune.tuning import Convergence

    rule, rows = Convergence(), []
    hardware_ids = sorted(p.name for p in (ROOT / "data" / "library" / "reference").iterdir()
                          if p.is_dir())  # fmt: skip
    for hardware, lowering, model in (
        (hw, low, m) for hw in hardware_ids for low in LOWERINGS for m in REFERENCE + COVERAGE
    ):
        path = ROOT / "data" / "library" / "reference" / hardware / lowering / f"{model}.db"
        if not path.is_file():
            continue
        with open_library(path, read_only=True) as lib:
            run_id = lib.tune_run(model)
            if run_id is None:
                continue
            curve, kernels = lib.curve(run_id), lib.kernel_curves(run_id)
            weights = lib.model_weights(model)
            cap = MAX_PER_KERNEL if model in REFERENCE else COVERAGE_PER_KERNEL
            if model in REFERENCE:
                left = sum(rule.trials_left(kernels.get(w, []), MAX_PER_KERNEL) for w in weights)
            else:
                left = sum(max(0, COVERAGE_PER_KERNEL - (kernels[w][-1][0] if kernels.get(w)
                                                         else 0)) for w in weights)  # fmt: skip
            rows.append({
                "hardware": hardware, "lowering": lowering, "model": model,
                "converge": model in REFERENCE, "kernels": len(weights),
                "converged": sum(map(rule.reached, kernels.values())),
                # Kernels a finished tuning left short of the rule and of the cap: MetaSchedule
                # found no new candidate in their design space (a transpose has 3 at all).
                "exhausted": sum(not rule.reached(c) and c[-1][0] < cap
                                 for c in kernels.values()) if lib.get_meta(FINISHED) else 0,
                "left": 0 if lib.get_meta(FINISHED) else left,
                "trials": curve[-1][0], "seconds": curve[-1][1], "latency": curve[-1][2],
                "finished": lib.get_meta(FINISHED), "curve": curve,
                "subset": lib.get_meta(SUBSET),
                "mib": path.stat().st_size / 2**20,
            })  # fmt: skip
    return rows


def zoo_classes(lowering: str = LOWERING) -> dict[str, list[str]]:
    """Each zoo model's kernel classes lowered as ``lowering``, extracted once (minutes for
    the whole zoo) and kept in ``docs/results/reference/zoo_classes-<lowering>.json``."""
    from common import write_result

    from transtune.frontend import from_zoo
    from transtune.tasks import extract_kernels

    path = ROOT / "docs" / "results" / "reference" / f"zoo_classes-{lowering}.json"
    models = json.loads(path.read_text())["models"] if path.is_file() else {}
    for name in (m for m in REFERENCE + COVERAGE if m not in models):
        kernels = extract_kernels(from_zoo(name).mod, config(lowering))
        models[name] = sorted({k.kernel_class for k in kernels})
        write_result(path, {"lowering": lowering, "models": models})
    return models


def coverage(lowering: str = LOWERING) -> list[dict]:
    """Per hardware id with records in the shipped library in ``lowering``'s layout: which of
    the zoo's kernel classes it holds a schedule of, and the zoo models it covers whole."""
    from common import SHIPPED

    from transtune.library import open_library

    classes = zoo_classes(lowering)
    zoo = set().union(*map(set, classes.values()))
    layout, prepack = LOWERINGS[lowering][:2]
    held: dict[str, set[str]] = {}
    with open_library(SHIPPED, read_only=True) as lib:
        for key, have in held_classes(lib).items():
            spec = json.loads(key)
            if (spec.get("layout", "NCHW"), spec.get("prepack", False)) == (layout, prepack):
                held.setdefault(spec.get("hardware", key), set()).update(have)
    return [
        {"hardware": hw, "classes": len(have & zoo), "zoo_classes": len(zoo),
         "missing": sorted(zoo - have),
         "models": sorted(m for m, c in classes.items() if set(c) <= have)}
        for hw, have in sorted(held.items())
    ]  # fmt: skip


def report() -> None:
    """docs/results/reference.md (+ reference_curves.png): where the queue stands, per CPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from common import run_meta

    out = ROOT / "docs" / "results"
    # Live state, not a stored result: the page describes the libraries on disk now, so the
    # commit, date, CPU and TVM version are the rendering run's (run_meta() here). The
    # libraries keep no run metadata; what ties them to a CPU is the folder they are in,
    # named by the hardware id of the CPU that tuned them, so the page says just that.
    meta, rows = run_meta(), progress()
    host = folder().parent.name
    hardware_ids = list(dict.fromkeys(r["hardware"] for r in rows))
    lines = [
        "# Reference tunings: the converged queue",
        "",
        f"Written by `benchmarks/reference.py report` at commit {meta['commit']} on "
        f"{meta['date']} from the libraries in `data/library/reference/<hardware id>/"
        "<lowering>/`, one table per hardware id (the CPU that tuned them: vendor, LLVM mcpu, "
        f"threads; the libraries record no further run metadata). This host is `{host}` "
        f"({meta['cpu']}, `{meta['mcpu']}`, {meta['threads']} threads); rendered with TVM "
        f"{meta['versions'].get('apache-tvm')}. Each model is "
        "tuned by `transtune tune` (MetaSchedule evolutionary search, XGBoost cost model, "
        f"synchronous runner, seed {SEED}): the models marked *converge* until every kernel "
        "has at least 256 measured candidates and its last quarter improved its best by under "
        f"2% (at most {MAX_PER_KERNEL} per kernel), the others with {COVERAGE_PER_KERNEL} per "
        f'kernel; "new classes" = only the heaviest {NEW_CLASS_KERNELS} kernels of each '
        "class no other model's library held yet (`--new-classes`; kernels and estimate "
        "count those only). Estimated latency = sum over kernels of weight x best measured "
        "kernel time (the tuning curve's figure, not an end-to-end measurement). Seconds = "
        "the tuning clock, summed over sessions (setup excluded). Lowering = the data layout "
        "convolutions were lowered in, and whether weights were prepacked; the queue now tunes "
        f"{LOWERING} (the ceiling's levers). The "
        "queue is resumable; unfinished models continue in later sessions on a CPU of the "
        "same hardware id.",
        "",
        "Exhausted = kernels whose design space ran out of new candidates before the rule "
        "could hold (the model finished with them below the cap). "
        "Left = the fewest more trials after which the model can finish (each kernel's, if "
        "no candidate improves its best again; the rule may want more), and the hours they "
        "take at the model's trials per second so far.",
    ]
    for hardware in hardware_ids:
        lines += [
            "", f"## `{hardware}`{' (this host)' if hardware == host else ''}", "",
            "| lowering | model | rule | kernels | converged | trials | est. ms | tuning s "
            "| finished | left: trials (h) | MiB |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]  # fmt: skip
        for r in (r for r in rows if r["hardware"] == hardware):
            hours = r["left"] * r["seconds"] / max(r["trials"], 1) / 3600
            lines.append(
                f"| {r['lowering']} | {r['model']} | "
                f"{'converge' if r['converge'] else COVERAGE_PER_KERNEL}"
                f"{f', {s}' if (s := r['subset']) else ''} | "
                f"{r['kernels']} | {r['converged']}"
                f"{f' (+{x} exhausted)' if (x := r['exhausted']) else ''} | {r['trials']} | "
                f"{1e3 * r['latency']:.2f} | "
                f"{r['seconds']:.0f} | {r['finished'] or 'no'} | {r['left']} ({hours:.1f}) "
                f"| {r['mib']:.2f} |"
            )
    lines += [
        "",
        f"## The shipped library's coverage of the zoo ({LOWERING})",
        "",
        f"Kernel classes of the zoo's {len(REFERENCE + COVERAGE)} models lowered as "
        f"{LOWERING} (`docs/results/reference/zoo_classes-{LOWERING}.json`) that "
        "`data/library/zoo-host.db` holds a successful schedule of, per CPU (its records in "
        "this layout), and the models every one of whose classes it holds (the transfer "
        "cascade's first stage, same-class donors, can reach all their kernels).",
        "",
        "| hardware id | classes held | models covered | classes missing |",
        "|---|---|---|---|",
    ]
    for c in coverage():
        lines.append(f"| `{c['hardware']}` | {c['classes']} of {c['zoo_classes']} | "
                     f"{len(c['models'])}: {', '.join(c['models']) or '-'} | "
                     f"{', '.join(f'`{x}`' for x in c['missing']) or '-'} |")  # fmt: skip
    lines += ["", "![curves](reference_curves.png)", ""]
    (out / "reference.md").write_text("\n".join(lines))
    fig, axes = plt.subplots(1, len(hardware_ids), figsize=(6 * len(hardware_ids), 4),
                             squeeze=False, sharey=True)  # fmt: skip
    for ax, hardware in zip(axes[0], hardware_ids, strict=True):
        for r in (r for r in rows if r["hardware"] == hardware):
            trials, _, latency = zip(*r["curve"], strict=True)
            ax.plot(trials, [1e3 * x for x in latency],
                    ls="-" if r["lowering"] == LOWERING else ":",
                    label=f"{r['model']} ({r['lowering']})")  # fmt: skip
        ax.set(xlabel="measured candidates", yscale="log", title=hardware)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("estimated latency (ms)")
    fig.tight_layout()
    fig.savefig(out / "reference_curves.png", dpi=120)
    print("\n".join(lines))


def main() -> None:
    global CONFIG
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["run", "one", "report", "compact"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--lowering", choices=list(LOWERINGS), default=LOWERING)
    parser.add_argument("--config", default=CONFIG, help="host, or host-1core")
    parser.add_argument("--new-classes", action="store_true",
                        help="tune only kernels of classes this CPU's libraries lack")  # fmt: skip
    args = parser.parse_args()
    CONFIG = args.config
    if args.step == "run":
        run(args.models or REFERENCE + COVERAGE, args.minutes, args.lowering, args.new_classes)
    elif args.step == "one":
        one(args.models[0], args.seconds, args.lowering, args.new_classes)
    elif args.step == "compact":
        compact(args.models or REFERENCE + COVERAGE, args.lowering)
    else:
        report()


if __name__ == "__main__":
    main()
