"""What the commands share: the console, argument types and parsers, the workflow, device
and runner built from the arguments."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from ..errors import TranstuneError
from ..targets import DEFAULT_LAYOUT, LAYOUTS

console = Console(width=None if sys.stdout.isatty() else 160)


def _cpu_arg(path: str | None) -> dict:
    """The CPU data was measured on: this host, or a ``transtune targets --json`` file."""
    from ..machine import host_info

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


def _progress():
    """A progress display: description, bar, the task's ``info`` field, elapsed time."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip


def _workflow(args: argparse.Namespace):
    """The workflow of a ``tune``/``transfer`` command: its model, library, target, runner and
    cost model (``--cost-model``, for the device that measures: ``--rpc`` or this host)."""
    from ..frontend import load
    from ..workflow import Workflow

    model = load(args.model, args.batch, args.size, dict(args.shape or ()))
    device = _device(args) if args.rpc else None
    return Workflow(model, args.library, _config(args), runner=_runner(args),
                    cost_model=args.cost_model, device=device)  # fmt: skip


def _config(args: argparse.Namespace):
    """The target configuration a model command names (``--target``, ``--layout``)."""
    from ..targets import get_config

    return get_config(args.target, args.layout, args.prepack, args.fast_math, args.winograd)


def _device(args: argparse.Namespace):
    """The hardware descriptor of what measures: the RPC device (``--rpc``) or this host."""
    if getattr(args, "_device", None) is None:
        from ..hardware import describe

        config = _config(args)
        if args.rpc:
            from ..rpc import connect

            session = connect(args.rpc, args.key)
            args._device = describe(config, session, machine=f"{args.key}@{args.rpc}")
        else:
            args._device = describe(config)
    return args._device


def _runner(args: argparse.Namespace):
    """An RPC runner when ``--rpc`` is given, else None (the local runner)."""
    if not args.rpc:
        return None
    from ..measure import EVALUATOR
    from ..rpc import rpc_runner

    threads = _config(args).num_threads
    return rpc_runner(args.rpc, args.key, EVALUATOR, num_threads=threads)


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
        where = self.prog.removeprefix("transtune").strip()
        self.exit(2, f"transtune: error: {where + ': ' if where else ''}{message}\n")


def _add_rpc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure on RPC servers of this tracker")
    p.add_argument("--key", default="local", help="device key at the RPC tracker")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="zoo model name (see `transtune models`) or path to an .onnx file")
    p.add_argument("--batch", type=_positive(), default=1, help="batch size (zoo models)")
    p.add_argument("--size", type=_positive(), default=None, help="image side or sequence length")
    p.add_argument("--target", default="host", help="target configuration (`transtune targets`)")
    p.add_argument(
        "--layout",
        type=str.upper,
        choices=list(LAYOUTS),
        default=DEFAULT_LAYOUT,
        help="data layout convolutions are lowered in (records are kept per layout)",
    )
    p.add_argument(
        "--prepack",
        action="store_true",
        help="repack weights for each kernel's schedule (records are kept apart)",
    )
    p.add_argument(
        "--fast-math",
        action="store_true",
        help="compute exp, erf, tanh, sigmoid, softmax, GELU by vectorisable approximations",
    )
    p.add_argument(
        "--winograd",
        action="store_true",
        help="compute stride-1 3x3 convolutions as Winograd's F(4x4, 3x3) (with --layout NHWC)",
    )
    p.add_argument("--shape", type=_shape, action="append", metavar="NAME=1x3x224x224",
                   help="ONNX files: an input's shape (repeatable)")  # fmt: skip
