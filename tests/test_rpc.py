"""Measuring through TVM's RPC tracker: a real tracker and two servers on loopback."""

import json
import socket
import threading
import time

import psutil
import pytest
from tvm import te
from tvm.s_tir import meta_schedule as ms

from transtune.cli import main
from transtune.dataset import DatasetStore, collect, dataset_info
from transtune.dataset.collection import DatasetKernel
from transtune.hardware import describe
from transtune.library import open_library
from transtune.measure import EVALUATOR, measure_modules, warm_builder
from transtune.rpc import LocalCluster, RPCError, connect, rpc_runner, servers
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


def test_a_tracker_that_is_down_is_a_clear_error(capsys, tmp_path):
    port = free_port()
    with pytest.raises(RPCError, match="not reachable"):
        servers(f"127.0.0.1:{port}", "x")
    argv = ["tune", "resnet18", "--trials", "8", "--rpc", f"127.0.0.1:{port}", "--key", "x",
            "--library", str(tmp_path / "lib.db")]  # fmt: skip
    assert main(argv) == 2
    assert "not reachable" in capsys.readouterr().err


@pytest.mark.slow  # a server killed mid-run: ~30 s each (make test-slow)
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
            device = {"id": f"host@pair@{cluster.tracker}"}  # what the CLI describes
            result = tune_kernels([matmul_kernel()], lib, get_config("host"), "mm", trials=24,
                                  num_trials_per_iter=8, runner=runner, device=device)  # fmt: skip
            killer.join(timeout=5)
            assert not killer.is_alive()  # the server was killed during the run
            assert result.stopped == "budget" and result.new_trials == 24
            ok = lib.records(ok_only=True)
            assert lib.count_records() == 24 and len(ok) >= 16  # the other server measured on
            (params,) = lib._query("SELECT params FROM runs")[0]
            assert json.loads(params)["device"] == device
    with open_library(tmp_path / "lib.db") as again:
        assert again.count_records() == 24


@pytest.mark.slow  # about 60 s (make test-slow); the local collection's tests stay
def test_dataset_collection_and_descriptor_through_rpc(tmp_path):
    kernel = matmul_kernel()
    with LocalCluster(1, "dev", port=free_port()) as cluster:
        remote = describe("host-1core", connect(cluster.tracker, "dev"), machine="board-1")
        local = describe("host-1core")
        assert remote.id == local.id == get_config("host-1core").name  # the same CPU
        assert remote.machine == "board-1" and remote.threads == 1
        assert (remote.isa, remote.l1d_kib, remote.l2_kib) == (local.isa, local.l1d_kib,
                                                                local.l2_kib)  # fmt: skip
        assert remote.measured_bandwidth_gbs > 0.1 and remote.measured_peak_gflops > 0.1
        out = tmp_path / "ds"
        stats = collect(str(out), [DatasetKernel(kernel, ["mm@b1"], [1])], ["host-1core"], 4,
                        rpc=cluster.tracker, key="dev")  # fmt: skip
    assert stats.records == 4 and stats.failures == 0
    hardware = DatasetStore(out).read("hardware").to_pylist()
    assert json.loads(hardware[0]["descriptor"])["machine"] == f"dev@{cluster.tracker}"
    assert dataset_info(out)["by_hardware"][get_config("host-1core").name]["ok"] == 4


@pytest.mark.slow  # a server killed mid-run: ~30 s each (make test-slow)
def test_candidates_of_a_server_that_dies_run_again_elsewhere():
    slow = ms.runner.EvaluatorConfig(number=1, repeat=3, min_repeat_ms=300)
    kernel = matmul_kernel(128)
    with LocalCluster(2, "pair", port=free_port()) as cluster:
        runner = rpc_runner(cluster.tracker, "pair", slow, num_threads=1)
        victim = psutil.Process(cluster.server_processes[0].pid)

        idle = len(victim.children(recursive=True))

        def kill_while_measuring() -> None:
            while len(victim.children(recursive=True)) <= idle:  # until a session is open
                time.sleep(0.02)
            cluster.kill_server(0)

        killer = threading.Thread(target=kill_while_measuring, daemon=True)
        killer.start()
        with warm_builder() as builder:
            measured = measure_modules(
                [kernel.mod] * 4, get_config("host-1core").tvm_target(), builder, runner
            )
        killer.join(timeout=5)
        assert not killer.is_alive()
    assert [m.status for m in measured] == ["ok"] * 4, [m.error for m in measured]
    assert runner.requeued >= 1, "the killed server held no candidate"
