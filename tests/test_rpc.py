"""Measuring through TVM's RPC tracker: a real tracker and two servers on loopback."""

import socket
import threading
import time

import pytest
from tvm import te
from tvm.s_tir import meta_schedule as ms

from transtune.cli import main
from transtune.library import open_library
from transtune.measure import EVALUATOR
from transtune.rpc import LocalCluster, RPCError, rpc_runner, servers
from transtune.targets import get_config
from transtune.tasks import Kernel
from transtune.tuning import tune_kernels


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def matmul_kernel(n: int = 64) -> Kernel:
    a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    r = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    mod = ms.tune_context._normalize_mod(te.create_prim_func([a, b, c]))
    return Kernel("mm", "matmul", 1, 2.0 * n**3, "", mod)


def test_a_tracker_that_is_down_is_a_clear_error(capsys):
    port = free_port()
    with pytest.raises(RPCError, match="not reachable"):
        servers(f"127.0.0.1:{port}", "x")
    argv = ["tune", "resnet18", "--trials", "8", "--rpc", f"127.0.0.1:{port}", "--key", "x"]
    assert main(argv) == 2
    assert "not reachable" in capsys.readouterr().err


def test_tuning_survives_a_server_dying_mid_run(tmp_path):
    with LocalCluster(2, "pair", port=free_port()) as cluster:
        assert servers(cluster.tracker, "pair") == 2
        with pytest.raises(RPCError, match="no RPC server"):
            rpc_runner(cluster.tracker, "nobody", EVALUATOR)
        runner = rpc_runner(cluster.tracker, "pair", EVALUATOR)
        with open_library(tmp_path / "lib.db") as lib:

            def kill_when_measuring() -> None:
                while lib.count_records() < 8:  # the first batch is in
                    time.sleep(0.2)
                cluster.kill_server(0)

            killer = threading.Thread(target=kill_when_measuring, daemon=True)
            killer.start()
            result = tune_kernels([matmul_kernel()], lib, get_config("host"), "mm", trials=24,
                                  num_trials_per_iter=8, runner=runner)  # fmt: skip
            killer.join(timeout=5)
            assert not killer.is_alive()  # the server was killed during the run
            assert result.stopped == "budget" and result.new_trials == 24
            ok = lib.records(ok_only=True)
            assert lib.count_records() == 24 and len(ok) >= 16  # the other server measured on
    with open_library(tmp_path / "lib.db") as again:
        assert again.count_records() == 24
