"""One writer per run folder, and loading a run never runs code: a second trainer is turned away while the first
finishes intact, a stale lock is taken over, a kill during the first state write leaves no duplicate metrics, a
crafted state.pt is refused without running its code, and the previous state format still resumes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from vqwae.runs import layout
from vqwae.training.lock import RunFolderBusy, RunLock
from vqwae.training import TrainConfig, checkpoint, train

from tests.helpers import checksums, invoke, one_line_error, tiny_run


run = tiny_run("robust-lock")


# ---- one writer per run folder ------------------------------------------------------------------------
def test_a_held_folder_turns_a_second_trainer_away(run, tmp_path):
    before = checksums(run)
    with RunLock(run):
        line = one_line_error(invoke(["train", "--out", run, "--resume", "--epochs", "2"]), f"pid {os.getpid()}")
        with pytest.raises(RunFolderBusy):
            RunLock(run).acquire()
    assert "being written by" in line
    after = checksums(run)
    after.pop(layout.LOCK, None), before.pop(layout.LOCK, None)  # the lock file itself records its holder
    assert after == before


def test_a_stale_lock_is_taken_over(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    # left by a process that died (kill -9): a holder is recorded but nobody holds the lock
    (out / layout.LOCK).write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": "yesterday"}))
    res = train(TrainConfig.resolve(out=str(out), max_steps=1, dataset="digits", train_limit=32, eval_limit=16,
                                    num_codes=8, device="cpu"))
    assert res.steps == 1


def test_two_trainers_one_folder_the_second_stops_the_first_finishes_intact(tmp_path):
    out = tmp_path / "run"
    base = [sys.executable, "-m", "vqwae", "train", "--out", str(out), "--dataset", "digits", "--train-limit", "320",
            "--eval-limit", "32", "--num-codes", "16", "--device", "cpu", "--threads", "1"]
    first = subprocess.Popen(base + ["--model", "vqwae", "--epochs", "3"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not ((out / layout.LOCK).exists() and (out / layout.LOCK).read_text()):
            time.sleep(0.05)
        second = subprocess.run(base + ["--model", "vqvae", "--epochs", "1"], capture_output=True, text=True)
        out_first, err_first = first.communicate(timeout=120)
    finally:
        first.kill()
    assert second.returncode == 2 and f"pid {first.pid}" in second.stderr, second.stderr
    assert first.returncode == 0, err_first
    assert layout.read_config(out).model == "vqwae"
    assert [m["epoch"] for m in layout.read_metrics(out)] == [1, 2, 3]
    assert checkpoint.load_state(out / layout.STATE)["config"]["model"] == "vqwae"


def test_kill_during_the_first_state_write_leaves_no_duplicate_metrics(tmp_path, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()  # a folder that existed before: like kill -9, the failed run cleans nothing up
    cfg = TrainConfig.resolve(out=str(out), epochs=2, dataset="digits", train_limit=64, eval_limit=32, num_codes=8,
                              device="cpu")

    class Killed(BaseException):
        pass

    def killed(*args, **kwargs):
        raise Killed  # the process dies after epoch 1's weights and metrics, before state.pt exists

    monkeypatch.setattr(checkpoint, "atomic_torch_save", killed)
    with pytest.raises(Killed):
        train(cfg)
    # an epoch is recorded only once its state is saved: nothing to lose, nothing recorded
    assert layout.read_metrics(out) == [] and not (out / layout.STATE).exists()
    monkeypatch.undo()
    train(cfg, resume=True)
    assert [m["epoch"] for m in layout.read_metrics(out)] == [1, 2]


# ---- loading a run never runs code --------------------------------------------------------------------
class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_state_file_is_refused_without_running_it(run, tmp_path):
    crafted = tmp_path / "crafted"
    shutil.copytree(run, crafted)
    marker = tmp_path / "code-ran"
    torch.save({"model": _RunsCode(marker), "optimizer": {}, "scheduler": {}, "epoch": 1, "step": 1, "rng": {}},
               crafted / layout.STATE)
    before = checksums(crafted)
    one_line_error(invoke(["train", "--out", crafted, "--resume", "--epochs", "2"]), "refusing to load",
                   "system")
    assert not marker.exists()
    assert checksums(crafted) == before


def test_state_files_of_the_previous_format_still_resume(tmp_path):
    """Format 1 pickled numpy's RNG state as an ndarray: read through the allow-list, converted, resumed."""
    import random

    out = tmp_path / "run"
    cfg = TrainConfig.resolve(out=str(out), epochs=1, dataset="digits", train_limit=64, eval_limit=32, num_codes=8,
                              device="cpu")
    train(cfg)
    state = torch.load(out / layout.STATE, weights_only=True)
    state["rng"] = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    torch.save(state, out / layout.STATE)  # as the previous format wrote it
    with pytest.raises(Exception):
        torch.load(out / layout.STATE, weights_only=True)  # not loadable as plain data...
    assert checkpoint.load_state(out / layout.STATE)["epoch"] == 1  # ...but read by the tested conversion
    res = train(cfg.replace(epochs=2), resume=True)
    assert res.epochs_completed == 2
