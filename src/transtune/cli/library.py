"""The ``library`` command: info, ls, import, export, merge, migrate."""

from __future__ import annotations

import argparse

from rich.table import Table

from .common import (
    _cpu_arg,
    console,
)


def _cmd_library(args: argparse.Namespace) -> None:
    from ..library import open_library
    from ..library.database import export_json, import_json

    if args.action == "migrate":
        from ..library.migrate import migrate_library

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
