"""Commands that search: ``tune``, ``transfer``, and ``rpc up`` for trying RPC out."""

from __future__ import annotations

import argparse
import time
from collections import Counter

from rich.table import Table

from .common import (
    _device,
    _progress,
    _workflow,
    console,
)


def _cmd_tune(args: argparse.Namespace) -> None:
    from ..tuning import Convergence

    with _workflow(args) as wf, _progress() as progress:
        model = wf.model
        bar = progress.add_task(f"tuning {model.name}", total=args.trials or args.time, info="")

        def update(tuner) -> None:
            _, _, latency = tuner.curve[-1]
            done = tuner.new_trials if args.trials else tuner.elapsed() - tuner.seconds0
            info = f"{tuner.new_trials} trials, est. {1e3 * latency:.2f} ms"
            if tuner.until is not None:
                converged = sum(tuner.converged(s) for s in tuner.states)
                info += f", {converged}/{len(tuner.states)} kernels converged"
            progress.update(bar, completed=done, info=info)

        result = wf.tune(
            trials=args.trials, per_kernel=args.per_kernel, time_budget=args.time,
            num_trials_per_iter=args.batch_size, seed=args.seed, on_update=update,
            device=_device(args).as_dict() if args.rpc else None,
            until=Convergence() if args.until_converged else None,
        )  # fmt: skip
    table = Table(
        title=f"{model.name} on {result.config}: {result.new_trials} new trials "
        f"in {result.seconds:.0f} s (stopped: {result.stopped})"
    )
    for col in ("kernel", "class", "weight", "trials", "untuned ms", "best ms", "speedup"):
        table.add_column(col, justify="left" if col in ("kernel", "class") else "right")
    for s in result.kernels:
        table.add_row(
            s.kernel.name, s.kernel.kernel_class, str(s.kernel.weight), str(s.trials),
            f"{1e3 * s.untuned_secs:.3f}", f"{1e3 * s.best_secs:.3f}", f"{s.speedup:.1f}x",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"estimated latency: untuned {1e3 * result.untuned_latency:.2f} ms -> "
        f"tuned {1e3 * result.estimated_latency:.2f} ms; {result.failures} failed candidates"
    )


def _cmd_transfer(args: argparse.Namespace) -> None:
    from ..benchmark import benchmark

    with _workflow(args) as wf:
        model, config = wf.model, wf.config
        with console.status(f"transfer-tuning {model.name}") as status:
            result = wf.transfer(
                donors=args.donors.split(",") if args.donors else None,
                max_candidates=args.max_candidates, policy=args.policy,
                measure_top=args.measure_top, resume=args.resume,
                on_kernel=lambda k: status.update(f"{k.kernel.name}: {k.speedup:.1f}x"),
                device=_device(args).as_dict() if args.rpc else None,
            )  # fmt: skip
        table = Table(
            title=f"{model.name}: transfer-tuning on {config.name}, {args.policy} policy "
            f"({result.search_seconds:.0f} s search)"
        )
        columns = ("kernel", "class", "weight", "stage", "donor", "tried", "failed", "untuned ms",
                   "transferred ms", "speedup")  # fmt: skip
        for col in columns:
            table.add_column(
                col, justify="left" if col in ("kernel", "class", "stage", "donor") else "right"
            )
        for k in result.kernels:
            table.add_row(
                k.kernel.name, k.kernel.kernel_class, str(k.kernel.weight), k.stage,
                k.donor or (f"{k.sampled} sampled" if k.sampled else "-"),
                str(k.tried), str(k.replay_failed + k.wrong + k.failed),
                f"{1e3 * k.untuned_secs:.3f}", f"{1e3 * k.best_secs:.3f}", f"{k.speedup:.1f}x",
            )  # fmt: skip
        console.print(table)
        stages = Counter(k.stage for k in result.kernels)
        console.print("kernels by stage: " + ", ".join(f"{n} {s}" for s, n in stages.items()))
        if args.budget:
            tuned = wf.tune(
                time_budget=args.budget, device=_device(args).as_dict() if args.rpc else None
            )
            console.print(f"search continued for {tuned.seconds:.0f} s: {tuned.new_trials} trials")
        bench = wf.benchmark(args.repeat, label="tvm-transferred")
        timings = bench.timings[:1]
        if result.fully_tuned(wf.library):
            full = wf.database(read=("tuned",))
            timings += benchmark(model, config, full, args.repeat, runtimes=("tvm",)).timings
        timings += bench.timings[1:]
    table = Table(title=f"{model.name} end to end, {config.num_threads} threads")
    table.add_column("runtime")
    table.add_column("median ms", justify="right")
    # TVM's naive build is not run end to end (on ResNeXt-50, 12 s a run): its kernels' times
    # measured above, weighted by their counts, estimate it.
    table.add_row("tvm-untuned (sum of kernels)", f"{1e3 * result.untuned_latency:.2f}")
    for t in timings:
        table.add_row(t.runtime, f"{t.median_ms:.2f}")
    console.print(table)
    _report_untuned(result, bench.missing_records)


def _report_untuned(result, missing: list[str]) -> None:
    """Why each kernel no stage improved was left as it is, and how many kernels the model
    compiled without a schedule (``missing``: the compiled model's kernels with no record)."""
    for k in result.kernels:
        if k.stage != "untuned":
            continue
        why = f"{k.tried} donor schedules and {k.sampled} sampled programs tried"
        if k.errors:
            why += f", {len(k.errors)} failed (first: {k.errors[0][:120]})"
        if k.kernel.name in missing:  # every stage failed, or nothing beat TVM's build
            console.print(f"{k.kernel.name} stays at TVM's default build: {why}, none faster")
        else:  # an identical kernel's record (of another model) was in the library before
            console.print(f"{k.kernel.name}: {why}, none faster than TVM's build; compiled "
                          "with the library's record of this kernel")  # fmt: skip
    console.print(f"compiled without a schedule: {len(missing)} of {len(result.kernels)} kernels")


def _cmd_rpc(args: argparse.Namespace) -> None:
    import signal

    from ..rpc import LocalCluster

    # SIGTERM (a service manager, `kill`) stops the tracker and servers as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with LocalCluster(args.servers, args.key, args.host, args.port) as cluster:
        console.print(
            f"RPC tracker at {cluster.tracker} with {args.servers} servers (key {args.key!r}); "
            f"use --rpc {cluster.tracker} --key {args.key}. Ctrl-C stops them."
        )
        try:
            while all(p.poll() is None for p in cluster.processes):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    console.print("stopped")
