"""Transfer-tuning benchmark -> docs/results/transfer.md (+ plots), the paper's experiment.

1. ``tune``: the reference tunings (``benchmarks/reference.py``: converged for its REFERENCE
   models, COVERAGE_PER_KERNEL per kernel for the rest of the zoo), one library per model in
   ``data/library/reference/<hardware id>/``, with their curves. Resumable.
2. ``transfer``: each model held out in turn. Its donor library holds the best few records
   per workload of every *other* model's full library (as the shipped library does); the
   held-out model is transfer-tuned from it with every donor policy's candidates measured
   in one pass, then compiled with the default policy's winners and timed end to end against
   untuned, fully tuned (its own full library), PyTorch and ONNX Runtime.
3. ``report``: Markdown and plots from the JSON results in ``docs/results/transfer/``.

Every step runs each model in a fresh process, one at a time: measure alone.

    python benchmarks/transfer.py tune [MODEL ...] [--minutes M]
    python benchmarks/transfer.py transfer [MODEL ...]
    python benchmarks/transfer.py report
    python benchmarks/transfer.py library        # data/library/zoo-host.db from the references
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import reference

from transtune.transfer.policies import DEFAULT_POLICY, POLICIES

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "transfer"
RUNS = ROOT / "runs" / "transfer"
FULL = reference.folder()
TOP_K = 3  # records per workload that a donor library keeps, as the shipped library does
MAX_CANDIDATES = 8
REPEAT = 10


def tuned_models() -> list[str]:
    """Models whose reference tuning has finished."""
    return [path.stem for path in sorted(FULL.glob("*.db")) if reference.finished(path)]


def donor_library(held_out: str | None, path: Path) -> list[str]:
    """A fresh library at ``path``: the best TOP_K records per workload of every fully tuned
    model but ``held_out``. Returns the donor models."""
    from transtune.library import open_library

    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    donors = [m for m in tuned_models() if m != held_out]
    with open_library(path) as lib:
        for model in donors:
            with open_library(FULL / f"{model}.db") as full:
                lib.merge(full, top_k=TOP_K)
        lib.query("PRAGMA wal_checkpoint(TRUNCATE)")
    return donors


def ship_library() -> None:
    """The library shipped in the repository: every fully tuned model, best TOP_K each."""
    path = ROOT / "data" / "library" / "zoo-host.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    donors = donor_library(None, path)
    print(f"{path}: {', '.join(donors)}; {path.stat().st_size / 2**20:.1f} MiB")


def time_to_reach(curve: list, latency: float) -> float | None:
    """Seconds a recorded tuning curve needs to reach ``latency`` (None: never)."""
    return next((seconds for _, seconds, est in curve if est <= latency), None)


def transfer_one(model_name: str, policy: str) -> None:
    """Hold ``model_name`` out, transfer-tune it with ``policy``, measure it end to end."""
    from transtune.benchmark import benchmark
    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.targets import get_config
    from transtune.transfer import transfer_tune

    config = get_config("host", reference.LAYOUT)
    model = from_zoo(model_name)
    policies = list(POLICIES) if policy == "all" else [policy]
    path = RUNS / "heldout" / f"{model_name}-{policy}.db"
    donors = donor_library(model_name, path)
    with open_library(path) as lib, open_library(FULL / f"{model_name}.db", read_only=True) as full:
        library_records = lib.count_records()
        result = transfer_tune(model, lib, config, max_candidates=MAX_CANDIDATES, policy=policies)
        curve = full.curve(full.tune_run(model_name))
        data = {
            "model": model_name,
            "policy": policy,
            "max_candidates": MAX_CANDIDATES,
            "donors": donors,
            "library_records": library_records,
            "search_seconds": result.search_seconds,
            "estimated_untuned": result.untuned_latency,
            "estimated_transferred": result.estimated_latency,
            "estimated_full": curve[-1][2],
            "full_trials": curve[-1][0],
            "full_seconds": curve[-1][1],
            "full_seconds_to_match": time_to_reach(curve, result.estimated_latency),
            "curve": curve,
            "kernels": [
                {
                    "name": k.kernel.name,
                    "class": k.kernel.kernel_class,
                    "weight": k.kernel.weight,
                    "flops": k.kernel.flops,
                    "untuned_secs": k.untuned_secs,
                    "best_secs": k.best_secs,
                    "donor": k.donor,
                    "tried": k.tried,
                    "replay_failed": k.replay_failed,
                    "refitted": k.refitted,
                    "wrong": k.wrong,
                    "failed": k.failed,
                    "seconds": k.seconds,
                    "measured": {str(w): s for w, s in k.measured.items()},
                    "chosen": k.chosen,
                }
                for k in result.kernels
            ],
        }
        if policy != "all":
            untuned = benchmark(model, config, None, repeat=3, runtimes=("tvm",))
            transferred = benchmark(
                model, config, LibraryDatabase(lib, config), REPEAT, label="tvm-transferred"
            )
            tuned = benchmark(
                model, config, LibraryDatabase(full, config, read=("tuned",)), REPEAT,
                runtimes=("tvm",), label="tvm-full",
            )  # fmt: skip
            data["end_to_end"] = {
                "untuned": untuned.to_json(),
                "transferred": transferred.to_json(),
                "full": tuned.to_json(),
            }
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / f"{model_name}-{policy}.json").write_text(json.dumps(data, indent=1))


def transfer(models: list[str], policy: str = DEFAULT_POLICY) -> None:
    for model in models:
        print(f"== transfer {model} ({policy})", flush=True)
        subprocess.run([sys.executable, __file__, "one", model, "--policy", policy], check=True)


def share_of_max(untuned: float, transferred: float, full: float) -> float:
    """The paper's metric: (S_tt - 1) / (S_full - 1), S = untuned / tuned latency."""
    return (untuned / transferred - 1) / (untuned / full - 1)


