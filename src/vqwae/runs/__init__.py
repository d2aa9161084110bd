"""A run folder (RUN_DIR) as written by ``vqwae train`` and read by every later command.

    RUN_DIR/config.json          the resolved TrainConfig
    RUN_DIR/model.safetensors    best weights by validation MSE (+ model_config.json): VQAutoencoder.from_pretrained
    RUN_DIR/metrics.jsonl        one JSON object per epoch
    RUN_DIR/state.pt             resumable training state
    RUN_DIR/eval.json            results of eval / probe / tsne / generation, merged key by key
"""
from __future__ import annotations

import json
import os
from pathlib import Path

EVAL_NAME = "eval.json"


def read_train_config(run_dir: str | os.PathLike):
    """The TrainConfig a run was trained with."""
    from vqwae.training.config import TrainConfig

    p = Path(run_dir) / "config.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: {run_dir} is not a vqwae run folder (made by `vqwae train`)")
    return TrainConfig.from_saved(json.loads(p.read_text()))


def load_run_model(run_dir: str | os.PathLike, device="cpu"):
    """The run's best model, in eval mode, on ``device``."""
    from vqwae.models import VQAutoencoder

    return VQAutoencoder.from_pretrained(run_dir, map_location="cpu").to(device).eval()


def read_eval(run_dir: str | os.PathLike) -> dict:
    p = Path(run_dir) / EVAL_NAME
    return json.loads(p.read_text()) if p.is_file() else {}


def update_eval(run_dir: str | os.PathLike, values: dict) -> dict:
    """Merge ``values`` into RUN_DIR/eval.json (atomically: temp file + rename); returns the merged dict."""
    p = Path(run_dir) / EVAL_NAME
    merged = {**read_eval(run_dir), **values}
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(merged, indent=2))
    os.replace(tmp, p)
    return merged
