"""The transfer-tuning page: docs/results/transfer.md (+ plots) from the JSON results that
``benchmarks/transfer.py`` writes, and its figures merged into summary.json.

    python benchmarks/transfer_report.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import reference
from common import merge_summary
from transfer import DATA, MAX_CANDIDATES, OUT, PROTOCOLS, STAGES, TOP_K

from transtune.transfer.policies import DEFAULT_POLICY, POLICIES


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


def _medians(e2e: dict) -> dict[str, float]:
    """Median ms by runtime of a run's end-to-end timing: one interleaved comparison, or (in
    results from before it) one benchmark per build."""
    parts = [e2e] if "timings" in e2e else list(e2e.values())
    return {t["runtime"]: t["median_ms"] for part in parts for t in part["timings"]}


def outcome(d: dict) -> dict:
    """The figures of one held-out model's run: latencies, both % of max, time to match."""
    peers = _medians(d["end_to_end"])
    untuned, tt, full = peers["tvm-untuned"], peers["tvm-transferred"], peers["tvm-full"]
    match = d["full_seconds_to_match"]
    return {
        "untuned": untuned, "transferred": tt, "full": full,
        "onnxruntime": peers.get("onnxruntime", math.nan),
        "pytorch": peers.get("pytorch", math.nan),
        "pct_max": share_of_max(untuned, tt, full),
        "pct_max_vs_default": share_of_max(
            d["estimated_default"], d["estimated_transferred"], d["estimated_full"]
        ),
        "match": match,
        "ratio": None if match is None else match / d["search_seconds"],
        "bound": d["full_seconds"] / d["search_seconds"],  # ratio > this when never matched
        # Left at TVM's build without a schedule: no stage gave it a working one (the goal's
        # count); or every schedule that ran measured slower than that build (kept, faster).
        "naive": sum(k["stage"] == "untuned" and not _ran(k) for k in d["kernels"]),
        "naive_fastest": sum(k["stage"] == "untuned" and _ran(k) for k in d["kernels"]),
    }  # fmt: skip


def _ran(kernel: dict) -> bool:
    """Whether any candidate schedule of a kernel (a donor's or a sampled program) built,
    ran and was timed."""
    timed = kernel.get("sampled_timed", 0) > 0
    return timed or any(s is not None for s in kernel["measured"].values())


def _fmt_s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}"


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "# Transfer-tuning: each model held out of the library in turn",
        "",
        "Written by `benchmarks/transfer_report.py`; one section per CPU configuration measured "
        "on (its hardware id: vendor, LLVM mcpu, threads; a `-1c` one is the constrained CPU, "
        "one thread), and each row names the commit and date it was measured at. Every step "
        "ran alone on the host, each model in a fresh process, lowered as "
        f"`{reference.LOWERING}` (data layout and weights: see the ceiling page's levers). The "
        "summary's `transfer.*` figures are the two-thread configuration with the most "
        "held-out models; `transfer.constrained.*` the one-thread configuration's.",
        "",
        "- **Full tuning** (the reference): each model tuned from scratch by `transtune tune` "
        "(MetaSchedule evolutionary search, XGBoost cost model, synchronous runner, seed "
        f"{reference.SEED}) until every kernel converged (at least 256 candidates, the last "
        "quarter improving it by under 2%, at most "
        f"{reference.MAX_PER_KERNEL}), by `benchmarks/reference.py`.",
        f"- **Protocols**: *library* (ours): the best {TOP_K} records per workload of every "
        "other model's reference library, automatic donor selection "
        f"(`{DEFAULT_POLICY}` policy, at most {MAX_CANDIDATES} candidates per kernel) and the "
        "whole cascade (same-class donors, anchor-block donors, sampled programs); *named* "
        "(the paper's): one donor model, same-class replay only.",
        "- **% of max speedup** = (S_tt - 1) / (S_full - 1), the paper's metric, with S = "
        "untuned / tuned latency: *naive* takes the untuned model as TVM's build without "
        "schedules, end to end; *default* takes each kernel's best zero-measurement schedule "
        "(a few programs sampled from its design space, no search: closer to the paper's "
        "untuned TVM, which had default schedules), on estimated latencies (sum of weight x "
        "standalone kernel time).",
        "- **Coverage**: a model is held out once its reference on that configuration has "
        "finished; its donors are the other finished references: that configuration's, else "
        "the same CPU's at another thread count, else another CPU's (the donors column names "
        "the foreign ones: their schedules are replayed and timed here, as the shipped "
        "library's are). Rows measured while few references had finished draw on a small "
        "library; the means are over the rows there are.",
        "- **Clocks**: transfer s = the search without setup (kernel extraction, builder "
        "start, untuned runs), as the full tuning's curve counts its seconds; MetaSchedule "
        "to match = tuning seconds until its curve reached the transfer-tuned estimated "
        "latency, ratio = that / transfer s (a lower bound `>` where it never did; the mean "
        "counts such a model at its bound, and is then a lower bound `>=` too).",
        "",
    ]
    folders = sorted(p for p in DATA.iterdir() if p.is_dir()) if DATA.is_dir() else []
    found = {(f.name, protocol): _runs(f, protocol) for f in folders for protocol in PROTOCOLS}
    host = reference.folder().parent.name

    def most(constrained: bool) -> str | None:  # the configuration a summary figure is from
        names = [f.name for f in folders if f.name.endswith("-1c") == constrained]
        return max(names, key=lambda n: (len(found[n, "library"]), n == host), default=None)

    headline, constrained = most(False), most(True)
    areas = {headline: "transfer", constrained: "transfer.constrained"}
    figures: dict[str, dict] = {}  # hardware id -> its summary figures
    plots = {}
    for hardware in sorted({h for h, _ in found}, key=lambda h: (h != headline, h)):
        for protocol in PROTOCOLS:
            runs = found[hardware, protocol]
            title = " (the constrained CPU)" if hardware.endswith("-1c") else ""
            lines += [f"## `{hardware}`{title}: protocol {protocol}", ""]
            if not runs:
                lines += ["Not measured yet (too few finished references).", ""]
                continue
            lines += _table(runs, protocol, hardware)
            if area := areas.get(hardware):
                rows = {m: outcome(d) for m, d in runs.items()}
                prefix = f"{area}." if protocol == "library" else f"{area}.named."
                figures.setdefault(hardware, {}).update(_figures(prefix, rows))
            if hardware == headline:
                plots[protocol] = (runs, {m: outcome(d) for m, d in runs.items()})
    lines += [
        "Paper (Gibson & Cano, server CPU, 11 models): 49% of the maximum speedup on average, "
        "88% best; the auto-tuner needs 6.5x the transfer search time to match. Goals here: "
        ">= 70% and >= 10x, no kernel left naive.",
        "",
    ]
    if "library" in plots:
        lines += _kernel_notes(plots["library"][0], headline)
    lines += _policy_table()
    if plots:
        _plots(plots, plt)
        lines += ["![% of maximum speedup](transfer.png)", "", "![curves](transfer_curves.png)",
                  ""]  # fmt: skip
    (OUT / "transfer.md").write_text("\n".join(lines))
    print("\n".join(lines))
    for hardware, values in figures.items():  # with the latest measurement's meta
        latest = max((d["meta"] for (h, _), runs in found.items() if h == hardware
                      for d in runs.values()), key=lambda m: m.get("date", ""))  # fmt: skip
        merge_summary(areas[hardware], values, meta=latest)


