"""The ``transtune`` command line: a thin layer over the library."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .errors import TranstuneError, error_line

console = Console(width=None if sys.stdout.isatty() else 160)


def _cmd_models(args: argparse.Namespace) -> None:
    from rich.progress import track

    from . import zoo

    table = Table(title="transtune model zoo (random weights)")
    for col in ("name", "family", "input", "params (M)", "published (M)", "GFLOPs @ batch 1"):
        table.add_column(col, justify="left" if col in ("name", "family", "input") else "right")
    for spec in track(zoo.list_models(), description="counting", console=console, transient=True):
        module, inputs = zoo.get_model(spec.name)
        shape = "x".join(map(str, inputs[0].shape))
        table.add_row(
            spec.name,
            spec.family,
            shape,
            f"{zoo.count_params(module) / 1e6:.2f}",
            f"{spec.published_params / 1e6:.2f}",
            f"{zoo.count_flops(module, inputs) / 1e9:.2f}",
        )
    console.print(table)


def _cmd_targets(args: argparse.Namespace) -> None:
    from .machine import host_info
    from .targets import host_configs

    host = host_info()
    if args.json:  # what `dataset migrate --cpu` and `library migrate --cpu` take
        configs = {a: {"id": c.name, "target": c.target} for a, c in host_configs().items()}
        print(json.dumps({"cpu": host.cpu(), "configs": configs}, indent=1))
        return
    console.print(
        f"host: {host.cpu_model} ({host.vendor}, family {host.family} model {host.model} "
        f"stepping {host.stepping}), LLVM cpu {host.mcpu}, {host.cores} cores, {host.simd}"
    )
    table = Table(title="target configurations of this host, by hardware id")
    for col in ("hardware id", "alias", "TVM target", "threads", "description"):
        table.add_column(col)
    for c in host_configs().values():
        table.add_row(c.name, c.alias, json.dumps(c.target), str(c.num_threads), c.description)
    console.print(table)


def _cpu_arg(path: str | None) -> dict:
    """The CPU data was measured on: this host, or a ``transtune targets --json`` file."""
    from .machine import host_info

    if path is None:
        return host_info().cpu()
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise TranstuneError(f"--cpu {path}: {err}") from None
    cpu = data.get("cpu", data) if isinstance(data, dict) else None
    if not isinstance(cpu, dict) or not {"model_name", "host_mcpu"} <= set(cpu):
        raise TranstuneError(f"--cpu {path}: not a `transtune targets --json` description")
    return cpu


def _cmd_kernels(args: argparse.Namespace) -> None:
    from .frontend import load
    from .targets import get_config
    from .tasks import extract_kernels

    config = get_config(args.target)
    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    kernels = extract_kernels(model.mod, config.tvm_target())
    table = Table(title=f"{model.name}: {len(kernels)} kernels on {config.name}")
    for col in ("kernel", "class", "weight", "GFLOPs (x weight)", "shapes"):
        table.add_column(col, justify="right" if col in ("weight", "GFLOPs (x weight)") else "left")
    for k in sorted(kernels, key=lambda k: -k.flops * k.weight):
        table.add_row(
            k.name,
            k.kernel_class,
            str(k.weight),
            f"{k.flops * k.weight / 1e9:.3f}",
            k.shape_summary,
        )
    console.print(table)
    classes = {k.kernel_class for k in kernels}
    total = sum(k.flops * k.weight for k in kernels) / 1e9
    console.print(f"{len(kernels)} kernels, {len(classes)} classes, {total:.2f} GFLOPs in all")


def _cmd_bench(args: argparse.Namespace) -> None:
    from .benchmark import RTOL, benchmark
    from .frontend import load
    from .library import open_library
    from .library.database import LibraryDatabase
    from .targets import get_config

    config = get_config(args.target)
    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    library = open_library(args.library, read_only=True) if args.library else None
    database = None
    if args.database:
        from .library.jsondb import open_json_database

        database, report = open_json_database(args.database)
        if report.skipped:
            console.print(f"{args.database}: {report.summary()}", style="yellow")
    elif library is not None:
        database = LibraryDatabase(library, config)
    try:
        result = benchmark(model, config, database, repeat=args.repeat)
    finally:
        if library is not None:
            library.close()
    table = Table(
        title=f"{result.model} on {result.config} ({result.num_threads} threads), "
        f"median of {args.repeat}"
    )
    for col in ("runtime", "median ms", "min..max ms", f"matches {result.reference}"):
        table.add_column(col, justify="left" if col == "runtime" else "right")
    for t in result.timings:
        lo, hi = t.spread_ms
        match = "reference" if t.matches is None else f"{t.matches} ({t.max_rel_err:.1e})"
        table.add_row(t.runtime, f"{t.median_ms:.2f}", f"{lo:.2f}..{hi:.2f}", match)
    console.print(table)
    console.print(
        f"numerics: max|out-ref| <= {RTOL:g} x max|ref|; compile {result.compile_seconds:.1f} s"
    )
    if result.missing_records:
        console.print(f"[yellow]{len(result.missing_records)} kernels had no tuning record")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
        console.print(f"wrote {args.json}")


def _cmd_compile(args: argparse.Namespace) -> None:
    from .compile import compile_model
    from .frontend import load
    from .library import open_library
    from .library.database import LibraryDatabase
    from .targets import get_config

    config = get_config(args.target)
    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    with open_library(args.library, read_only=True) as library:
        compiled = compile_model(model, config, LibraryDatabase(library, config))
    path = compiled.export(args.output)
    console.print(
        f"{model.name} for {config.name}: {len(compiled.applied_records)} kernels with a "
        f"schedule from {args.library}; wrote {path} and {path}.json"
    )
    if compiled.missing_records:
        console.print(
            f"[yellow]{len(compiled.missing_records)} kernels have no record and are built "
            f"untuned: {', '.join(compiled.missing_records)}"
        )


def _cmd_library(args: argparse.Namespace) -> None:
    from .library import open_library
    from .library.jsondb import export_json, import_json

    if args.action == "migrate":
        from .library.migrate import migrate_library

        renamed = migrate_library(args.library, _cpu_arg(args.cpu))
        console.print(
            ", ".join(f"{old} -> {new}" for old, new in renamed.items()) or "already at schema 2"
        )
        return
    with open_library(args.library, read_only=args.action in ("info", "ls", "export")) as lib:
        if args.action == "info":
            info = lib.info()
            for key, value in info.items():
                console.print(f"{key}: {value}")
            if info["foreign_tvm_versions"]:
                console.print(
                    f"[yellow]records written by other TVM versions: {info['foreign_tvm_versions']}"
                    " (their traces may not replay on this TVM)"
                )
        elif args.action == "ls":
            table = Table(title=f"{args.library}: best record per workload and target")
            for col in ("workload", "class", "models", "target", "records", "best ms", "how"):
                table.add_column(col)
            for row in lib.summary():
                table.add_row(*[str(x) for x in row])
            console.print(table)
        elif args.action == "import":
            report = import_json(lib, args.path, model=args.model)
            console.print(report.summary())
            for file, lineno, reason in report.skipped[:20]:
                console.print(f"  skipped {file}:{lineno}: {reason}")
        elif args.action == "export":
            count = export_json(lib, args.path)
            console.print(f"exported {count} records to {args.path}")
        elif args.action == "merge":
            with open_library(args.path, read_only=True) as source:
                workloads, records = lib.merge(source, top_k=args.top_k)
            console.print(f"merged {records} records of {workloads} workloads from {args.path}")


def _cmd_dataset(args: argparse.Namespace) -> None:
    from .dataset import collect, dataset_info, dataset_kernels
    from .dataset.info import export_json
    from .targets import hardware_name

    if args.action == "info":
        for key, value in dataset_info(args.dir).items():
            console.print(f"{key}: {value}")
    elif args.action == "migrate":
        from .dataset.migrate import migrate_dataset

        renamed = migrate_dataset(args.dir, _cpu_arg(args.cpu), redescribe=args.redescribe)
        console.print(
            ", ".join(f"{old} -> {new}" for old, new in renamed.items()) or "already at format 2"
        )
    elif args.action == "prune":
        from .dataset.prune import prune

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


def _progress():
    """A progress display: description, bar, the task's ``info`` field, elapsed time."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip


