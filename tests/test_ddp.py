"""DDP never mismatches its collectives (issue #65): two gloo ranks under ``torchrun`` on the CPU through uneven
validation shares, ``--resume``, an uneven encode and a residual stack with quantizer dropout
(``tests/scripts/ddp_run.py``), within a timeout, and both ranks hold the same weights after each part."""
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "ddp_run.py"


def test_torchrun_two_ranks_uneven_shares_resume_and_residual_dropout(tmp_path, shared_data):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for part in ("train", "resume", "encode", "residual"):
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", str(SCRIPT), part,
                            str(tmp_path), str(shared_data)], capture_output=True, text=True, env=env, timeout=180)
        assert r.returncode == 0, f"{part}: {r.stderr[-3000:]}"
    for part in ("train", "resume", "residual"):
        ranks = [(tmp_path / f"{part}.rank{k}").read_text() for k in (0, 1)]
        assert ranks[0] == ranks[1], f"{part}: the ranks' weights differ"
    levels = [(tmp_path / f"levels.rank{k}").read_text() for k in (0, 1)]
    assert levels[0] == levels[1] and len(set(levels[0].split(","))) > 1  # the same draws, and more than one
    assert (tmp_path / "codes.safetensors").is_file()


def test_torchrun_with_a_global_batch_larger_than_the_data_is_refused_in_one_line(tmp_path):
    """2 processes x batch 32 = 64 > 40 images: no rank would take a step (epoch_batches keeps whole global
    batches); each rank says so in one line and writes nothing (it crashed with UnboundLocalError)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "vqwae", "train",
                        "--dataset", "digits", "--train-limit", "40", "--eval-limit", "20", "--batch-size", "32",
                        "--device", "cpu", "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env,
                       timeout=180)
    assert r.returncode != 0
    said = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 2 and all("a global batch of 64 (2 processes x --batch-size 32) is more than the 40" in s
                                  for s in said), r.stderr[-2000:]
    assert "UnboundLocalError" not in r.stderr and not (tmp_path / "run").exists()
