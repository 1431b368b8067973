"""Commands on models: ``models``, ``targets``, ``kernels``, ``bench``, ``compile``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.table import Table

from .common import _config, console


def _cmd_models(args: argparse.Namespace) -> None:
    from rich.progress import track

    from .. import zoo

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
    from ..machine import host_info
    from ..targets import host_configs

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


def _cmd_kernels(args: argparse.Namespace) -> None:
    from ..frontend import load
    from ..tasks import extract_kernels

    config = _config(args)
    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    kernels = extract_kernels(model.mod, config)
    table = Table(title=f"{model.name}: {len(kernels)} kernels on {config.name}, {config.layout}")
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
    from ..benchmark import RTOL, benchmark
    from ..frontend import load
    from ..library import open_library
    from ..library.database import LibraryDatabase

    config = _config(args)
    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    library = open_library(args.library, read_only=True) if args.library else None
    database = None
    if args.database:
        from ..library.database import open_json_database

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
    from ..compile import compile_model
    from ..frontend import load
    from ..library import open_library
    from ..library.database import LibraryDatabase

    config = _config(args)
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