def _cmd_tune(args: argparse.Namespace) -> None:
    from .tuning import Convergence

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
    from .benchmark import benchmark

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
        timings = benchmark(model, config, None, repeat=3, runtimes=("tvm",)).timings
        bench = wf.benchmark(args.repeat, label="tvm-transferred")
        timings += bench.timings[:1]
        if result.fully_tuned(wf.library):
            full = wf.database(read=("tuned",))
            timings += benchmark(model, config, full, args.repeat, runtimes=("tvm",)).timings
        timings += bench.timings[1:]
    table = Table(title=f"{model.name} end to end, {config.num_threads} threads")
    table.add_column("runtime")
    table.add_column("median ms", justify="right")
    for t in timings:
        table.add_row(t.runtime, f"{t.median_ms:.2f}")
    console.print(table)


def _workflow(args: argparse.Namespace):
    """The workflow of a ``tune``/``transfer`` command: its model, library, target, runner and
    cost model (``--cost-model``, for the device that measures: ``--rpc`` or this host)."""
    from .frontend import load
    from .workflow import Workflow

    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    device = _device(args) if args.rpc else None
    return Workflow(model, args.library, args.target, runner=_runner(args),
                    cost_model=args.cost_model, device=device)  # fmt: skip


def _cmd_costmodel(args: argparse.Namespace) -> None:
    import numpy as np

    from .costmodel import TorchConfig, TorchCostModel, XGBConfig, XGBCostModel, load
    from .costmodel import load_cost_data as load_data
    from .dataset import ReadReport
    from .dataset import splits as sp
    from .targets import hardware_name

    out_dir = Path(args.checkpoint).absolute().parent
    if args.action == "train" and not (out_dir.is_dir() and os.access(out_dir, os.W_OK)):
        raise TranstuneError(f"cannot write {args.checkpoint}: no writable directory {out_dir}")
    report = ReadReport()
    targets = [hardware_name(t) for t in args.targets.split(",")] if args.targets else None
    data = load_data(args.data, targets, report)
    if not len(data):
        raise TranstuneError(f"{args.data}: no usable records ({report.summary()})")
    if args.split == "by-model":
        train, test = sp.by_model(data.workload, data.models, args.hold_out.split(","))
    elif args.split == "by-hardware":
        held = [hardware_name(h) for h in args.hold_out.split(",")]
        train, test = sp.by_hardware(data.target, held)
        if not len(test):
            known = ", ".join(sorted(set(data.target)))
            raise TranstuneError(f"--hold-out names no configuration of {args.data} ({known})")
    elif args.split == "by-task":
        train, test = sp.by_task(data.workload, 0.2, args.seed)
    elif args.split == "within-task":
        train, test = sp.within_task(data.workload, data.target, 0.2, args.seed)
    else:
        train, test = np.arange(len(data)), np.arange(len(data))
    if args.action == "train":
        model = (
            XGBCostModel(XGBConfig(seed=args.seed))
            if args.model == "xgb"
            else TorchCostModel(TorchConfig(arch=args.model, epochs=args.epochs, seed=args.seed))
        )
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


