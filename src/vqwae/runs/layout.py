"""The run folder (RUN_DIR) for the workflows over a finished run: its configuration (read, resume), its model
and its data. Every file name, and how each file is written, is ``vqwae.training.folder``'s (training writes the
folder); they are re-exported here so that a workflow reads everything about a run from one module.
"""
from __future__ import annotations

import os
from pathlib import Path

from vqwae.data import DatasetInfo, load_split
from vqwae.files import read_json_object
from vqwae.models import VQAutoencoder
from vqwae.options import SCHEDULE, WHERE, names_with_role
from vqwae.training.config import TrainConfig
from vqwae.training.folder import (  # re-exported (__all__): the run folder's names and writers
    CONFIG, MODEL_WEIGHTS, MODEL_CONFIG, METRICS, STATE, LOCK, EVAL, TRAINING_CURVES, TSNE, TENSORBOARD, SAMPLES,
    PRIOR, ALT_PRIORS, RECORD_FILES, code_usage_json, code_usage_png, reconstructions_png, record_files,
    has_weights, model_fingerprint, existing_run_files, check_trained, write_config, last_epoch, read_metrics,
    append_metrics, truncate_metrics, read_eval, update_eval, fit_pending, PROVENANCE, append_provenance,
    read_provenance, RECONSTRUCTION_SAMPLES, reconstructions_npz,
)

PathLike = str | os.PathLike

__all__ = [  # this module's own, then the run folder's names and writers re-exported from vqwae.training.folder
    "read_config", "RESUME_CHANGEABLE", "resume_config", "load_model", "load_run_split", "data_root_of",
    "CONFIG", "MODEL_WEIGHTS", "MODEL_CONFIG", "METRICS", "STATE", "LOCK", "EVAL", "TRAINING_CURVES", "TSNE",
    "TENSORBOARD", "SAMPLES", "PRIOR", "ALT_PRIORS", "RECORD_FILES", "code_usage_json", "code_usage_png",
    "reconstructions_png", "record_files", "has_weights", "model_fingerprint", "existing_run_files", "check_trained",
    "write_config", "last_epoch", "read_metrics", "append_metrics", "truncate_metrics", "read_eval", "update_eval",
    "fit_pending", "PROVENANCE", "append_provenance", "read_provenance", "RECONSTRUCTION_SAMPLES",
    "reconstructions_npz",
]


# ---- config -------------------------------------------------------------------------------------------
def read_config(run_dir: PathLike) -> TrainConfig:
    """The TrainConfig a run was trained with (any format version)."""
    p = Path(run_dir) / CONFIG
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: {run_dir} is not a vqwae run folder (made by `vqwae train`)")
    values = read_json_object(p, "a run's configuration (written by `vqwae train`)")
    try:
        return TrainConfig.from_saved(values)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        text = str(e).replace("config.json: ", "")
        raise ValueError(f"{p} is not a valid run configuration: {text}") from None


# Options a resumed run may change: its schedule and where it runs (their declared role); the rest is the run's own.
RESUME_CHANGEABLE = names_with_role(TrainConfig, SCHEDULE, WHERE)


def resume_config(run_dir: PathLike, overrides: dict) -> TrainConfig:
    """The saved configuration of RUN_DIR with only the resume-changeable ``overrides`` (flat names; None
    values ignored) applied; any other option that differs from the saved one is an error naming it."""
    saved = read_config(run_dir)
    flat = saved.to_flat()
    given = {k: v for k, v in overrides.items() if v is not None}
    bad = sorted(k for k, v in given.items() if k not in RESUME_CHANGEABLE and v != flat.get(k))
    if bad:
        raise ValueError(f"--resume continues {run_dir} with its saved configuration; these options differ from it: "
                         f"{', '.join(bad)}")
    return saved.replace(**given)


# ---- model -------------------------------------------------------------------------------------------
def load_model(run_dir: PathLike, device="cpu") -> VQAutoencoder:
    """The run's best model, in eval mode, on ``device``."""
    return VQAutoencoder.from_pretrained(run_dir, map_location="cpu").to(device).eval()


# ---- data ---------------------------------------------------------------------------------------------
def load_run_split(run_dir: PathLike, split: str, *, limit: int | None = None, data_root: str | None = None,
                   cfg: TrainConfig | None = None) -> tuple[object, DatasetInfo]:
    """(dataset, info) of one split ("train", "val" or "test") of the run's data, as it was trained: its
    dataset, image size and seed; the first ``limit`` images (None: all); ``data_root`` overrides the
    recorded location."""
    cfg = cfg or read_config(run_dir)
    d = cfg.data
    return load_split(d.dataset, data_root or d.data_root, split, limit=limit, download=d.download,
                      image_size=d.image_size, seed=cfg.run.seed, skip_unreadable=d.skip_unreadable)


def data_root_of(cfg: TrainConfig, data_root: str | None = None) -> str | None:
    """Where a run's data is read from: the override, else the recorded location."""
    return data_root or cfg.data.data_root
