"""Transfer-tuning benchmark -> docs/results/transfer.md (+ plots), the paper's experiment.

1. ``tune``: the reference tunings (``benchmarks/reference.py``: converged for its REFERENCE
   models, COVERAGE_PER_KERNEL per kernel for the rest of the zoo), one library per model in
   ``data/library/reference/<hardware id>/<layout>/``, with their curves. Resumable.
2. ``transfer``: each model held out in turn, under two protocols:

   - ``library`` (ours): the donor library holds the best few records per workload of every
     *other* model's reference library (as the shipped library does); the held-out model is
     transfer-tuned from it with automatic donor selection and the whole cascade (same-class
     donors, anchor-block donors, sampled programs);
   - ``named`` (the paper's): one named donor model (NAMED_DONORS, after the paper's artifact),
     same-class replay only.

   The held-out model needs a finished reference on this CPU configuration; a donor's
   reference is this configuration's, else the same CPU's at another thread count, else
   another CPU's (``finished_references``; each result names its donors' hardware ids).

   Then the model is compiled with the winners and timed end to end against the naive build,
   its converged full tuning, PyTorch and ONNX Runtime in one process, interleaved
   (``benchmark.compare``); and each kernel's
   zero-measurement schedule (the best of a few programs sampled from its design space,
   without search) is timed for the second definition of the untuned model.
3. ``benchmarks/transfer_report.py``: Markdown and plots from the JSON results in
   ``docs/results/transfer/<hardware id>/`` (the CPU configuration measured on: a later
   session on another CPU adds its own, it does not overwrite).

Clocks: the full tuning's curve counts tuning seconds only (kernel extraction, builder start
and the untuned runs excluded), so the transfer search time it is matched against excludes
the same (``search_seconds - setup_seconds``). Every step runs each model in a fresh process,
one at a time: measure alone.

    python benchmarks/transfer.py tune [MODEL ...] [--minutes M]
    python benchmarks/transfer.py transfer [MODEL ...] [--protocol library|named|both]
    python benchmarks/transfer.py transfer [MODEL ...] --policy all   # donor policies compared
    python benchmarks/transfer.py transfer [MODEL ...] --config host-1core   # the constrained CPU
    python benchmarks/transfer_report.py
    python benchmarks/transfer.py library        # the references into data/library/zoo-host.db
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

import reference
from common import SHIPPED, time_to_reach, write_result

from transtune.transfer.policies import DEFAULT_POLICY, POLICIES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "transfer"
RUNS = ROOT / "runs" / "transfer"
TOP_K = 3  # records per workload that a donor library keeps, as the shipped library does
MAX_CANDIDATES = 8
REPEAT = 10
PROTOCOLS = ("library", "named")
STAGES = ("transfer", "anchor", "sampled", "untuned")
DEMO_MODEL = "resnext50_32x4d"  # the model `make demo` transfer-tunes: not in the shipped library
CONFIGS = ("host", "host-1core")  # every core, and the constrained CPU (one thread)
# The paper's protocol: one donor per model, as its artifact paired them (resnet18 <- resnet50,
# mobilenet_v2 <- efficientnet_b4, bert <- mobilebert), completed for the reference models.
NAMED_DONORS = {
    "resnet18": "resnet50", "resnet50": "resnet18", "resnext50_32x4d": "resnet50",
    "mobilenet_v2": "efficientnet_b4", "efficientnet_b0": "efficientnet_b4",
    "bert_base": "mobilebert", "bert_tiny": "bert_base",
}  # fmt: skip


def tuned_models() -> list[str]:
    """Models whose reference tuning has finished."""
    return [p.stem for p in sorted(reference.folder().glob("*.db")) if reference.finished(p)]


def donor_library(path: Path, donors: dict[str, Path]) -> None:
    """A fresh library at ``path``: the best TOP_K records per workload of each of ``donors``'
    reference libraries (model -> its library)."""
    from transtune.library import open_library

    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_library(path) as lib:
        for source in donors.values():
            with open_library(source, read_only=True) as full:
                lib.merge(full, top_k=TOP_K)


def finished_references() -> dict[str, Path]:
    """Each model's finished reference library in this lowering, to draw donors from: this
    configuration's, else one of the same CPU with another thread count, else another CPU's
    (hardware ids in name order). Records are keyed by target: the cascade replays a foreign
    configuration's schedules as marked fallbacks and times them here, as it does with the
    shipped library's."""
    here = reference.folder()
    cpu = here.parent.name.rsplit("-", 1)[0]
    others = sorted(
        (p for p in here.parent.parent.iterdir() if p.is_dir() and p != here.parent),
        key=lambda p: (not p.name.startswith(f"{cpu}-"), p.name),
    )
    found: dict[str, Path] = {}
    for hardware in [here.parent, *others]:
        for path in sorted((hardware / here.name).glob("*.db")):
            if path.stem not in found and reference.finished(path):
                found[path.stem] = path
    return found


def ship_library() -> None:
    """The library shipped in the repository, ``data/library/zoo-host.db``: what it holds, plus
    the best TOP_K records per workload of every reference library of this host in every
    lowering, finished or not (each record is a measured best of its search; records are keyed
    by hardware id and lowering), except the demo's model, which the demo transfer-tunes.
    Repeating it adds only what is new."""
    from transtune.library import open_library

    sources = sorted(
        p for low in reference.LOWERINGS for p in reference.folder(low).glob("*.db")
        if p.stem != DEMO_MODEL
    )  # fmt: skip
    with open_library(SHIPPED) as lib:
        for source in sources:
            with open_library(source, read_only=True) as full:
                _, copied = lib.merge(full, top_k=TOP_K)
            print(f"  {source.relative_to(ROOT)}: {copied} records merged")
        dropped = lib.compact(TOP_K)
        count = lib.count_records()
    print(
        f"{SHIPPED}: {count} records ({dropped} merged ones beyond the best {TOP_K} of their "
        f"workload and target dropped); {SHIPPED.stat().st_size / 2**20:.1f} MiB"
    )


