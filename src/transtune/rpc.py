"""Measuring on other machines through TVM's RPC tracker.

Devices run ``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`` and register with
a tracker under a key; :func:`rpc_runner` gives a MetaSchedule ``RPCRunner`` that borrows every
server with that key in parallel (one worker per registered server). Candidates are built
here and measured there. A server that dies or hangs mid-batch costs only its candidates
(each runs again on another device, then is recorded as failed with the reason); a
tracker that is down is a clear error.

:class:`LocalCluster` (``transtune rpc up``) starts a tracker and N servers on this host for
trying it out; they bind to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tvm import rpc
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from .errors import TranstuneError


class RPCError(TranstuneError):
    """The tracker cannot be reached, or has no server with the key."""


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise RPCError(f"RPC tracker address must be HOST:PORT, got {address!r}")
    return host or "127.0.0.1", int(port)


def servers(tracker: str, key: str) -> int:
    """Servers registered with ``key`` at ``tracker`` (free or busy)."""
    host, port = parse_address(tracker)
    try:
        socket.create_connection((host, port), timeout=3).close()  # fail fast, no retries
        summary = rpc.connect_tracker(host, port).summary()
    except Exception as err:  # ConnectionRefusedError, RPC errors, timeouts
        raise RPCError(f"RPC tracker at {host}:{port} is not reachable: {err}") from None
    return len({
        str(s.get("addr"))
        for s in summary.get("server_info", [])
        if s.get("key", "").endswith(f":{key}")
    })  # fmt: skip


def _require_servers(tracker: str, key: str) -> int:
    count = servers(tracker, key)
    if count == 0:
        raise RPCError(f"no RPC server is registered with key {key!r} at {tracker}")
    return count


def connect(tracker: str, key: str, timeout_sec: int = 60):
    """A session on one server with ``key`` at ``tracker`` (waits until one is free)."""
    _require_servers(tracker, key)
    host, port = parse_address(tracker)
    return rpc.connect_tracker(host, port).request(key, session_timeout=timeout_sec)


def rpc_runner(
    tracker: str, key: str, evaluator, timeout_sec: int = 60, num_threads: int | None = None
):
    """A runner on every server with ``key`` at ``tracker`` (at least one): MetaSchedule's
    ``RPCRunner`` with one worker per server, kernels run on ``num_threads`` threads (default:
    the server's), candidates whose device was lost run again (:class:`RequeueRunner`)."""
    count = _require_servers(tracker, key)
    host, port = parse_address(tracker)
    config = ms.runner.RPCConfig(
        tracker_host=host, tracker_port=port, tracker_key=key, session_timeout_sec=timeout_sec
    )
    create = None if num_threads is None else functools.partial(_session, threads=num_threads)
    return RequeueRunner(
        ms.runner.RPCRunner(config, evaluator, f_create_session=create, max_workers=count)
    )


def _session(rpc_config, threads: int):
    from .compile import set_num_threads

    session = rpc_config.connect_server()
    set_num_threads(threads, session)
    return session


# Errors of a device that went away (killed, rebooted, hung past the session timeout), as
# opposed to a candidate that failed to run. A session whose server process ended mid-call
# fails TVM's check that the reply is a return (``code == RPCCode::kReturn``).
_LOST = (
    "timeout", "connection", "socket", "broken pipe", "eof", "closed", "reset by peer",
    "rpccode::kreturn",
)  # fmt: skip


def device_lost(error_msg: str | None) -> bool:
    return error_msg is not None and any(word in error_msg.lower() for word in _LOST)


@derived_object
class RequeueRunner(ms.runner.PyRunner):
    """Runs candidates with ``runner``; one whose device was lost mid-run runs again (on
    whichever device the runner gets next, up to ``retries`` times: the tracker may hand out
    the lost device once more before it notices) before it is recorded as failed."""

    def __init__(self, runner, retries: int = 2) -> None:
        super().__init__()
        self.runner = runner
        self.retries = retries
        self.requeued = 0  # candidates run again

    def run(self, runner_inputs: list) -> list:
        futures = self.runner.run(runner_inputs)
        return [_RequeueFuture(self, i, f) for i, f in zip(runner_inputs, futures, strict=True)]


@derived_object
class _RequeueFuture(ms.runner.PyRunnerFuture):
    def __init__(self, owner: RequeueRunner, runner_input, future) -> None:
        super().__init__()
        self.owner, self.input, self.future = owner, runner_input, future

    def done(self) -> bool:
        return self.future.done()

    def result(self):
        result = self.future.result()
        for _ in range(self.owner.retries):
            if not device_lost(result.error_msg):
                break
            self.owner.requeued += 1
            result = self.owner.runner.run([self.input])[0].result()
        return result


@dataclass
class LocalCluster:
    """A tracker and ``count`` servers with ``key``, as child processes of this one."""

    count: int = 2
    key: str = "local"
    host: str = "127.0.0.1"
    port: int = 9190
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def tracker(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> LocalCluster:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", self.host,
             "--port", str(self.port), "--port-end", str(self.port + 1)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        ))  # fmt: skip
        deadline = time.time() + timeout
        while time.time() < deadline and not self._tracker_up():
            time.sleep(0.2)
        for _ in range(self.count):
            self.add_server()
        while time.time() < deadline:
            try:
                if servers(self.tracker, self.key) >= self.count:
                    return self
            except RPCError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RPCError(f"local RPC cluster did not come up within {timeout:.0f} s")

    def _tracker_up(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def add_server(self) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", self.tracker,
             "--key", self.key, "--host", self.host, "--port", str(self.port + 10),
             "--port-end", str(self.port + 100)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.processes.append(proc)
        return proc

    @property
    def server_processes(self) -> list[subprocess.Popen]:
        return self.processes[1:]

    def kill_server(self, index: int) -> None:
        """Kill server ``index`` and its workers at once (SIGKILL), as a crashing device."""
        _kill_tree(self.server_processes[index].pid, signal.SIGKILL)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            _kill_tree(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_tree(proc.pid, signal.SIGKILL)
        self.processes.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_tree(pid: int, sig: int) -> None:
    """Signal a process and every process it started (servers fork a worker per session,
    which holds the listening socket too)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
