"""Shared fixtures. Tests that need the real data or weights in ../shared skip with a reason when absent."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VQWAE_SHARED", REPO.parent / "shared"))


@pytest.fixture(autouse=True)
def _deterministic(monkeypatch):
    # One thread: the tests' tensors are small, and on a shared 2-core machine two threads were measured up
    # to 20x slower for them. VQWAE_THREADS pins what vqwae's commands would otherwise guess from the CPUs not
    # busy: two runs compared bit for bit must not get different thread counts because other work started.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("VQWAE_THREADS", "1")
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared material not found at {SHARED} (set VQWAE_SHARED)")
    return SHARED


@pytest.fixture
def shared_weights(shared_dir: Path) -> Path:
    p = shared_dir / "weights"
    if not p.is_dir():
        pytest.skip(f"no pretrained metric weights at {p}")
    return p


@pytest.fixture
def shared_data(shared_dir: Path) -> Path:
    p = shared_dir / "data"
    if not p.is_dir():
        pytest.skip(f"no datasets at {p}")
    return p
