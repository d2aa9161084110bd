"""The run folder (RUN_DIR): every file name it holds, and the one way to read and write each.

    RUN_DIR/config.json                the resolved TrainConfig (format_version 2: nested sections)
    RUN_DIR/model.safetensors          best weights by validation MSE
    RUN_DIR/model_config.json          the model's own config (VQAutoencoder.from_pretrained(RUN_DIR))
    RUN_DIR/metrics.jsonl              one JSON object per epoch
    RUN_DIR/state.pt                   resumable training state (vqwae.training.checkpoint)
    RUN_DIR/run.lock                   held by the process training into RUN_DIR (vqwae.runs.lock)
    RUN_DIR/eval.json                  results of eval / probe / tsne / generation, merged key by key
    RUN_DIR/code_usage_SPLIT.json|png  code histogram of a split (and the learned pi)
    RUN_DIR/reconstructions_SPLIT.png  originals above reconstructions
    RUN_DIR/training_curves.png        metrics.jsonl as curves
    RUN_DIR/tsne.png                   t-SNE of the quantized latents
    RUN_DIR/tensorboard/               TensorBoard event files (vqwae train --logger tensorboard)
    RUN_DIR/prior/                     the PixelCNN prior (vqwae prior train); prior_cond/, prior_uncond/ beside it
    RUN_DIR/samples/                   images sampled from the prior (vqwae sample)

A run's *record* is its small text files (config, metrics, eval.json, usage histograms) and its t-SNE picture:
everything a report reads once the run is trained and evaluated, without the weights (see RECORD_FILES).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from vqwae.data import DatasetInfo, load_split
from vqwae.figures import read_metrics_jsonl
from vqwae.files import atomic_write_text
from vqwae.models import VQAutoencoder
from vqwae.models.pretrained import WEIGHTS_NAME
from vqwae.training.config import TrainConfig

CONFIG = "config.json"
MODEL_WEIGHTS = WEIGHTS_NAME  # "model.safetensors": the model folder's files are the model's (PretrainedMixin)
MODEL_CONFIG = VQAutoencoder.config_name  # "model_config.json"
METRICS = "metrics.jsonl"
STATE = "state.pt"
LOCK = "run.lock"
EVAL = "eval.json"
TRAINING_CURVES = "training_curves.png"
TSNE = "tsne.png"
TENSORBOARD = "tensorboard"
SAMPLES = "samples"
PRIOR = "prior"
#: Second prior folders, so an unconditional and a class-conditional prior can coexist: {conditional: name}.
ALT_PRIORS = {True: "prior_cond", False: "prior_uncond"}

PathLike = str | os.PathLike
#: The files of a run's record (plus code_usage_SPLIT.json): what `vqwae reproduce --records` keeps.
RECORD_FILES = (CONFIG, MODEL_CONFIG, METRICS, EVAL, TSNE)


def code_usage_json(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"code_usage_{split}.json"


def code_usage_png(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"code_usage_{split}.png"


def reconstructions_png(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"reconstructions_{split}.png"


def record_files(run_dir: PathLike) -> list[Path]:
    """The files of RUN_DIR's record that exist (RECORD_FILES and the code usage histograms' JSON)."""
    d = Path(run_dir)
    return [d / n for n in RECORD_FILES if (d / n).is_file()] + sorted(d.glob("code_usage_*.json"))


def has_weights(run_dir: PathLike) -> bool:
    return (Path(run_dir) / MODEL_WEIGHTS).is_file()


# ---- what a folder holds --------------------------------------------------------------------------------
def existing_run_files(run_dir: PathLike) -> list[str]:
    """The files that make a folder a run (empty for a new folder)."""
    return [name for name in (STATE, METRICS, MODEL_WEIGHTS) if (Path(run_dir) / name).exists()]


def check_trained(run_dir: PathLike) -> Path:
    """RUN_DIR as a Path, or a one-line error saying why it is not a trained run folder."""
    d = Path(run_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"run folder {d} not found")
    if not (d / CONFIG).is_file() or not (d / MODEL_WEIGHTS).is_file():
        raise FileNotFoundError(f"{d} is not a trained run folder (no {CONFIG} / {MODEL_WEIGHTS}; make one with "
                                "`vqwae train`)")
    return d


# ---- config -------------------------------------------------------------------------------------------
def read_config(run_dir: PathLike) -> TrainConfig:
    """The TrainConfig a run was trained with (any format version)."""
    p = Path(run_dir) / CONFIG
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: {run_dir} is not a vqwae run folder (made by `vqwae train`)")
    return TrainConfig.from_saved(json.loads(p.read_text()))


def write_config(run_dir: PathLike, cfg: TrainConfig) -> None:
    atomic_write_text(Path(run_dir) / CONFIG, json.dumps(cfg.to_dict(), indent=2))


# Options a resumed run may change: its schedule and where it runs; everything else is the run's own.
RESUME_CHANGEABLE = frozenset({"epochs", "max_steps", "device", "num_workers", "out", "threads", "logger",
                               "data_root"})


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


# ---- model, metrics, eval.json -------------------------------------------------------------------------
def load_model(run_dir: PathLike, device="cpu") -> VQAutoencoder:
    """The run's best model, in eval mode, on ``device``."""
    return VQAutoencoder.from_pretrained(run_dir, map_location="cpu").to(device).eval()


def last_epoch(history: list[dict]) -> int:
    """The last epoch metrics.jsonl records (``history`` as ``read_metrics`` returns it; 0 for none)."""
    return max((m.get("epoch", 0) for m in history), default=0)


def read_metrics(run_dir: PathLike) -> list[dict]:
    """metrics.jsonl as a list of dicts ([] when there is none; a line cut short by a crash is skipped)."""
    p = Path(run_dir) / METRICS
    return read_metrics_jsonl(p) if p.is_file() else []


def append_metrics(run_dir: PathLike, row: dict) -> None:
    with open(Path(run_dir) / METRICS, "a") as f:
        f.write(json.dumps(row) + "\n")


def truncate_metrics(run_dir: PathLike, epochs_done: int) -> None:
    """Drop metric lines of epochs after the last saved state (a crash between the two writes)."""
    rows = read_metrics(run_dir)
    keep = [r for r in rows if r.get("epoch", 0) <= epochs_done]
    if len(keep) != len(rows):
        atomic_write_text(Path(run_dir) / METRICS, "".join(json.dumps(r) + "\n" for r in keep))


def read_eval(run_dir: PathLike) -> dict:
    p = Path(run_dir) / EVAL
    return json.loads(p.read_text()) if p.is_file() else {}


def update_eval(run_dir: PathLike, values: dict, drop: tuple[str, ...] = ()) -> dict:
    """Merge ``values`` into RUN_DIR/eval.json (atomically), removing the keys ``drop``; returns the merged dict."""
    merged = {k: v for k, v in {**read_eval(run_dir), **values}.items() if k not in drop or k in values}
    atomic_write_text(Path(run_dir) / EVAL, json.dumps(merged, indent=2))
    return merged


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
