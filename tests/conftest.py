"""Shared fixtures: tiny real models (no mocks), small enough for CI."""

from __future__ import annotations

import pytest
import torch


class TinyConvNet(torch.nn.Module):
    """Conv+BN+ReLU, a residual block used twice (identical kernels), pooling and a classifier
    that flattens with ``view(x.size(0), -1)`` (shape arithmetic in ONNX exports)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
        )
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
            for _ in range(2)
        )
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        for block in self.blocks:
            y = torch.relu(block(y) + y)
        y = self.pool(y)
        return self.fc(y.view(y.size(0), -1))


class TinyAttention(torch.nn.Module):
    """One self-attention head whose reshapes are computed from run-time shapes."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, n, d)
        return self.norm(x + torch.nn.functional.gelu(self.out(y)))


@pytest.fixture(scope="session")
def tiny_conv():
    torch.manual_seed(0)
    return TinyConvNet().eval(), (torch.randn(1, 3, 16, 16),)


@pytest.fixture(scope="session")
def tiny_attention():
    torch.manual_seed(0)
    return TinyAttention().eval(), (torch.randn(1, 8, 16),)


@pytest.fixture(scope="session")
def host_target():
    from transtune.targets import get_config

    return get_config("host").tvm_target()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on loopback for the session (skipped if not installed)."""
    import os
    import shutil
    import socket
    import subprocess
    import tempfile
    from pathlib import Path

    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    base = Path(tempfile.mkdtemp(prefix="transtune-pg-"))  # pytest's tmp is private to root
    data = base / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True, capture_output=True)  # noqa: E731
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust")
        run(pg_ctl, "-D", str(data), "-o", opts, "-l", str(base / "log"), "-w", "start")
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"could not start a PostgreSQL server here: {err}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        run(pg_ctl, "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def library_url(request, tmp_path):
    """A fresh, empty library URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/lib.db"
    import psycopg

    server = request.getfixturevalue("postgres_server")
    name = f"lib_{abs(hash(str(tmp_path))) % 10**9}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"
