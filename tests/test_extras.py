"""Every missing extra is one line naming the ``pip install`` that brings it (issue #84): each optional package of
``vqwae.extras.EXTRA`` is made unimportable in turn (tests/scripts/extras_walk.py, one process a package) and every
public entry point is walked, the lazy exports of every package, the calls that import an extra inside a function,
and the CLI's commands. Each cell of the matrix (package x entry point) must run, or stop with that one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from vqwae.extras import DISTRIBUTION, EXTRA

SCRIPT = Path(__file__).parent / "scripts" / "extras_walk.py"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """What the walk reads, made with every package present: a run with a prior, a codes file, images, a YAML."""
    from PIL import Image

    from vqwae.runs.codes import encode_to_file
    from vqwae.runs.prior import train_run_prior
    from vqwae.training import TrainConfig, train

    w = tmp_path_factory.mktemp("extras")
    train(TrainConfig.resolve(dataset="digits", train_limit=64, eval_limit=32, num_codes=16, max_steps=2, epochs=1,
                              device="cpu", out=str(w / "run")), progress=False)
    encode_to_file(w / "run", w / "codes.safetensors", split="test", limit=4)
    train_run_prior(w / "run", epochs=1, max_steps=1, hidden_channels=4, num_layers=2, device="cpu")
    (w / "images").mkdir()
    for i in range(3):
        Image.fromarray((torch.rand(32, 32) * 255).byte().numpy()).save(w / "images" / f"{i}.png")
    (w / "x.yaml").write_text("dataset: digits\nnum_codes: 16\n")
    return w


def walk(package: str, work: Path, shared: Path | None) -> list[dict]:
    args = [sys.executable, str(SCRIPT), package, str(work)] + ([str(shared)] if shared else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1", VQWAE_THREADS="1"))
    assert r.returncode == 0, f"{package}: the walk itself failed: {r.stderr[-3000:]}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_every_entry_point_with_each_extra_missing_runs_or_names_its_pip_install(work):
    from tests.conftest import SHARED

    shared = SHARED if (SHARED / "data").is_dir() else None
    packages = sorted(EXTRA)
    with ThreadPoolExecutor(2) as pool:
        matrix = dict(zip(packages, pool.map(lambda p: walk(p, work, shared), packages)))
    bad, wrong_extra = [], []
    for package, rows in matrix.items():
        assert rows, f"{package}: no entry point reported"
        for row in rows:
            if row["outcome"] == "bad":
                bad.append(f"{package} x {row['entry']}: {row['line']}")
            elif row["outcome"] == "hint" and f"vqwae[{EXTRA[package]}]" not in row["line"]:
                wrong_extra.append(f"{package} x {row['entry']}: {row['line']}")
            elif row["outcome"] == "hint":
                assert DISTRIBUTION.get(package, package) in row["line"], row
    assert not bad, "\n\n".join(bad)
    assert not wrong_extra, "\n".join(wrong_extra)
    needed = {p for p, rows in matrix.items() if any(r["outcome"] == "hint" for r in rows)}
    # every package vqwae declares an extra for is needed by some entry point (else the walk misses it)
    assert needed == set(packages), sorted(set(packages) - needed)
