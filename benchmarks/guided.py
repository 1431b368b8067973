"""Guided search benchmark -> docs/results/guided.md (+ guided_<hardware id>.png).

On zoo models held out of the cost model's training data, tuning runs per model and seed from
the same start (an empty library for the model), one after the other, each in a fresh process,
alone on the host:

- ``stock``: MetaSchedule's evolutionary search with its XGBoost cost model from scratch, for
  at least ``--stock-budget`` seconds and then on until its curve flattens (``FLAT``:
  its last quarter of time cut the estimate by under 2%), at most ``--stock-max``: the
  reference every arm is measured against; the page states how much its last quarter cut;
- ``guided``: the same search scored by the pre-trained cost model (``LearnedCostModel``,
  updated online from the new measurements), with ``GUIDED_SEARCH``'s smaller population;
- ``transfer+guided``: transfer-tuning from the shipped schedule library with the model held
  out (its own tunings, in any lowering, and workloads identical to one of its kernels are
  left out of the copy; the latter counted; ``--donors-at COMMIT``: the library as committed
  then, so that later seeds transfer from the library the first one had), measuring only
  the two donor schedules per kernel the cost model scores best if it was trained on this
  CPU (else every replayed one, up to 8: ``transfer_tune``'s default), then the guided
  search seeded with the transferred schedules, for what is left of the budget;
- ``stock@16`` (ablation): stock MetaSchedule with the guided arms' round size *and*
  population, so that it differs from ``guided`` in the cost model alone;
- ``guided+ft``, ``transfer+guided+ft``: the guided arms with the checkpoint fine-tuned on 5%
  of this configuration's kernels (a seeded draw; none of the held-out models'), made by the
  first run that needs it and kept beside the checkpoint, named by the hardware id.

Every arm's clock starts after kernel extraction, the builder's start and the untuned
measurement (``tune`` starts its curve there; the transfer step's own are subtracted).

The time each needs to reach the same seed's stock run's final estimated latency is read off
the curves (estimated latency = sum over kernels of weight x best measured latency), as a
share of the time the stock run took to get there; means and spreads over the seeds.

    python benchmarks/guided.py train [--epochs 15]     # checkpoint without the held-out nets
    python benchmarks/guided.py run [--models m1,m2] [--seeds 0,1,2] [--budget 1200]
        [--stock-budget 2400] [--stock-max 7200] [--arms stock,guided,...]
    python benchmarks/guided.py report [--hardware ID]   # the summary takes ID's figures

Runs are kept per hardware id (``docs/results/guided/<id>/``): arms and seeds compare only on
the configuration they ran on; the page has a section per configuration, and the summary's
figures are one's (default: of those where every seed of some arm reached stock's final,
the one with the most seeds, then runs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import (
    CHECKPOINT,
    SHIPPED,
    merge_summary,
    meta_lines,
    run_meta,
    time_to_reach,
    write_result,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "guided"
DATASET = ROOT / "data" / "dataset"
SHIPPED_NAME = SHIPPED.relative_to(ROOT).as_posix()  # as git names it
# Held out of the cost model's training data (TenSet's held-out networks); the transfer arm
# leaves the library's schedules of them out of its donors.
MODELS = ("mobilenet_v2", "resnext50_32x4d", "bert_base")
ARMS = ("stock", "guided", "transfer+guided", "stock@16", "guided+ft", "transfer+guided+ft")
FINE_TUNE_SHARE = 0.05  # of the configuration's kernels: the seed paper's "at most 5%"
# Candidates measured per search round. Stock keeps MetaSchedule's default, which its XGBoost
# trained from scratch needs to learn from; a pre-trained model's top 16 are worth measuring,
# so the guided arms spread the same time over more rounds (and more kernels early on).
PER_ITER = {"stock": 64, "guided": 16, "transfer+guided": 16, "stock@16": 16}
FLAT = 0.02  # the stock arm runs on until its last quarter of time cut the estimate by less


def train(epochs: int) -> None:
    from transtune.dataset.splits import TENSET_HELD_OUT

    CHECKPOINT.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "transtune.cli", "costmodel", "train", str(DATASET),
         str(CHECKPOINT), "--model", "attention", "--epochs", str(epochs), "--split", "by-model",
         "--hold-out", ",".join(TENSET_HELD_OUT)],
        check=True,
    )  # fmt: skip


def base(which: str) -> str:
    """The arm ``which`` runs (a ``+ft`` arm: the same with the fine-tuned checkpoint)."""
    return which.removesuffix("+ft")


def fine_tuned_path(hardware: str) -> Path:
    return CHECKPOINT.with_name(f"{CHECKPOINT.stem}-ft-{hardware}.json")


def fine_tune(hardware: str, seed: int = 0) -> Path:
    """The checkpoint fine-tuned on ``FINE_TUNE_SHARE`` of ``hardware``'s kernels in the
    dataset (a seeded draw; none of a held-out model's); made once, then kept."""
    import numpy as np

    from transtune.costmodel import load, load_cost_data
    from transtune.dataset.splits import by_model

    out = fine_tuned_path(hardware)
    if out.is_file():
        return out
    data = load_cost_data(DATASET, [hardware])
    kernels = np.unique(data.workload[by_model(data.workload, data.models)[0]])
    if not len(kernels):
        raise SystemExit(f"{DATASET} has no records of {hardware} outside the held-out models: "
                         "collect some first (python benchmarks/hardware.py collect)")  # fmt: skip
    np.random.default_rng(seed).shuffle(kernels)
    chosen = kernels[: max(1, round(FINE_TUNE_SHARE * len(kernels)))]
    rows = np.flatnonzero(np.isin(data.workload, chosen))
    tuned = load(CHECKPOINT).fine_tuned(data, rows)
    tuned.save(out)
    best = tuned.history.get("best_epoch", -1)
    print(f"{out.relative_to(ROOT)}: fine-tuned on {len(rows)} records of {len(chosen)} of "
          f"{hardware}'s {len(kernels)} kernels ("
          + (f"epoch {best} kept" if best >= 0 else "no epoch beat the pre-trained weights")
          + ")", flush=True)  # fmt: skip
    return out


def donor_library(commit: str | None, tmp: Path) -> tuple[Path, str]:
    """The shipped library the transfer arm copies its donors from, as committed at
    ``commit`` (written under ``tmp``) or else the working tree's, and its name for the page
    (path@commit, the run's commit for the working tree's)."""
    if commit is None:
        return SHIPPED, f"{SHIPPED_NAME}@{run_meta()['commit']}"
    shown = subprocess.run(
        ["git", "show", f"{commit}:{SHIPPED_NAME}"], cwd=ROOT, capture_output=True
    )
    if shown.returncode:
        raise SystemExit(f"no {SHIPPED_NAME} at commit {commit}: {shown.stderr.decode().strip()}")
    path = tmp / "donors.db"
    path.write_bytes(shown.stdout)
    return path, f"{SHIPPED_NAME}@{commit}"


def arm(
    model_name: str,
    which: str,
    budget: float,
    seed: int,
    checkpoint: Path,
    out: Path,
    stock_max: float | None = None,
    donors_at: str | None = None,
):
    """One tuning run, in this process (the stock arm runs on past ``budget`` while its curve
    falls, up to ``stock_max`` seconds; the transfer arm's donors: :func:`donor_library`)."""
    from transtune.library import open_library
    from transtune.transfer.search import measured_per_kernel
    from transtune.tuning import GUIDED_SEARCH, Flattening
    from transtune.workflow import Workflow

    kind = base(which)
    run_on = (Flattening(max(budget, stock_max or budget), tolerance=FLAT) if kind == "stock"
              else None)  # fmt: skip
    search = None if kind == "stock" else GUIDED_SEARCH
    guide = None if kind.startswith("stock") else checkpoint
    offset, start_points, excluded, transfer = 0.0, [], 0, {}
    with tempfile.TemporaryDirectory() as tmp, open_library(Path(tmp) / "lib.db") as lib:
        with Workflow(model_name, lib, "host", cost_model=guide) as wf:
            if kind == "transfer+guided":
                donors_path, donors_name = donor_library(donors_at, Path(tmp))
                with open_library(donors_path, read_only=True) as shipped:
                    same = {shipped.find_workload(k.mod) for k in wf.kernels} - {None}
                    # the model's own tunings (in other lowerings) are held out too
                    lib.merge(shipped, exclude=same, exclude_models=[model_name])
                excluded = len(same)
                donors = lib.info()["models"]
                if model_name in donors or lib.tune_run(model_name):  # its own tuning
                    raise SystemExit(f"{donors_name} holds {model_name}'s own tuned schedules")
                measure_top = measured_per_kernel(wf.cost_model, wf.config, None)
                result = wf.transfer(donors=donors, measure_top=measure_top)
                transfer = {"transfer_measure_top": measure_top,  # None: every replayed one
                            "donors": donors_name}  # fmt: skip
                offset = result.search_seconds - result.setup_seconds
                start_points = [(0, 0.0, result.untuned_latency),
                                (0, offset, result.estimated_latency)]  # fmt: skip
            tuned = wf.tune(time_budget=budget - offset, num_trials_per_iter=PER_ITER[kind],
                            search=search, seed=seed, run_on=run_on)  # fmt: skip
            threads, kernels = wf.config.num_threads, len(wf.kernels)
    curve = start_points + [(t, offset + s, lat) for t, s, lat in tuned.curve]
    write_result(out, {
        "model": model_name, "arm": which, "seed": seed, "budget": budget,
        "run_on": run_on and run_on.__dict__,
        "checkpoint": str(checkpoint.relative_to(ROOT)) if checkpoint.is_relative_to(ROOT)
        else str(checkpoint),
        "exact_matches_excluded": excluded, "transfer_seconds": offset, **transfer,
        "kernels": kernels, "curve": curve,
    }, threads)  # fmt: skip


def result_path(hardware: str, model: str, which: str, seed: int) -> Path:
    """Runs are kept per hardware id: seeds and arms compare only on the same CPU."""
    return DATA / hardware / f"{model}_{which}_s{seed}.json"


def run(models, arms, seeds, budget: float, stock_budget: float, stock_max: float,
        donors_at: str | None = None) -> None:  # fmt: skip
    from transtune.targets import get_config

    hardware = get_config("host").name
    for seed in seeds:
        for model in models:
            for which in arms:
                out = result_path(hardware, model, which, seed)
                if out.exists():  # resumable: delete an arm's file to run it again
                    print(f"{model} s{seed}: {which} done before ({out})", flush=True)
                    continue
                print(f"{model} s{seed}: {which} ...", flush=True)
                seconds = stock_budget if which == "stock" else budget
                checkpoint = fine_tune(hardware) if which.endswith("+ft") else CHECKPOINT
                subprocess.run(
                    [sys.executable, __file__, "arm", model, which, "--budget", str(seconds),
                     "--stock-max", str(stock_max), "--seeds", str(seed),
                     "--checkpoint", str(checkpoint), "--out", str(out)]
                    + ["--donors-at", donors_at] * bool(donors_at),
                    check=True,
                )  # fmt: skip


def runs(hardware: str) -> dict[str, dict[str, dict[int, dict]]]:
    """model -> arm -> seed -> result, of the runs made on these terms on ``hardware`` (results
    of the earlier single-seed protocol, in ``DATA`` itself and with no seed, are left out)."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for path in sorted((DATA / hardware).glob("*.json")):
        r = json.loads(path.read_text())
        if "seed" in r:
            out.setdefault(r["model"], {}).setdefault(r["arm"], {})[r["seed"]] = r
    return out


def shares(by_arm: dict[str, dict[int, dict]], which: str) -> list[float | None]:
    """Per seed with both runs: ``which``'s time to reach the same seed's stock final, as a
    share of the time stock took to get there (None: never reached)."""
    out = []
    for seed, stock in sorted(by_arm.get("stock", {}).items()):
        other = by_arm.get(which, {}).get(seed)
        if other is None:
            continue
        final = stock["curve"][-1][2]
        t, reference = time_to_reach(other["curve"], final), time_to_reach(stock["curve"], final)
        out.append(None if t is None or not reference else t / reference)
    return out


def _search_start(run: dict) -> int:
    """Trials in the library when the search began (a transfer run's curve starts with the
    untuned and the transferred estimates, at 0 trials)."""
    return run["curve"][2 if run.get("transfer_seconds") else 0][0]


def kernel_count(by_arm: dict[str, dict[int, dict]]) -> int | None:
    """The model's tuning kernels, as its runs recorded them (None: none did)."""
    return max((r["kernels"] for by_seed in by_arm.values() for r in by_seed.values()
                if "kernels" in r), default=None)  # fmt: skip


def last_quarter(curve: list) -> float | None:
    """How much of its estimate a run's last quarter of time took off."""
    from transtune.tuning import tail_cut

    return tail_cut((s, lat) for _, s, lat in curve)


def _trained_on(checkpoint: str, hardware: str) -> str:
    """Which configurations' records ``checkpoint`` was trained on, and whether ``hardware``'s
    CPU was among them."""
    from transtune.machine import cpu_of

    path = Path(checkpoint) if Path(checkpoint).is_absolute() else ROOT / checkpoint
    ids = json.loads(path.read_text()).get("trained_on", []) if path.is_file() else []
    mine = cpu_of(hardware) in {cpu_of(i) for i in ids}
    return (f"trained on {', '.join(ids)}: " if ids else "trained on unrecorded ids: ") + (
        "this CPU among them" if mine else "none of this CPU's records"
    )


def report(hardware: str | None = None) -> None:
    """guided.md: a section per configuration with runs; the summary's figures come from
    ``hardware``'s (default: of the hardware ids with figures, where every seed of some arm
    reached stock's final, the one with the most seeds, then runs), which comes first."""
    from transtune.targets import hardware_name
    from transtune.tuning import GUIDED_SEARCH

    folders = [p for p in DATA.iterdir() if p.is_dir()] if DATA.is_dir() else []
    ran = {p.name: len(list(p.glob("*.json"))) for p in folders}
    sections = {h: _section(h) for h in ran}
    seeds = {h: figures.get("guided.seeds", 0) for h, (_, figures, _) in sections.items()}
    hardware = hardware_name(hardware) if hardware else max(
        ran, key=lambda h: (seeds[h], ran[h], h), default="none")  # fmt: skip
    if hardware not in sections:
        sections[hardware] = _section(hardware)
    lines = [
        "# Tuning guided by the pre-trained cost model",
        "",
        "Written by `benchmarks/guided.py`, one section per CPU configuration (its hardware "
        f"id); the summary's `guided.*` figures are `{hardware}`'s. "
        "`data/costmodel/attention-by-model.json`, the guided arms' cost model, was trained on "
        "`data/dataset` without the kernels of TenSet's held-out networks (so none of these "
        f"models' kernels); the `+ft` arms' copy of it was then fine-tuned on "
        f"{FINE_TUNE_SHARE:.0%} of the configuration's kernels (a seeded draw, none of the "
        "held-out models'; a tenth of the learning rate, the epoch picked on a fifth of those "
        "kernels). Donor library for transfer: `data/library/zoo-host.db`, without the "
        "model's own tunings (any lowering) and any workload identical to one of its kernels. "
        "Every run alone on the host, in a fresh process, from an empty library for the model; "
        "every clock starts after kernel extraction and the untuned measurement; the transfer "
        "step counts in the time. Candidates per search round: "
        + ", ".join(f"{a} {n}" for a, n in PER_ITER.items())
        + f". Evolutionary search population: stock 512 (MetaSchedule's default), the others "
        f"{GUIDED_SEARCH['population_size']} (`transtune.tuning.GUIDED_SEARCH`; `stock@16` "
        "differs from `guided` in the cost model alone). Transfer measures the 2 donor "
        "schedules per kernel the cost model scores best if it was trained on this CPU, else "
        "every replayed one, up to 8.",
        "",
        "Final: the estimate at the end of each arm's run (mean over the seeds with a stock "
        "run), after the seconds given; rounds a kernel: the trials measured over the round "
        "size and the model's kernels (MetaSchedule's gradient task scheduler gives every "
        "kernel one round in turn, largest share first, before it favours the kernels of the "
        "largest weighted latency per round; below 1, some kernels were never searched). "
        "Share: the first point of an arm's curve at or below the same seed's stock final "
        "estimate, over the time stock took to get there; mean over seeds (spread = max - "
        "min). Stock ran: its mean seconds (at least its budget, then on while its curve fell, "
        f"up to a cap). Stock's last quarter: how much of its estimate the last quarter of its "
        f"time took off (under {FLAT:.0%}: flattened; runs made before the stock arm ran on "
        "stopped at their budget). Goals: guided <= 25%, transfer+guided <= 10% of stock's "
        "time.",
        "",
    ]
    for h in [hardware] + sorted(h for h in ran if h != hardware):
        section, figures, latest = sections[h]
        lines += section
        if h == hardware and figures:
            merge_summary("guided", figures, meta=latest)
    (OUT / "guided.md").write_text("\n".join(lines))
    print("\n".join(lines))


def _section(hardware: str) -> tuple[list[str], dict, dict | None]:
    """One configuration's section of guided.md and its plot; its summary figures (none
    where some arm has no mean share) and its latest run's metadata."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = runs(hardware)
    guides = sorted({r["checkpoint"] for arms in done.values() for which, by_seed in arms.items()
                     if not which.startswith("stock") for r in by_seed.values()})  # fmt: skip
    transfers = [(seed, r) for arms in done.values() for which, by_seed in arms.items()
                 if base(which) == "transfer+guided" for seed, r in by_seed.items()]  # fmt: skip
    tops = sorted({str(r.get("transfer_measure_top", "all")) for _, r in transfers})
    donors: dict[str, set[int]] = {}
    for seed, r in transfers:  # runs before --donors-at: the run's commit's library
        donors.setdefault(r.get("donors") or f"{SHIPPED_NAME}@{r['meta']['commit']}",
                          set()).add(seed)  # fmt: skip
    models = [m for m, arms in done.items() if "stock" in arms]
    metas = {
        f"{m} {a} s{seed}": r.get("meta")
        for m in models
        for a, by_seed in done[m].items()
        for seed, r in by_seed.items()
    }
    lines = [
        f"## `{hardware}`",
        "",
        "Cost model of the guided arms: "
        + (", ".join(f"`{g}` ({_trained_on(g, hardware)})" for g in guides) or "none ran")
        + ". Donor schedules measured per kernel by transfer: "
        + (", ".join("all" if t in ("None", "all") else t for t in tops) or "no transfer run")
        + ". Donor library: "
        + (
            ", ".join(f"`{d}` (seed {', '.join(map(str, sorted(s)))})" for d, s in donors.items())
            or "no transfer run"
        )
        + ".",
        "",
        *meta_lines(metas),
        "",
    ]
    if not models:
        lines += [f"No stock run on `{hardware}` on these terms yet, so nothing to compare "
                  "(`python benchmarks/guided.py run`).", ""]  # fmt: skip
        return lines, {}, None
    compared = [a for a in ARMS[1:] if any(a in done[m] for m in models)]
    lines += [
        "| model | seeds | stock budget s | stock ran s | stock final ms | "
        "stock's last quarter | "
        + " | ".join(f"{a}: share of stock's time (spread)" for a in compared) + " |",
        "|---|---:|---:|---:|---:|---:|" + "---:|" * len(compared),
    ]  # fmt: skip
    means: dict[str, list[float]] = {a: [] for a in compared}
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.8))
    axes = np.atleast_1d(axes)
    for ax, model in zip(axes, models, strict=True):
        by_arm = done[model]
        stock = list(by_arm["stock"].values())
        cells = []
        for which in compared:
            got = shares(by_arm, which)
            reached = [x for x in got if x is not None]
            if not got:
                cells.append("not run")
                continue
            if len(reached) == len(got):
                means[which].append(float(np.mean(reached)))
            cells.append(f"{np.mean(reached):.0%} ({np.ptp(reached):.0%})"
                         + (f", {len(got) - len(reached)} never" if len(reached) < len(got)
                            else "") if reached else "never")  # fmt: skip
        lines.append(
            f"| {model} | {len(stock)} | {stock[0]['budget']:.0f} "
            f"| {np.mean([r['curve'][-1][1] for r in stock]):.0f} "
            f"| {1e3 * np.mean([r['curve'][-1][2] for r in stock]):.2f} "
            f"| {np.mean([last_quarter(r['curve']) for r in stock]):.1%} | "
            + " | ".join(cells)
            + " |"
        )
        for which, by_seed in by_arm.items():
            for seed, r in sorted(by_seed.items()):
                c = r["curve"]
                ax.plot([q[1] for q in c], [1e3 * q[2] for q in c], drawstyle="steps-post",
                        label=which if seed == min(by_seed) else None,
                        color=f"C{ARMS.index(which)}", alpha=0.8)  # fmt: skip
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_xlabel("tuning time, s")
        ax.set_ylabel("estimated latency, ms (log)")
        ax.legend(fontsize=8)
    mean = {w: float(np.mean(v)) for w, v in means.items() if v}
    arms = [a for a in ARMS if any(a in done[m] for m in models)]
    lines += ["", "| model | kernels | " + " | ".join(f"{a}: final ms (s, rounds a kernel)"
                                                   for a in arms) + " |",
              "|---|---:|" + "---:|" * len(arms)]  # fmt: skip
    for model in models:
        count = kernel_count(done[model])
        stocked = done[model]["stock"]  # seeds with a stock run, as in the shares
        cells = []
        for a in arms:
            rs = [r for seed, r in done[model].get(a, {}).items() if seed in stocked]
            per = [(r["curve"][-1][0] - _search_start(r)) / PER_ITER[base(a)] for r in rs]
            rounds = f"{np.mean(per) / count:.1f}" if count and rs else "?"
            cells.append(f"{1e3 * np.mean([r['curve'][-1][2] for r in rs]):.2f} "
                         f"({np.mean([r['curve'][-1][1] for r in rs]):.0f}, {rounds})"
                         if rs else "not run")  # fmt: skip
        lines.append(f"| {model} | {count or '?'} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Mean share over the models where every seed reached it: "
        + (", ".join(f"{w} {m:.0%}" for w, m in mean.items()) or "none")
        + ".",
        "",
        f"![curves](guided_{hardware}.png)",
        "",
    ]
    fig.tight_layout()
    fig.savefig(OUT / f"guided_{hardware}.png", dpi=110)
    plt.close(fig)
    latest = max(filter(None, metas.values()), key=lambda m: m.get("date", ""), default=None)
    figures = {}
    if mean:  # an arm that never reached stock's final in some seed has no mean share
        figures = {"guided.seeds": min(len(done[m]["stock"]) for m in models)}
        figures.update({f"guided.{key}": mean[arm] for arm, key in
                        (("guided", "mean_share"), ("transfer+guided", "transfer_mean_share"),
                         ("guided+ft", "ft_mean_share"),
                         ("transfer+guided+ft", "transfer_ft_mean_share"))
                        if arm in mean})  # fmt: skip
    return lines, figures, latest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["train", "run", "arm", "report"])
    parser.add_argument("model", nargs="?")
    parser.add_argument("which", nargs="?", choices=ARMS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=float, default=1200.0, help="seconds, the guided arms")
    parser.add_argument(
        "--stock-budget", type=float, default=2400.0, help="seconds, stock at least"
    )
    parser.add_argument(
        "--stock-max",
        type=float,
        default=7200.0,
        help="seconds, stock at most (it runs on while its curve falls)",
    )
    parser.add_argument("--checkpoint", type=Path, default=CHECKPOINT, help="arm: its model")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--donors-at", help="transfer from the shipped library as of a commit")
    parser.add_argument("--epochs", type=int, default=15, help="train: epochs (as costmodel.py)")
    parser.add_argument("--hardware", help="report: whose figures (default: most seeds, runs)")
    args = parser.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        parser.error(f"unknown arms {', '.join(sorted(unknown))} (of {', '.join(ARMS)})")
    if args.step == "train":
        train(args.epochs)
    elif args.step == "arm":
        arm(
            args.model,
            args.which,
            args.budget,
            seeds[0],
            args.checkpoint.resolve(),
            args.out,
            args.stock_max,
            args.donors_at,
        )
    elif args.step == "run":
        run(
            args.models.split(","),
            args.arms.split(","),
            seeds,
            args.budget,
            args.stock_budget,
            args.stock_max,
            args.donors_at,
        )
        report(args.hardware)
    else:
        report(args.hardware)


if __name__ == "__main__":
    main()