def donors_for(model_name: str, protocol: str) -> dict[str, Path]:
    """The donor models of ``model_name`` under ``protocol``, each with its finished reference
    library (:func:`finished_references`)."""
    finished = finished_references()
    if protocol == "named":
        named = NAMED_DONORS[model_name]
        if named not in finished:
            raise SystemExit(f"{model_name}: its named donor {named} has no finished reference")
        return {named: finished[named]}
    return {m: p for m, p in finished.items() if m != model_name}


def transfer_one(model_name: str, protocol: str, policy: str) -> None:
    """Hold ``model_name`` out, transfer-tune it under ``protocol``, measure it end to end."""
    from transtune.benchmark import compare
    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.transfer import zero_measurement_seconds
    from transtune.workflow import Workflow

    config = reference.config()
    model = from_zoo(model_name)
    policies = list(POLICIES) if policy == "all" else [policy]
    label = "all" if policy == "all" else protocol
    path = RUNS / "heldout" / config.name / f"{model_name}-{label}.db"
    donors = donors_for(model_name, protocol)
    donor_library(path, donors)
    paper = {"anchor": False, "sample": 0} if protocol == "named" else {}
    reference_path = reference.folder() / f"{model_name}.db"
    with open_library(path) as lib, open_library(reference_path, read_only=True) as full:
        library_records = lib.count_records()
        with Workflow(model, lib, config) as wf:
            result = wf.transfer(donors=list(donors), max_candidates=MAX_CANDIDATES,
                                 policy=policies, **paper)  # fmt: skip
        kernels = result.kernels
        default = zero_measurement_seconds(
            [k.kernel for k in kernels], config, [k.untuned_secs for k in kernels]
        )
        curve = full.curve(full.tune_run(model_name))
        search = result.search_seconds - result.setup_seconds
        data = {
            "model": model_name, "protocol": protocol, "policy": policy, "layout": config.layout,
            "max_candidates": MAX_CANDIDATES, "donors": list(donors),
            # the CPU configuration whose tuning each donor's records come from
            "donor_hardware": {m: p.parent.parent.name for m, p in donors.items()},
            "library_records": library_records, "search_seconds": search,
            "setup_seconds": result.setup_seconds,
            "estimated_untuned": result.untuned_latency,
            "estimated_default": sum(k.kernel.weight * d for k, d in zip(kernels, default,
                                                                          strict=True)),
            "estimated_transferred": result.estimated_latency,
            "estimated_full": curve[-1][2], "full_trials": curve[-1][0],
            "full_seconds": curve[-1][1],
            "full_seconds_to_match": time_to_reach(curve, result.estimated_latency),
            "full_finished": reference.finished(reference_path),
            "stages": dict(Counter(k.stage for k in kernels)),
            "curve": curve,
            "kernels": [
                {"name": k.kernel.name, "class": k.kernel.kernel_class, "weight": k.kernel.weight,
                 "flops": k.kernel.flops, "untuned_secs": k.untuned_secs,
                 "default_secs": d, "best_secs": k.best_secs, "stage": k.stage,
                 "donor": k.donor, "tried": k.tried, "replay_failed": k.replay_failed,
                 "refitted": k.refitted, "wrong": k.wrong, "failed": k.failed,
                 "foreign_win": k.foreign_win,
                 "sampled_timed": k.sampled_timed,
                 "seconds": k.seconds, "measured": {str(w): s for w, s in k.measured.items()},
                 "chosen": k.chosen, "errors": k.errors[:3]}
                for k, d in zip(kernels, default, strict=True)
            ],
        }  # fmt: skip
        if policy != "all":  # every build and both peers timed interleaved, in one process
            builds = {
                "tvm-untuned": (config, None),
                "tvm-transferred": (config, LibraryDatabase(lib, config)),
                "tvm-full": (config, LibraryDatabase(full, config, read=("tuned",))),
            }
            data["end_to_end"] = compare(model, builds, REPEAT).to_json()
    write_result(DATA / config.name / f"{model_name}-{label}.json", data, config.num_threads)


def transfer(models: list[str], protocols: list[str], policy: str = DEFAULT_POLICY) -> None:
    for model in models:
        for protocol in protocols if policy != "all" else ["library"]:
            print(f"== transfer {model} ({protocol}, {policy})", flush=True)
            subprocess.run([sys.executable, __file__, "one", model, "--protocol", protocol,
                            "--policy", policy, "--config", reference.CONFIG],
                           check=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["tune", "transfer", "one", "library"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--protocol", choices=[*PROTOCOLS, "both"], default="both")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="donor policy, or 'all'")
    parser.add_argument("--minutes", type=float, default=60.0, help="tune: time for this session")
    parser.add_argument("--config", choices=CONFIGS, default="host",
                        help="host-1core: the constrained CPU (its own references)")  # fmt: skip
    args = parser.parse_args()
    reference.CONFIG = args.config
    if args.step == "tune":
        reference.run(args.models or reference.REFERENCE + reference.COVERAGE, args.minutes)
    elif args.step == "transfer":
        protocols = list(PROTOCOLS) if args.protocol == "both" else [args.protocol]
        transfer(args.models or [m for m in reference.REFERENCE if m in tuned_models()],
                 protocols, args.policy)  # fmt: skip
    elif args.step == "one":
        transfer_one(args.models[0], args.protocol, args.policy)
    else:
        ship_library()


if __name__ == "__main__":
    main()
