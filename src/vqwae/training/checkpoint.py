"""Resumable training state, written atomically and read without running code.

RUN_DIR/state.pt holds everything needed to continue exactly where a run stopped: model, optimiser and
scheduler state, the RNG states, the epoch and step counters and the best validation MSE. It is written to
a temporary file, flushed to disk and renamed over the old one, so a crash (kill -9 included) mid-write
never leaves a corrupt checkpoint: the last good one stays in place.

It holds only tensors, numbers, strings, lists and dicts, and is read with ``torch.load(weights_only=True)``:
resuming from a run folder someone shared cannot execute what its pickle holds. The RNG states are stored in
that form (numpy's key as a tensor, Python's as a list). State files written before this (format 1, numpy's
RNG state pickled as an ndarray) are read through an allow-list of exactly numpy's array reconstructors
(still no code), and converted; any other import a file asks for is refused, naming it.
"""
from __future__ import annotations

import importlib
import json
import pickle
import random
from pathlib import Path

import numpy as np
import torch

from vqwae.files import atomic_torch_save

#: What a format-1 state.pt (numpy's RNG state as an ndarray) imports: numpy's data-only array reconstructors.
_FORMAT_1_GLOBALS = frozenset({
    "numpy.dtype", "numpy.ndarray", "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
    "numpy.dtypes.UInt32DType",
})


def rng_state() -> dict:
    """Every RNG a training step draws from, as tensors and plain numbers (loadable with weights_only)."""
    name, key, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "numpy": {"name": name, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    if isinstance(n, dict):
        np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
    else:  # format 1: numpy's own tuple
        np.random.set_state(n)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_state(path: Path, **state) -> None:
    """Write the resumable state (and the RNG states) to ``path`` (the run folder's ``folder.STATE``), atomically;
    then the epoch's pending metrics line joins metrics.jsonl (``folder.commit_metrics``): a run records an epoch
    only once it can be continued from it."""
    from vqwae.training import folder

    atomic_torch_save({**state, "rng": rng_state()}, Path(path))
    folder.commit_metrics(Path(path).parent)


def _allowed_format_1_globals(names: list[str]) -> list:
    objects = []
    for name in names:
        module, _, attr = name.rpartition(".")
        objects.append(getattr(importlib.import_module(module), attr))
    return objects


def load_state(path: Path) -> dict:
    """The resumable state in ``path``, read as data only; a file that would import anything else is refused."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cannot resume: {path} not found (the run never finished an epoch?)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        try:
            wanted = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception as e:
            raise ValueError(f"cannot resume: {path} is unreadable ({type(e).__name__}: {e})") from None
        unsafe = sorted(set(wanted) - _FORMAT_1_GLOBALS)
        if unsafe:
            raise ValueError(f"refusing to load {path}: it asks to import {', '.join(unsafe)}, which could run code "
                             "(vqwae's state files hold only tensors and numbers); it was not written by vqwae train")
        # The dtype class of numpy's uint32 key is built by the pickle without appearing in its global names.
        allowed = _allowed_format_1_globals(wanted) + [type(np.dtype(np.uint32))]
        with torch.serialization.safe_globals(allowed):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"cannot resume: {path} is unreadable ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict):
        raise ValueError(f"cannot resume: {path} holds a {type(state).__name__}, not a vqwae training state")
    missing = {"model", "optimizer", "scheduler", "epoch", "step", "rng"} - set(state)
    if missing:
        raise ValueError(f"cannot resume: {path} lacks {sorted(missing)}; it was not written by vqwae train")
    check_same_run(state, path)
    return state


#: What makes a run itself, compared between a state.pt and its folder's config.json: its seed and precision,
#: its data, its network, and its codebook's kind and shape (a later Python resume may tune the optimiser or the
#: quantizer's method options, e.g. add fit_steps; the command line refuses those anyway, ``resume_config``).
_IDENTITY_SECTIONS = ("run", "data", "network")
_IDENTITY_PATHS = (("model",), ("quantizer", "num_codes"), ("quantizer", "dim"), ("quantizer", "shared_pi"))


def identity_options() -> frozenset[str]:
    """The flat names of the options that identify a run (see ``_IDENTITY_SECTIONS``), WHAT options only."""
    from vqwae.options import WHAT, leaves
    from vqwae.training.config import TrainConfig

    return frozenset(leaf.flat for leaf in leaves(TrainConfig) if leaf.role == WHAT and (
        leaf.path[0] in _IDENTITY_SECTIONS or tuple(leaf.path) in _IDENTITY_PATHS))


def check_same_run(state: dict, path: Path, config: dict | None = None) -> None:
    """That the state in ``path`` is its run's own: the configuration it was saved with and the run's (``config``,
    as ``TrainConfig.to_dict`` gives it; default: the folder's config.json) agree on what identifies the run
    (:func:`identity_options`: seed, data, network, codebook). A state.pt copied from another run (another seed,
    data set, K...) is refused, naming what differs."""
    from vqwae.training.config import TrainConfig
    from vqwae.training.folder import CONFIG

    saved = Path(path).parent / CONFIG if config is None else "the run's configuration"
    if "config" not in state or (config is None and not saved.is_file()):
        return  # a state of the first format, or a state read outside a run folder
    try:
        run_cfg = TrainConfig.from_saved(config if config is not None else json.loads(saved.read_text())).to_flat()
    except Exception:
        return  # the run's own config.json is checked (and reported) by whoever reads it
    try:
        state_cfg = TrainConfig.from_saved(state["config"]).to_flat()
    except Exception as e:
        raise ValueError(f"cannot resume: the configuration stored in {path} is unreadable ({e}); it was not "
                         "written by this run") from None
    differ = sorted(k for k in identity_options() if run_cfg.get(k) != state_cfg.get(k))
    if differ:
        shown = ", ".join(f"{k} {state_cfg.get(k)!r} (the run: {run_cfg.get(k)!r})" for k in differ[:3])
        raise ValueError(f"cannot resume: {path} belongs to another run: {shown}"
                         + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
                         + f" differ from {saved}; nothing was changed")
