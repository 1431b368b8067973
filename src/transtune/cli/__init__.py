"""The ``transtune`` command line: a thin layer over the library (and its ``Workflow``)."""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import TranstuneError, error_line
from ..machine import configure_threads
from .common import (
    _add_model_args,
    _add_rpc_args,
    _fraction,
    _Parser,
    _positive,
    _positive_list,
)
from .dataset import _cmd_costmodel, _cmd_dataset
from .library import _cmd_library
from .models import _cmd_bench, _cmd_compile, _cmd_kernels, _cmd_models, _cmd_targets
from .tuning import _cmd_rpc, _cmd_transfer, _cmd_tune


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
        help="a trained cost model: rank the sampled programs, measure only the best scored "
        "donor schedules per kernel if it was trained on this CPU (--measure-top), and guide "
        "the continued search (--budget)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the kernels an interrupted transfer of this model committed",
    )
    p.add_argument("--measure-top", type=_positive(),
                   help="donor schedules measured per kernel, with --cost-model (default: 2 if "
                   "it was trained on the target's CPU, else all)")  # fmt: skip
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
    p.add_argument("--trajectory", type=_positive(), default=0, metavar="TRIALS",
                   help="collect: also the programs a search of TRIALS trials per kernel "
                   "visits (MetaSchedule's evolutionary search, online XGBoost)")  # fmt: skip
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
    if (
        args.command == "tune"
        and args.trials is None
        and args.time is None
        and not args.until_converged
    ):
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
    configure_threads()  # before any command starts TVM's thread pool
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