def _device(args: argparse.Namespace):
    """The hardware descriptor of what measures: the RPC device (``--rpc``) or this host."""
    if getattr(args, "_device", None) is None:
        from .hardware import describe
        from .targets import get_config

        config = get_config(args.target)
        if args.rpc:
            from .rpc import connect

            session = connect(args.rpc, args.key)
            args._device = describe(config, session, machine=f"{args.key}@{args.rpc}")
        else:
            args._device = describe(config)
    return args._device


def _runner(args: argparse.Namespace):
    """An RPC runner when ``--rpc`` is given, else None (the local runner)."""
    if not args.rpc:
        return None
    from .measure import EVALUATOR
    from .rpc import rpc_runner
    from .targets import get_config

    threads = get_config(args.target).num_threads
    return rpc_runner(args.rpc, args.key, EVALUATOR, num_threads=threads)


def _cmd_rpc(args: argparse.Namespace) -> None:
    import signal
    import time

    from .rpc import LocalCluster

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


def _positive(kind=int):
    """An argparse type: a number of ``kind`` that is greater than zero."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0 or value != value:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _fraction(text: str) -> float:
    """An argparse type: a fraction in (0, 1]."""
    value = _positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction in (0, 1]")
    return value


def _shape(text: str) -> tuple[str, list[int]]:
    """An argparse type: ``NAME=1x3x224x224``."""
    name, _, dims = text.partition("=")
    try:
        shape = [_positive(int)(d) for d in dims.split("x")]
    except argparse.ArgumentTypeError:
        shape = []
    if not name or not shape:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=DIMxDIM..., e.g. input=1x3x224x224")
    return name, shape


def _positive_list(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated positive integers (``1,4``)."""
    return tuple(_positive(int)(part) for part in text.split(","))


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (``transtune: error: ...``) and exit 2."""

    def error(self, message: str):
        self.exit(2, f"transtune: error: {self.prog.removeprefix('transtune ')}: {message}\n")


def _add_rpc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure on RPC servers of this tracker")
    p.add_argument("--key", default="local", help="device key at the RPC tracker")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="zoo model name (see `transtune models`) or path to an .onnx file")
    p.add_argument("--batch", type=_positive(), default=1, help="batch size (zoo models)")
    p.add_argument("--size", type=_positive(), default=None, help="image side or sequence length")
    p.add_argument("--target", default="host", help="target configuration (`transtune targets`)")
    p.add_argument("--shape", type=_shape, action="append", metavar="NAME=1x3x224x224",
                   help="ONNX files: an input's shape (repeatable)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="transtune", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("models", help="list the model zoo").set_defaults(func=_cmd_models)
    p = sub.add_parser("targets", help="this host's CPU and target configurations")
    p.add_argument("--json", action="store_true", help="as JSON (what migrate --cpu takes)")
    p.set_defaults(func=_cmd_targets)
    p = sub.add_parser("kernels", help="extract and list the tuning kernels of a model")
    _add_model_args(p)
    p.set_defaults(func=_cmd_kernels)
    p = sub.add_parser("bench", help="untuned/tuned TVM vs PyTorch vs ONNX Runtime")
    _add_model_args(p)
    tuned = p.add_mutually_exclusive_group()
    tuned.add_argument("--library", help="schedule library (URL or path) with tuned schedules")
    tuned.add_argument("--database", help="MetaSchedule JSON database work dir")
    p.add_argument("--repeat", type=_positive(), default=5, help="timed repeats per runtime")
    p.add_argument("--json", help="also write the result as JSON to this path")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("compile", help="compile a model with a library's schedules, export it")
    _add_model_args(p)
    p.add_argument("--library", required=True, help="schedule library (URL or path)")
    p.add_argument("-o", "--output", required=True, help="the shared library to write (.so)")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("tune", help="tune a model's kernels into a schedule library")
    _add_model_args(p)
    p.add_argument("--library", default="sqlite:///lib.db", help="library URL or path")
    p.add_argument("--trials", type=_positive(), help="total measured candidates for the model")
    p.add_argument("--time", type=_positive(float), help="time budget of this session, seconds")
    p.add_argument("--per-kernel", type=_positive(), help="cap of measured candidates per kernel")
    p.add_argument("--until-converged", action="store_true",
                   help="tune each kernel until its best flattens (at least 256 candidates, the "
                        "last quarter improving it by under 2%%)")  # fmt: skip
    p.add_argument("--batch-size", type=_positive(), default=32, help="candidates per round")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cost-model", help="a trained cost model (checkpoint) to guide the search")
    _add_rpc_args(p)
    p.set_defaults(func=_cmd_tune)

    p = sub.add_parser("transfer", help="transfer-tune a model from a schedule library")
    _add_model_args(p)
    p.add_argument("--library", default="sqlite:///lib.db", help="library URL or path")
    p.add_argument("--donors", help="comma-separated donor models (default: whole library)")
    p.add_argument("--max-candidates", type=_positive(), default=8,
                   help="donor schedules per kernel")  # fmt: skip
    p.add_argument("--budget", type=_positive(float), help="then continue with search, s")
    p.add_argument(
        "--cost-model",
        help="a trained cost model: measure only the best scored donor schedules per kernel "
        "(--measure-top), and guide the continued search (--budget)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the kernels an interrupted transfer of this model committed",
    )
    p.add_argument("--measure-top", type=_positive(), default=2,
                   help="donor schedules measured per kernel, with --cost-model")  # fmt: skip
    p.add_argument("--repeat", type=_positive(), default=5, help="timed repeats end to end")
    p.add_argument(
        "--policy", default="shape", choices=["shape", "flops", "speed", "coverage"],
        help="how donor schedules are picked per kernel",
    )  # fmt: skip
    _add_rpc_args(p)
    p.set_defaults(func=_cmd_transfer)

    p = sub.add_parser("library", help="inspect, import into and export a schedule library")
    p.add_argument("action", choices=["info", "ls", "import", "export", "merge", "migrate"])
    p.add_argument(
        "path", nargs="?", help="MetaSchedule JSON work dir (import/export), library (merge)"
    )
    p.add_argument("--library", default="sqlite:///lib.db", help="library URL or path")
    p.add_argument("--model", help="import: the model the records belong to")
    p.add_argument("--top-k", type=_positive(), help="merge: only the best K records per workload")
    p.add_argument(
        "--cpu",
        help="migrate: the CPU the records were measured on, as "
        "`transtune targets --json` printed it there (default: this host)",
    )
    p.set_defaults(func=_cmd_library)

    p = sub.add_parser("dataset", help="collect, inspect and export a measured-program dataset")
    p.add_argument("action", choices=["collect", "info", "export", "prune", "migrate"])
    p.add_argument("dir", nargs="?", help="dataset directory (info, export, prune)")
    p.add_argument("--models", default="resnet18", help="collect: comma-separated zoo models")
    p.add_argument("--targets", default="host", help="collect: comma-separated configurations")
    p.add_argument("--per-kernel", type=_positive(), default=32,
                   help="collect: schedules per kernel")  # fmt: skip
    p.add_argument("--batch-sizes", type=_positive_list, default=(1,),
                   help="collect: comma-separated batch sizes")  # fmt: skip
    p.add_argument("--sizes", type=_positive_list,
                   help="collect: comma-separated image sides / sequence lengths")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--programs-from", metavar="HARDWARE_ID",
                   help="collect: measure the programs of this id's records (another CPU's) "
                   "instead of sampling")  # fmt: skip
    p.add_argument("--out", help="collect: dataset directory; export: MetaSchedule work dir")
    p.add_argument("--target", help="export: the configuration to export (default host)")
    p.add_argument("--strategy", default="diversity", help="prune: strategy, or a+b")
    p.add_argument("--keep", type=_fraction, default=0.5, help="prune: fraction of programs kept")
    p.add_argument(
        "--cpu",
        help="migrate: the CPU the data was measured on, as "
        "`transtune targets --json` printed it there (default: this host)",
    )
    p.add_argument(
        "--redescribe",
        action="store_true",
        help="migrate: re-measure the descriptors (on that CPU only)",
    )
    _add_rpc_args(p)
    p.set_defaults(func=_cmd_dataset)

    p = sub.add_parser("costmodel", help="train, evaluate and apply cost models on a dataset")
    p.add_argument("action", choices=["train", "eval", "predict"])
    p.add_argument("data", help="dataset directory")
    p.add_argument("checkpoint", help="cost model file (written by train, read otherwise)")
    p.add_argument("--model", default="attention", choices=["attention", "mlp", "xgb"])
    p.add_argument(
        "--split", default="by-model",
        choices=["by-model", "by-hardware", "by-task", "within-task", "none"],
        help="train on one side, evaluate and predict on the other",
    )  # fmt: skip
    p.add_argument(
        "--hold-out", default="resnet50,mobilenet_v2,resnext50_32x4d,bert_tiny,bert_base",
        help="models (by-model) or configurations (by-hardware) held out",
    )  # fmt: skip
    p.add_argument("--targets", help="only these configurations' records")
    p.add_argument("--epochs", type=_positive(), default=30)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_costmodel)

    p = sub.add_parser("rpc", help="start an RPC tracker and servers on this host to try it out")
    p.add_argument("action", choices=["up"])
    p.add_argument("--servers", type=_positive(), default=2)
    p.add_argument("--key", default="local")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=_positive(), default=9190, help="tracker port")
    p.set_defaults(func=_cmd_rpc)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "tune" and args.trials is args.time is None and not args.until_converged:
        parser.error("tune needs --trials, --time or --until-converged")
    if args.command == "library" and args.action in ("import", "export", "merge") and not args.path:
        parser.error(f"library {args.action} needs a path")
    if args.command == "dataset" and (args.out is None) != (args.action in ("info", "migrate")):
        parser.error(
            "dataset collect, export and prune need --out; info and migrate take the directory"
        )
    if args.command == "dataset" and args.action != "collect" and not args.dir:
        parser.error(f"dataset {args.action} needs the dataset directory")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        args.func(args)
    except TranstuneError as err:
        print(f"transtune: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("transtune: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug, or an input we fail to validate: one line, not a trace
        if args.verbose:
            raise
        print(f"transtune: internal error: {type(err).__name__}: {error_line(err)} "
              "(run with -v for the traceback)", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