def policy_outcome(data: dict, policy: str) -> tuple[float, float]:
    """(estimated latency, estimated search seconds) of ``policy`` from an all-policies run:
    per kernel the fastest of the candidates it picked (or the untuned kernel), and the
    kernel's replay/build/measure time pro rata to the candidates it picked."""
    latency = seconds = 0.0
    for k in data["kernels"]:
        picked = k["chosen"].get(policy, [])
        times = [k["measured"].get(str(w)) for w in picked]
        latency += k["weight"] * min([k["untuned_secs"], *[t for t in times if t is not None]])
        seconds += k["seconds"] * len(picked) / max(1, len(k["measured"]))
    return latency, seconds


def _fmt_s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}"


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transtune.targets import host_info

    runs = {p.stem.rsplit("-", 1)[0]: json.loads(p.read_text())
            for p in sorted(DATA.glob(f"*-{DEFAULT_POLICY}.json"))}  # fmt: skip
    host = host_info()
    lines = [
        "# Transfer-tuning: each model held out of the library in turn",
        "",
        f"Written by `benchmarks/transfer.py`. Host: {host.cpu_model} (`{host.mcpu}`), "
        f"{host.cores} cores, target configuration `host`, TVM 0.27.0; every step ran alone "
        "on the host, each model in a fresh process.",
        "",
        "- **Full tuning** (the reference): each model tuned from scratch by `transtune tune` "
        "(MetaSchedule evolutionary search, XGBoost cost model, synchronous runner, seed "
        f"{reference.SEED}), until every kernel converged for {', '.join(reference.REFERENCE)} "
        f"(`--until-converged`), {reference.COVERAGE_PER_KERNEL} trials per kernel otherwise.",
        f"- **Transfer-tuning**: the held-out model's library holds the best {TOP_K} records "
        "per workload of every other model's full tuning. Each kernel tries at most "
        f"{MAX_CANDIDATES} same-class donor schedules picked by the `{DEFAULT_POLICY}` policy "
        "(an identical kernel of another model counts as a candidate). Search time = the whole "
        "`transfer_tune` call (kernel extraction, untuned measurement, replay, build, "
        "numerics check, measurement).",
        "- **% of max speedup** = (S_tt - 1) / (S_full - 1), S = untuned / tuned end-to-end "
        "latency (the paper's metric); *est.* uses the estimated latency (sum of weight x "
        "standalone kernel latency) instead.",
        "- **MetaSchedule to match**: seconds the full tuning's recorded curve needed to reach "
        "the transfer-tuned estimated latency, and its ratio to the transfer search time.",
        "",
        "| model | kernels | untuned ms | transferred ms | fully tuned ms | PyTorch ms | ORT ms "
        "| % of max | % of max (est.) | transfer s | full tuning s (trials) "
        "| MetaSchedule to match, s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    shares, est_shares, ratios, never = [], [], [], []
    for name, d in runs.items():
        e2e = d["end_to_end"]
        ms_of = {t["runtime"]: t["median_ms"] for part in e2e.values() for t in part["timings"]}
        untuned, tt = ms_of["tvm-untuned"], e2e["transferred"]["timings"][0]["median_ms"]
        full = e2e["full"]["timings"][0]["median_ms"]
        share = share_of_max(untuned, tt, full)
        est = share_of_max(d["estimated_untuned"], d["estimated_transferred"], d["estimated_full"])
        match = d["full_seconds_to_match"]
        ratio = None if match is None else match / d["search_seconds"]
        shares.append(share)
        est_shares.append(est)
        if ratio is not None:
            ratios.append(ratio)
        else:
            never.append((name, d["full_seconds"] / d["search_seconds"]))
        lines.append(
            f"| {name} | {len(d['kernels'])} | {untuned:.1f} | {tt:.1f} | {full:.1f} "
            f"| {ms_of.get('pytorch', math.nan):.1f} | {ms_of.get('onnxruntime', math.nan):.1f} "
            f"| {100 * share:.0f}% | {100 * est:.0f}% | {d['search_seconds']:.0f} "
            f"| {d['full_seconds']:.0f} ({d['full_trials']}) | {_fmt_s(match)} "
            f"| {f'> {never[-1][1]:.1f}x' if ratio is None else f'{ratio:.1f}x'} |"
        )
    if runs:
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
        lines += [
            f"| **mean** | | | | | | | **{100 * mean(shares):.0f}%** "
            f"| {100 * mean(est_shares):.0f}% | | | | **{mean(ratios):.1f}x** |",
            "",
            f"The mean ratio covers the models whose full tuning reached the transfer-tuned "
            f"latency; for {', '.join(n for n, _ in never) or 'none'} it never did (the ratio "
            "is then more than full tuning time / transfer time, shown as a lower bound). Where "
            "transfer-tuning beats full tuning (% of max above 100%), the full tuning at this "
            "budget had not converged: those ratios flatter transfer-tuning, and the budget "
            "should grow where the curve still falls. Run to run, the same schedule measured "
            "on this shared 2-core host varies by up to ~50% per kernel (see the policy table's "
            "note), so single percentages carry that noise. The full-tuning curves stay flat "
            "until MetaSchedule's first round over every kernel (32 candidates each) is joined: "
            "its gradient task scheduler commits a task's results only when it picks the task "
            "again. That is what its database holds at each moment (what a user stopping it "
            "early would get), and it weighs on the time to match.",
            "",
            "Paper (Gibson & Cano, server CPU, 11 models): 49% of the maximum speedup on average, "
            "88% best; the auto-tuner needs 6.5x the transfer search time to match. Goals here: "
            ">= 70% and >= 10x.",
            "",
        ]
    lines += _kernel_notes(runs) + _policy_table()
    _plots(runs, plt)
    lines += ["![% of maximum speedup](transfer.png)", "", "![curves](transfer_curves.png)", ""]
    (OUT / "transfer.md").write_text("\n".join(lines))
    print("\n".join(lines))


def _kernel_notes(runs: dict) -> list[str]:
    lines = [
        "## Candidates",
        "",
        "| model | tried | replay failed | re-fitted | wrong numerics | build/run failed "
        "| kernels improved |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in runs.items():
        ks = d["kernels"]
        total = {
            f: sum(k[f] for k in ks)
            for f in ("tried", "replay_failed", "refitted", "wrong", "failed")
        }
        better = sum(k["best_secs"] < k["untuned_secs"] for k in ks)
        lines.append(
            f"| {name} | {total['tried']} | {total['replay_failed']} | {total['refitted']} "
            f"| {total['wrong']} | {total['failed']} | {better} of {len(ks)} |"
        )
    return [*lines, ""]


def _policy_table() -> list[str]:
    runs = {p.stem.rsplit("-", 1)[0]: json.loads(p.read_text())
            for p in sorted(DATA.glob("*-all.json"))}  # fmt: skip
    if not runs:
        return []
    lines = [
        "## Donor policies, on the same measurements",
        "",
        f"One pass per model measured the union of every policy's picks ({MAX_CANDIDATES} per "
        "kernel each); a policy's result is the fastest of its own picks per kernel, its search "
        "time the pass's per-kernel time pro rata to its picks. Cells: % of max speedup (est.) "
        "/ estimated search seconds. This pass is a separate run from the main table's: the "
        "same schedules measured again differ by up to ~50% per kernel on this host, so compare "
        "policies within a row, not with the main table.",
        "",
        "| model | " + " | ".join(POLICIES) + " |",
        "|---|" + "---|" * len(POLICIES),
    ]
    for name, d in runs.items():
        cells = []
        for policy in POLICIES:
            latency, seconds = policy_outcome(d, policy)
            share = share_of_max(d["estimated_untuned"], latency, d["estimated_full"])
            cells.append(f"{100 * share:.0f}% / {seconds:.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _plots(runs: dict, plt) -> None:
    if not runs:
        return
    names = list(runs)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    shares = []
    for d in runs.values():
        e2e = d["end_to_end"]
        untuned = e2e["untuned"]["timings"][0]["median_ms"]
        tt = e2e["transferred"]["timings"][0]["median_ms"]
        shares.append(100 * share_of_max(untuned, tt, e2e["full"]["timings"][0]["median_ms"]))
    ax.bar(names, shares)
    ax.axhline(49, color="gray", ls="--", label="paper mean (49%)")
    ax.set_ylabel("% of max speedup (end to end)")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(OUT / "transfer.png", dpi=120)
    cols = 3
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, (name, d) in zip(axes.flat, runs.items(), strict=False):
        secs = [p[1] for p in d["curve"]]
        lat = [1e3 * p[2] for p in d["curve"]]
        ax.step(secs, lat, where="post", label="MetaSchedule from scratch")
        ax.plot([d["search_seconds"]], [1e3 * d["estimated_transferred"]], "r*", ms=12,
                label="transfer-tuning")  # fmt: skip
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("seconds")
        ax.set_ylabel("est. latency, ms")
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "transfer_curves.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["tune", "transfer", "one", "report", "library"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help="donor policy, or 'all'")
    parser.add_argument("--minutes", type=float, default=60.0, help="tune: time for this session")
    args = parser.parse_args()
    if args.step == "tune":
        reference.run(args.models or reference.REFERENCE + reference.COVERAGE, args.minutes)
    elif args.step == "transfer":
        transfer(args.models or tuned_models(), args.policy)
    elif args.step == "one":
        transfer_one(args.models[0], args.policy)
    elif args.step == "library":
        ship_library()
    else:
        report()


if __name__ == "__main__":
    main()
