"""Ctrl-C in a terminal (SIGINT to the whole process group) during a collection and a tuning:
the batch in hand finishes on live workers, nothing bogus is stored, and a rerun resumes; a
second Ctrl-C stops a collection at once, its store still whole."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from transtune.dataset import load_records
from transtune.library import FAILED_SECONDS, open_library

HERE = Path(__file__).resolve().parent

PRELUDE = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from test_interrupt import kernels
from test_rpc import matmul_kernel
"""


def kernels():
    """Three matmul kernels, each under its own workload hash."""
    from dataclasses import replace

    from test_rpc import matmul_kernel

    from transtune.dataset.collection import DatasetKernel
    from transtune.tasks import workload_hash

    out = []
    for n in (48, 64, 80):
        k = matmul_kernel(n)
        out.append(
            DatasetKernel(replace(k, workload_hash=workload_hash(k.mod)), [f"mm{n}@b1"], [1])
        )
    return out


def _interrupted(script: str, times: int = 1) -> subprocess.CompletedProcess:
    """Run ``script`` in a process group of its own; when it prints ``go``, send SIGINT to the
    whole group ``times`` times, as a terminal's Ctrl-C does."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 240
    for line in proc.stdout:
        if line.strip() == "go":
            for _ in range(times):
                time.sleep(0.5)  # into the next batch's build or measurement
                os.killpg(proc.pid, signal.SIGINT)
            break
        assert time.time() < deadline, "the script never got going"
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_during_collect_stores_nothing_bogus_and_resumes(tmp_path):
    out = tmp_path / "ds"
    script = f"""
    from transtune.dataset import collect
    go = lambda *_: print("go", flush=True)
    stats = collect({str(out)!r}, kernels(), ["host-1core"], 8, 0, go)
    print("interrupted" if stats.interrupted else "finished", stats.kernels_done, flush=True)
    """
    done = _interrupted(script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2] == "interrupted"
    records, _ = load_records(out)
    assert len(records) > 0 and set(records["status"].to_pylist()) == {"ok"}
    from transtune.dataset import collect

    stats = collect(str(out), kernels(), ["host-1core"], 8, 0)
    assert not stats.interrupted
    records, _ = load_records(out)
    assert len(records) == 3 * 8 and set(records["status"].to_pylist()) == {"ok"}


@pytest.mark.slow  # about 35 s; the first Ctrl-C's test above stays (make test-slow)
def test_a_second_ctrl_c_stops_a_collection_at_once_and_it_resumes(tmp_path):
    out = tmp_path / "ds"
    script = f"""
    from transtune.dataset import collect
    go = lambda *_: print("go", flush=True)
    collect({str(out)!r}, kernels(), ["host-1core"], 8, 0, go)
    print("finished", flush=True)
    """
    done = _interrupted(script, times=2)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
    assert "finished" not in done.stdout
    records, _ = load_records(out)
    assert set(records["status"].to_pylist()) <= {"ok"}  # the kernel in hand: not stored
    from transtune.dataset import collect

    assert not collect(str(out), kernels(), ["host-1core"], 8, 0).interrupted
    records, _ = load_records(out)
    assert len(records) == 3 * 8 and set(records["status"].to_pylist()) == {"ok"}


@pytest.mark.slow  # the same worker pools as the collection's test above; make test-slow
def test_ctrl_c_during_tune_stores_nothing_bogus_and_resumes(tmp_path):
    url = str(tmp_path / "lib.db")
    script = f"""
    from transtune.library import open_library
    from transtune.targets import get_config
    from transtune.tuning import tune_kernels
    with open_library({url!r}) as lib:
        result = tune_kernels([matmul_kernel(64)], lib, get_config("host-1core"), "mm",
                              trials=64, num_trials_per_iter=8,
                              on_update=lambda *_: print("go", flush=True))
    print(result.stopped, result.new_trials, flush=True)
    """
    done = _interrupted(script)
    assert done.returncode == 0, done.stderr[-2000:]
    stopped, trials = done.stdout.split()[-2:]
    assert stopped == "interrupted" and 0 < int(trials) < 64
    with open_library(url) as lib:
        assert lib.count_records() == int(trials)
        failed = lib._query(f"SELECT COUNT(*) FROM records WHERE mean_secs >= {FAILED_SECONDS}")
        assert failed == [(0,)]
