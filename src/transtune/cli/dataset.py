"""The ``dataset`` and ``costmodel`` commands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.table import Table

from ..errors import TranstuneError
from .common import (
    _cpu_arg,
    _progress,
    console,
)


def _hardware_table(by_hardware: dict, hardware: dict) -> Table:
    """Records per hardware id, beside what each id ran on."""
    table = Table(title="records by hardware id")
    for column in ("hardware id", "as", "CPU (LLVM cpu)", "family/model", "built for"):
        table.add_column(column)
    for column in ("threads", "peak GFLOP/s", "records", "ok", "kernels"):
        table.add_column(column, justify="right")
    for hw_id, row in sorted(by_hardware.items()):
        d = hardware.get(hw_id, {})
        fp = d.get("fingerprint", {})
        peak = d.get("measured_peak_gflops")
        table.add_row(
            hw_id, str(row["as"]), row["cpu"], f"{fp.get('family', '?')}/{fp.get('model', '?')}",
            str(fp.get("mcpu", "?")),
            str(d.get("threads", "?")), f"{peak:.0f}" if peak else "?", str(row["records"]),
            str(row["ok"]), str(row["kernels"]),
        )  # fmt: skip
    return table


def _cmd_dataset(args: argparse.Namespace) -> None:
    from ..dataset import collect, dataset_info, dataset_kernels
    from ..dataset.info import export_json
    from ..targets import hardware_name

    if args.action == "info":
        info = dataset_info(args.dir)
        for key, value in info.items():
            if key not in ("by_hardware", "hardware"):
                console.print(f"{key}: {value}")
        console.print(_hardware_table(info["by_hardware"], info["hardware"]))
    elif args.action == "migrate":
        from ..dataset.migrate import migrate_dataset

        renamed = migrate_dataset(args.dir, _cpu_arg(args.cpu), redescribe=args.redescribe)
        console.print(
            ", ".join(f"{old} -> {new}" for old, new in renamed.items()) or "already at format 2"
        )
    elif args.action == "prune":
        from ..dataset.prune import prune

        summary = prune(args.dir, args.out, args.strategy, args.keep, args.seed)
        console.print(
            f"kept {summary['programs']} of {summary['of']} programs ({args.strategy}), "
            f"{summary['records']} records, in {args.out}"
        )
    elif args.action == "export":
        target = hardware_name(args.target or "host")
        count = export_json(args.dir, args.out, target)
        console.print(f"exported {count} records of {target} to {args.out}")
    else:
        sizes = args.sizes or (None,)
        batches = args.batch_sizes
        with console.status("extracting kernels"):
            kernels = dataset_kernels(args.models.split(","), batches, sizes)
        with _progress() as progress:
            bar = progress.add_task(f"{len(kernels)} kernels", total=len(kernels), info="")

            def update(_kernel, stats) -> None:
                info = (f"{stats.records} records, {stats.failures} failed, "
                        f"{stats.records_per_minute:.0f}/min")  # fmt: skip
                done = stats.kernels_done + stats.kernels_skipped + stats.kernels_without_space
                progress.update(bar, completed=done, info=info)

            stats = collect(
                args.out, kernels, args.targets.split(","), args.per_kernel, args.seed, update,
                rpc=args.rpc, key=args.key,
                programs_from=hardware_name(args.programs_from) if args.programs_from else None,
                trajectory=args.trajectory,
            )  # fmt: skip
        console.print(
            f"{stats.records} new records ({stats.failures} failed) for {stats.kernels_done} "
            f"kernels in {stats.seconds:.0f} s ({stats.records_per_minute:.0f} records/min); "
            f"{stats.kernels_skipped} kernels already complete, {stats.kernels_without_space} "
            "without a design space or program to take"
            + (f", {stats.not_rebuilt} programs did not rebuild" if stats.not_rebuilt else "")
            + ("; interrupted, rerun to resume" if stats.interrupted else "")
        )
        if stats.interrupted:
            raise KeyboardInterrupt


def _cmd_costmodel(args: argparse.Namespace) -> None:
    from ..costmodel import create, load
    from ..costmodel import load_cost_data as load_data
    from ..dataset import ReadReport
    from ..dataset import splits as sp
    from ..targets import hardware_name

    out_dir = Path(args.checkpoint).absolute().parent
    if args.action == "train" and not (out_dir.is_dir() and os.access(out_dir, os.W_OK)):
        raise TranstuneError(f"cannot write {args.checkpoint}: no writable directory {out_dir}")
    report = ReadReport()
    targets = [hardware_name(t) for t in args.targets.split(",")] if args.targets else None
    data = load_data(args.data, targets, report)
    if not len(data):
        raise TranstuneError(f"{args.data}: no usable records ({report.summary()})")
    held = args.hold_out.split(",")
    if args.split == "by-hardware":
        held = [hardware_name(h) for h in held]
    train, test = sp.make(args.split, data, held, seed=args.seed)
    if args.split == "by-hardware" and not len(test):
        known = ", ".join(sorted(set(data.target)))
        raise TranstuneError(f"--hold-out names no configuration of {args.data} ({known})")
    if args.action == "train":
        model = create(args.model, seed=args.seed, epochs=args.epochs)
        with _progress() as progress:
            what = f"training {args.model} on {len(train)} records"
            if args.model == "xgb":
                progress.add_task(what, total=None, info="")
                model.fit(data, train)
            else:
                bar = progress.add_task(what, total=args.epochs, info="")

                def epoch_done(epoch: int, loss: float) -> None:
                    info = f"epoch {epoch + 1}, loss {loss:.4f}"
                    progress.update(bar, completed=epoch + 1, info=info)

                model.fit(data, train, on_epoch=epoch_done)
        model.save(args.checkpoint)
        console.print(f"saved {args.checkpoint}")
    else:
        model = load(args.checkpoint)
    if args.action == "predict":
        for w, t, lat, score in zip(
            data.workload[test], data.target[test], data.latency[test], model.predict(data, test),
            strict=True,
        ):  # fmt: skip
            console.print(f"{w}\t{t}\t{1e3 * lat:.4f} ms\tscore {score:.4f}")
        return
    table = Table(title=f"{args.checkpoint} on {len(test)} held-out records ({args.split})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in model.score(data, test).items():
        table.add_row(key, f"{value:.4f}")
    console.print(table)