def _runs(folder: Path, protocol: str) -> dict[str, dict]:
    """The held-out models' results of ``protocol`` in ``folder`` (one CPU configuration)."""
    runs = {p.stem.removesuffix(f"-{protocol}"): json.loads(p.read_text())
            for p in sorted(folder.glob(f"*-{protocol}.json"))}  # fmt: skip
    return {m: d for m, d in runs.items() if "end_to_end" in d}


def _donors(d: dict, protocol: str, hardware: str) -> str:
    """The donors cell: the named donor or how many models, and the foreign CPUs' ones."""
    foreign = {m: h for m, h in d.get("donor_hardware", {}).items() if h != hardware}
    if protocol == "named":
        (name,) = d["donors"]
        return name + (f" ({foreign[name]})" if name in foreign else "")
    cpus = ", ".join(sorted(set(foreign.values())))
    return f"{len(d['donors'])} models" + (f" ({len(foreign)} from {cpus})" if foreign else "")


def _table(runs: dict[str, dict], protocol: str, hardware: str) -> list[str]:
    """One configuration's table of held-out models under ``protocol``, with its means."""
    lines = [
        "| model | donors | naive ms | transferred ms | full ms | ORT ms | PyTorch ms "
        "| transferred / ORT | % of max (naive) | % of max (default) | transfer s "
        "| full tuning s (trials) | MetaSchedule to match, s | ratio "
        "| kernels won: transfer / anchor / sampled / naive | measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = {m: outcome(d) for m, d in runs.items()}
    for name, d in runs.items():
        o = rows[name]
        won = " / ".join(str(d["stages"].get(s, 0)) for s in STAGES)
        ratio = f"> {o['bound']:.1f}x" if o["ratio"] is None else f"{o['ratio']:.1f}x"
        meta = d.get("meta", {})
        lines.append(
            f"| {name} | {_donors(d, protocol, hardware)} | {o['untuned']:.1f} "
            f"| {o['transferred']:.1f} | {o['full']:.1f} | {o['onnxruntime']:.1f} "
            f"| {o['pytorch']:.1f} | {o['transferred'] / o['onnxruntime']:.2f} "
            f"| {100 * o['pct_max']:.0f}% | {100 * o['pct_max_vs_default']:.0f}% "
            f"| {d['search_seconds']:.0f} | {d['full_seconds']:.0f} ({d['full_trials']}) "
            f"| {_fmt_s(o['match'])} | {ratio} | {won} | {meta.get('mcpu', '?')}, "
            f"{meta.get('commit', '?')}, {meta.get('date', '?')} |"
        )
    f = _figures("", rows)
    matched = (
        f"({f['mean_match_ratio_matched']:.1f}x over the {len(rows) - f['match_never']} matched)"
        if f["mean_match_ratio_matched"] is not None
        else ""
    )
    shown = (f"**>= {f['mean_match_ratio']:.1f}x** {matched}" if f["match_never"]
             else f"**{f['mean_match_ratio']:.1f}x**")  # fmt: skip
    lines += [
        f"| **mean** | | | | | | | | **{f['mean_pct_max']:.0f}%** "
        f"| **{f['mean_pct_max_vs_default']:.0f}%** | | | | {shown} | {f['naive_kernels']} "
        f"naive in all (+{f['naive_fastest_kernels']} where the naive build measured faster "
        "than every schedule tried) | |",
        "",
    ]
    return lines


def _figures(prefix: str, rows: dict[str, dict]) -> dict:
    """The summary's figures of one table (``rows``: :func:`outcome` per model), in percent
    as the goals state them. A model MetaSchedule never matched counts at its lower bound in
    the mean ratio, which is then a lower bound too."""
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    matched = [o["ratio"] for o in rows.values() if o["ratio"] is not None]
    return {
        f"{prefix}mean_pct_max": 100 * mean([o["pct_max"] for o in rows.values()]),
        f"{prefix}mean_pct_max_vs_default":
            100 * mean([o["pct_max_vs_default"] for o in rows.values()]),
        f"{prefix}mean_match_ratio":
            mean([o["bound"] if o["ratio"] is None else o["ratio"] for o in rows.values()]),
        f"{prefix}match_never": len(rows) - len(matched),
        f"{prefix}mean_match_ratio_matched": mean(matched) if matched else None,
        f"{prefix}naive_kernels": sum(o["naive"] for o in rows.values()),
        f"{prefix}naive_fastest_kernels": sum(o["naive_fastest"] for o in rows.values()),
        f"{prefix}models": len(rows),  # the means are over these held-out models
    }  # fmt: skip


def _kernel_notes(runs: dict, hardware: str) -> list[str]:
    lines = [
        f"## Candidates (`{hardware}`, library protocol)",
        "",
        "| model | tried | replay failed | re-fitted | wrong numerics | build/run failed "
        "| kernels improved | why kernels stayed naive |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, d in runs.items():
        ks = d["kernels"]
        total = {
            f: sum(k[f] for k in ks)
            for f in ("tried", "replay_failed", "refitted", "wrong", "failed")
        }
        better = sum(k["best_secs"] < k["untuned_secs"] for k in ks)
        why = "; ".join(f"{k['name']}: {(k['errors'] or ['nothing beat the naive build'])[0]}"
                        for k in ks if k["stage"] == "untuned")  # fmt: skip
        lines.append(
            f"| {name} | {total['tried']} | {total['replay_failed']} | {total['refitted']} "
            f"| {total['wrong']} | {total['failed']} | {better} of {len(ks)} | {why or '-'} |"
        )
    return [*lines, ""]


def _policy_table() -> list[str]:
    runs = {f"{p.stem.rsplit('-', 1)[0]} (`{p.parent.name}`)": json.loads(p.read_text())
            for p in sorted(DATA.glob("*/*-all.json"))}  # fmt: skip
    if not runs:
        return []
    lines = [
        "## Donor policies, on the same measurements",
        "",
        f"One pass per model measured the union of every policy's picks ({MAX_CANDIDATES} per "
        "kernel each); a policy's result is the fastest of its own picks per kernel, its search "
        "time the pass's per-kernel time pro rata to its picks. Cells: % of max speedup (est., "
        "naive) / estimated search seconds. This pass is a separate run from the main table's: "
        "compare policies within a row, not with the main table.",
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


def _plots(plots: dict, plt) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(plots)
    names = sorted({m for runs, _ in plots.values() for m in runs})
    for i, (protocol, (_, rows)) in enumerate(plots.items()):
        ax.bar([j + i * width for j in range(len(names))],
               [100 * rows[m]["pct_max"] if m in rows else 0 for m in names], width,
               label=f"{protocol} protocol")  # fmt: skip
    ax.axhline(49, color="gray", ls="--", label="paper mean (49%)")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], names)
    ax.set_ylabel("% of max speedup (naive, end to end)")
    ax.legend(fontsize=7)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(OUT / "transfer.png", dpi=120)
    runs = plots.get("library", next(iter(plots.values())))[0]
    cols = 3
    rows = math.ceil(len(runs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, (name, d) in zip(axes.flat, runs.items(), strict=False):
        ax.step([p[1] for p in d["curve"]], [1e3 * p[2] for p in d["curve"]], where="post",
                label="MetaSchedule from scratch")  # fmt: skip
        for protocol, (other, _) in plots.items():
            if name in other:
                ax.plot([other[name]["search_seconds"]],
                        [1e3 * other[name]["estimated_transferred"]], "*", ms=12,
                        label=f"transfer ({protocol})")  # fmt: skip
        ax.set(yscale="log", title=name, xlabel="tuning seconds", ylabel="est. latency, ms")
    for ax in axes.flat[len(runs) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "transfer_curves.png", dpi=120)


if __name__ == "__main__":
    report()
