"""Resumable training state, written atomically.

RUN_DIR/state.pt holds everything needed to continue exactly where a run stopped: model, optimiser and
scheduler state, the RNG states, the epoch and step counters and the best validation MSE. It is written to
a temporary file, flushed to disk and renamed over the old one, so a crash (kill -9 included) mid-write
never leaves a corrupt checkpoint: the last good one stays in place.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from vqwae.files import atomic_torch_save



def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(path: Path, **state) -> None:
    """Write the resumable state (and the RNG states) to ``path`` (the run folder's layout.STATE), atomically."""
    atomic_torch_save({**state, "rng": rng_state()}, Path(path))


def load_state(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {path} not found (the run never finished an epoch?)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ValueError(f"cannot resume: {path} is unreadable ({type(e).__name__}: {e})") from e
    missing = {"model", "optimizer", "scheduler", "epoch", "step", "rng"} - set(state)
    if missing:
        raise ValueError(f"cannot resume: {path} lacks {sorted(missing)}; it was not written by vqwae train")
    return state
