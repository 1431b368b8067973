"""Transfer to other real CPUs -> docs/results/hardware.md (+ hardware_transfer-<id>.png).

    python benchmarks/hardware.py collect [--minutes M]   # on a CPU the dataset lacks; alone
    python benchmarks/hardware.py costmodel [--new ID] [--source-cpu CPU] [--seeds 0,1,2]
    python benchmarks/hardware.py schedules [MODEL ...]   # on the new CPU; alone
    python benchmarks/hardware.py report

``collect``: the dataset's programs (those measured on the full-ISA 2-thread configuration of
the CPU with the most records) measured again on this host's ``host`` and ``host-1core``, model
by model and pass by pass as ``benchmarks/dataset.py`` collected them, test models first (each
a fresh, resumable ``transtune dataset collect --programs-from`` process). Once this CPU has
every kernel of theirs, it says so: deepen that CPU's data instead (``deep.py``).

``costmodel``: pre-trained on every configuration of one CPU (the one with the most records,
whose programs the others measured again), evaluated on half of the new CPU's kernels (a
full-ISA 2-thread id; default: of the best-measured other CPU), adapted with the records of k%
of the other half: zero-shot, fine-tuned (validation-picked epochs, the pre-trained weights
kept when no epoch beats them), trained from scratch on the same k%, XGBoost on the source
CPU's data plus the k%, the lookup baseline per source configuration (the same program's
latency there), and the lookup plus a correction learned on the k% (the headline model); and,
for programs measured nowhere, the same pre-training without the evaluated kernels ("blind"),
fine-tuned, against XGBoost and against the network trained on the k% alone.
Metrics: PCA, peak@1, TenSet's top-1/top-5 network score. Each fit is a resumable step.

``schedules``: each model held out, transfer-tuned on this CPU from the other CPU's finished
reference libraries (their records replayed and rebuilt for this target), and from this CPU's
own when it has them (once measuring every replayed candidate, once with the shipped cost
model choosing the 2 to measure and ranking the sampled stage: ``make demo``'s default on a
CPU the model was trained on, passed explicitly here), timed end to end, interleaved, beside
this CPU's own tuning of the model (its reference library, finished or as far as it got; its
curve says how long it took to reach each transfer's estimated latency), ONNX Runtime and
PyTorch.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

import adaptation
import dataset
import deep
import numpy as np
import reference
from common import CHECKPOINT, ROOT, merge_summary, meta_line, time_to_reach, write_result
from resume import Steps, snapshot
from transfer import donor_library

OUT = ROOT / "docs" / "results"
DATA = OUT / "hardware"
EPOCHS = 15
MODELS = ["resnet50", "mobilenet_v2", "resnext50_32x4d", "bert_base"]
MAX_CANDIDATES = 8
RESIDUAL = "lookup-residual"  # the headline model: it reuses the other CPU's measurements


def collect(minutes: float) -> None:
    from transtune.dataset import load_records
    from transtune.machine import host_info

    here, held = host_info().mcpu, dataset.cpus()
    table = load_records(dataset.DATASET, ["workload"])[0]
    by_id = _records_by_id(table)
    sources = [i for cpu, ids in held.items() if cpu != here and (i := dataset.full_isa(ids))]
    if not sources:
        raise SystemExit(f"{dataset.DATASET} holds no other CPU's full-ISA 2-thread configuration")
    source = max(sources, key=lambda i: by_id.get(i, 0))
    mine = dataset.full_isa(held.get(here, []))
    if mine and _kernels(table, mine) >= _kernels(table, source):
        print(f"this CPU ({here}) has every kernel of {source} already: deepen it instead, "
              "python benchmarks/deep.py")  # fmt: skip
        return
    models = dataset.TEST_MODELS + [m for m in dataset.MODELS if m not in dataset.TEST_MODELS]
    print(f"measuring the programs of {source} on host, host-1core", flush=True)
    options = ("--programs-from", source, "--trajectory", str(deep.DEEP_TRAJECTORY))
    dataset.collect(minutes, models, "host,host-1core", options)


def _records_by_id(table) -> dict[str, int]:
    """Records per hardware id in ``table``."""
    return {c["values"]: c["counts"] for c in table["target"].value_counts().to_pylist()}


def _kernels(table, hw_id: str) -> int:
    """Distinct kernels ``hw_id`` has records of in ``table``."""
    import pyarrow.compute as pc

    return len(pc.unique(table.filter(pc.equal(table["target"], hw_id))["workload"]))


def costmodel(new: str | None, source_cpu: str | None, seeds: list[int]) -> None:
    import pyarrow.compute as pc

    from transtune.costmodel import load_cost_data
    from transtune.dataset import load_records

    held = dataset.cpus()
    if len(held) < 2:
        raise SystemExit(
            f"the dataset holds one CPU ({', '.join(held)}): collect a second one first "
            "(python benchmarks/hardware.py collect, on another CPU)"
        )
    table = load_records(dataset.DATASET, ["status"])[0]
    by_id = _records_by_id(table.filter(pc.equal(table["status"], "ok")))
    count = {cpu: sum(by_id.get(i, 0) for i in ids) for cpu, ids in held.items()}
    source_cpu = source_cpu or max(count, key=count.get)  # the CPU the programs came from
    if source_cpu not in held:
        raise SystemExit(f"the dataset has no CPU {source_cpu!r} (it has {', '.join(held)})")
    others = {cpu: n for cpu, n in count.items() if cpu != source_cpu}
    second = dataset.full_isa(held[max(others, key=others.get)])  # of the best-measured other CPU
    new = new or second
    if new is None:
        raise SystemExit("that CPU has no full-ISA 2-thread configuration: give --new")
    new_cpu = next((cpu for cpu, ids in held.items() if new in ids), None)
    if new_cpu is None:
        raise SystemExit(f"the dataset has no hardware id {new!r}")
    if new_cpu == source_cpu:
        raise SystemExit(f"{new} ran on the pre-training CPU ({source_cpu}): pick another")
    sources = held[source_cpu]
    path = DATA / f"steps-{new}.json"
    pinned = snapshot(path)  # a run across sessions keeps the dataset it started with
    data = load_cost_data(dataset.DATASET, collected_before=pinned)
    records = int(np.isin(data.target, [new, *sources]).sum())
    steps = Steps(path, {"snapshot": pinned, "records": records, "new": new, "sources": sources,
                         "epochs": EPOCHS})  # fmt: skip
    rows = []
    for seed in seeds:
        rows += adaptation.rows(data, new, sources, seed, steps, EPOCHS, blind=True)
    result = write_result(DATA / f"costmodel-{new}.json", {
        "new": new, "sources": sources, "epochs": EPOCHS, "seeds": seeds,
        "records_new": int((data.target == new).sum()),
        "records_sources": int(np.isin(data.target, sources).sum()), "rows": rows,
    })  # fmt: skip
    fraction, over_lookup = adaptation.headline(adaptation.means(result["rows"]), RESIDUAL)
    figures = {f"hardware.{new}.k5_fraction_of_full": fraction,
               f"hardware.{new}.k5_minus_lookup_pca": over_lookup}  # fmt: skip
    if new == second and len(seeds) >= 3:  # the headline: the best-measured other CPU, 3 seeds
        figures |= {"hardware.k5_fraction_of_full": fraction,
                    "hardware.k5_minus_lookup_pca": over_lookup}  # fmt: skip
    merge_summary("hardware", figures)


def schedules(models: list[str]) -> None:
    from transtune.benchmark import compare
    from transtune.frontend import from_zoo
    from transtune.library import open_library
    from transtune.library.database import LibraryDatabase
    from transtune.transfer.search import MEASURE_TOP
    from transtune.workflow import Workflow

    config = reference.config()
    root = reference.folder().parent.parent  # data/library/reference
    others = [p / reference.LOWERING for p in sorted(root.iterdir())
              if p.name != config.name and (p / reference.LOWERING).is_dir()]  # fmt: skip
    for name in models:
        model = from_zoo(name)
        builds, rows = {"untuned": (config, None)}, {}
        with tempfile.TemporaryDirectory() as tmp:
            libraries = {}
            # Each donor CPU twice: every replayed candidate measured, and the shipped cost
            # model choosing the 2 to measure and ranking the sampled stage.
            for folder, guide in itertools.product([*others, reference.folder()],
                                                   [None, CHECKPOINT]):  # fmt: skip
                label = f"from {folder.parent.name}" + (", cost model" if guide else "")
                path = Path(tmp) / f"{label}.db"
                donors = {p.stem: p for p in sorted(folder.glob("*.db"))
                          if p.stem != name and reference.finished(p)}  # fmt: skip
                if not donors:
                    continue
                donor_library(path, donors)
                lib = libraries[label] = open_library(path)
                with Workflow(model, lib, config, cost_model=guide) as wf:
                    result = wf.transfer(donors=list(donors), max_candidates=MAX_CANDIDATES,
                                         measure_top=MEASURE_TOP if guide else None)  # fmt: skip
                builds[label] = (config, LibraryDatabase(lib, config))
                rows[label] = {"donors": list(donors),
                               "estimated_ms": 1e3 * result.estimated_latency,
                               "search_seconds": result.search_seconds,
                               "stages": _stages(result)}  # fmt: skip
            mine = reference.folder() / f"{name}.db"
            own = libraries["own"] = open_library(mine, read_only=True) if mine.is_file() else None
            if own and (run := own.tune_run(name)) is not None:  # this CPU's own tuning, so far
                curve = own.curve(run)
                trials, seconds, latency = curve[-1]
                label = "full tuning" if own.get_meta(reference.FINISHED) else "own, unfinished"
                builds[label] = (config, LibraryDatabase(own, config, read=("tuned",)))
                rows[label] = {"trials": trials, "estimated_ms": 1e3 * latency,
                               "search_seconds": seconds, "curve": curve}  # fmt: skip
            e2e = compare(model, builds, repeat=10)
            for lib in filter(None, libraries.values()):
                lib.close()
        write_result(DATA / f"schedules-{config.name}-{name}.json", {
            "model": name, "config": config.name, "lowering": reference.LOWERING,
            "cost_model": CHECKPOINT.relative_to(ROOT).as_posix(),  # the ", cost model" rows
            "transfers": rows, "end_to_end": e2e.to_json(),
        }, config.num_threads)  # fmt: skip


def _own_to_match(transfers: dict, own: dict) -> list[str]:
    """Lines saying how long this CPU's own tuning took to reach each transfer's estimate."""
    lines = []
    for label, x in transfers.items():
        if "stages" not in x:
            continue
        reached = time_to_reach(own["curve"], x["estimated_ms"] / 1e3)
        ratio = (reached if reached is not None else own["search_seconds"]) / x["search_seconds"]
        lines.append(
            f"- *{label}* (est. {x['estimated_ms']:.2f} ms in {x['search_seconds']:.0f} s): "
            + (f"this CPU's own tuning reached it after {reached:.0f} s, {ratio:.1f}x the "
               "transfer's search time." if reached is not None else
               f"this CPU's own tuning had not reached it after {own['search_seconds']:.0f} s "
               f"({own['trials']:,} trials), > {ratio:.1f}x the transfer's search time.")
        )  # fmt: skip
    return lines


def _stages(result) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in result.kernels:
        out[k.stage] = out.get(k.stage, 0) + 1
    return out


def _same_programs(hardware: dict) -> list[str]:
    """The Markdown section comparing, per thread count, each CPU's full-ISA id with the ids of
    the best-measured CPU (each ISA build) on the programs both measured: the median latency
    ratio, the median per-kernel Spearman correlation of the two orders, and how often they
    agree on the fastest program."""
    import pyarrow.compute as pc

    from transtune.dataset import load_records

    table = load_records(dataset.DATASET, ["workload", "sample", "status", "mean_secs"])[0]
    table = table.filter(pc.equal(table["status"], "ok"))
    latency: dict[str, dict[tuple[str, int], float]] = {}
    columns = (table[c].to_pylist() for c in ("target", "workload", "sample", "mean_secs"))
    for target, w, sample, secs in zip(*columns, strict=True):
        latency.setdefault(target, {})[w, sample] = secs
    lines = ["", "## The same programs on both CPUs", "",
             "Programs measured successfully on both ids; the ratio is the new id's latency "
             "over the other's; the rank correlation is Spearman's over each kernel's programs "
             "(kernels with at least 5 in common), its median over kernels.", "",
             "| ids | programs on both | kernels | latency ratio, median (p10..p90) "
             "| rank correlation, median | same fastest program |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    held = dataset.cpus()
    base_cpu = max(held, key=lambda cpu: sum(len(latency.get(i, {})) for i in held[cpu]))
    for threads in (2, 1):
        others = [dataset.full_isa(ids, threads) for cpu, ids in held.items() if cpu != base_cpu]
        bases = [i for i in held[base_cpu] if hardware[i]["threads"] == threads]
        pairs = [(o, b) for o in others if o in latency for b in bases if b in latency]
        for other, base in pairs:
            common = sorted(set(latency[other]) & set(latency[base]))
            ratio = np.asarray([latency[other][k] / latency[base][k] for k in common])
            by_kernel: dict[str, list[tuple[str, int]]] = {}
            for key in common:
                by_kernel.setdefault(key[0], []).append(key)
            rho, same = [], []
            for keys in by_kernel.values():
                if len(keys) < 5:
                    continue
                a = np.asarray([latency[base][k] for k in keys])
                b = np.asarray([latency[other][k] for k in keys])
                rho.append(np.corrcoef(a.argsort().argsort(), b.argsort().argsort())[0, 1])
                same.append(a.argmin() == b.argmin())
            p10, p50, p90 = np.percentile(ratio, [10, 50, 90]) if len(ratio) else [np.nan] * 3
            lines.append(f"| `{other}` vs `{base}` | {len(common):,} | {len(by_kernel)} "
                         f"| {p50:.2f} ({p10:.2f}..{p90:.2f}) | {np.median(rho):.2f} "
                         f"| {np.mean(same):.0%} of {len(same)} |")  # fmt: skip
    return lines


def report() -> None:
    from transtune.dataset import dataset_info

    info = dataset_info(dataset.DATASET)
    lines = ["# Hardware: the same programs on several real CPUs", "",
             "Written by `benchmarks/hardware.py report`.", "", "## The CPUs", "",
             "| hardware id | as | CPU | LLVM CPU | family/model | threads | L1d / L2 / L3 KiB "
             "| SIMD bits | peak GFLOP/s | bandwidth GB/s | records |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for hw_id, d in sorted(info["hardware"].items()):
        fp = d.get("fingerprint", {})
        lines.append(
            f"| `{hw_id}` | {d.get('config')} | {d.get('device')} | {fp.get('host_mcpu')} "
            f"(build {fp.get('mcpu')}) | {fp.get('family', '?')}/{fp.get('model', '?')} "
            f"| {d.get('threads')} | {d.get('l1d_kib')} / {d.get('l2_kib')} / {d.get('l3_kib')} "
            f"| {d.get('simd_bits')} | {d.get('measured_peak_gflops', 0):.0f} "
            f"| {d.get('measured_bandwidth_gbs', 0):.0f} "
            f"| {info['by_hardware'].get(hw_id, {}).get('records', 0):,} |"
        )
    lines += _same_programs(info["hardware"])
    for path in sorted(DATA.glob("costmodel-*.json")):
        result = json.loads(path.read_text())
        mean = adaptation.means(result["rows"])
        lines += ["", f"## Cost models on `{result['new']}`", "", meta_line(result.get("meta")),
                  "", f"Pre-trained on {', '.join(f'`{s}`' for s in result['sources'])} "
                  f"({result['records_sources']:,} records); evaluated on half of "
                  f"`{result['new']}`'s kernels, adapted with k% of the other half; seeds "
                  f"{result['seeds']} (mean, PCA spread max - min). Attention model, "
                  f"{result['epochs']} epochs; fine-tuning {max(5, result['epochs'] // 3)}. "
                  f"The best lookup is `{adaptation.best_lookup(mean)}`.", ""]  # fmt: skip
        for method in (RESIDUAL, "fine-tune"):
            fraction, over = adaptation.headline(mean, method)
            lines.append(f"- With 5% of the adaptation kernels, **{method}** reaches "
                         f"{fraction:.1%} of the best PCA fitted on all of them (goal 95%), "
                         f"{over:+.3f} PCA over the best lookup (goal > 0).")  # fmt: skip
        blind = adaptation.blind_line(mean)
        lines += [*([blind] if blind else []), "", *adaptation.table(mean)]
        plot = f"hardware_transfer-{result['new']}.png"
        adaptation.plot(mean, result["new"], OUT / plot)
        lines += ["", f"![transfer]({plot})"]
    for path in sorted(DATA.glob("schedules-*.json")):
        r = json.loads(path.read_text())
        timings = {t["runtime"]: t for t in r["end_to_end"]["timings"]}
        lines += ["", f"## Schedules across CPUs: {r['model']} on `{r['config']}`", "",
                  meta_line(r.get("meta")), "", "Transfer: 8 replayed candidates a kernel, all "
                  + (f"measured; in the *cost model* rows `{r['cost_model']}` picks the 2 to "
                     "measure and ranks the sampled stage's programs (4 measured either way)."
                     if r.get("cost_model") else "measured (a run before the cost-model rows)."),
                  "", "| build | donors | stages | est. ms | search s | end to end ms "
                  "(min..max) |", "|---|---|---|---|---|---|"]  # fmt: skip
        own = next((x for x in r["transfers"].values() if "curve" in x), None)
        for label, t in timings.items():
            x = r["transfers"].get(label, {})
            stages = ", ".join(f"{s} {n}" for s, n in x.get("stages", {}).items())
            stages = stages or (f"{x['trials']:,} trials" if "trials" in x else "")
            spread = f"{t['median_ms']:.2f} ({t['min_ms']:.2f}..{t['max_ms']:.2f})"
            lines.append(f"| {label} | {', '.join(x.get('donors', []))} | {stages} "
                         f"| {x.get('estimated_ms', float('nan')):.2f} "
                         f"| {x.get('search_seconds', float('nan')):.0f} | {spread} |")  # fmt: skip
        if own:
            lines += ["", *_own_to_match(r["transfers"], own)]
    (OUT / "hardware.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT / 'hardware.md'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["collect", "costmodel", "schedules", "report"])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--new", help="costmodel: the new CPU's hardware id")
    parser.add_argument("--source-cpu", help="costmodel: the LLVM cpu to pre-train on "
                        "(default: the one with the most records)")  # fmt: skip
    parser.add_argument("--seeds", default="0", help="costmodel: comma-separated seeds")
    args = parser.parse_args()
    if args.step == "collect":
        collect(args.minutes)
    elif args.step == "costmodel":
        costmodel(args.new, args.source_cpu, [int(s) for s in args.seeds.split(",")])
        report()
    elif args.step == "schedules":
        schedules(args.models or MODELS)
        report()
    else:
        report()


if __name__ == "__main__":
    main()
