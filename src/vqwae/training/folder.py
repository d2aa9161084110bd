"""The run folder as training writes it (RUN_DIR): every file name it holds, and the one way to write each.

    RUN_DIR/config.json                the resolved TrainConfig (format_version 2: nested sections)
    RUN_DIR/model.safetensors          best weights by validation MSE
    RUN_DIR/model_config.json          the model's own config (VQAutoencoder.from_pretrained(RUN_DIR))
    RUN_DIR/metrics.jsonl              one JSON object per epoch
    RUN_DIR/provenance.jsonl           one line per training start or resume and per evaluation: the commit, date,
                                       torch, Python and device (vqwae.provenance)
    RUN_DIR/state.pt                   resumable training state (vqwae.training.checkpoint)
    RUN_DIR/.metrics.pending.json      the last epoch's metrics line until its state.pt is written
    RUN_DIR/transport_fit.json         fit_steps: the transport map solved on the saved weights (cells' TV before/after)
    RUN_DIR/run.lock                   held by the process training into RUN_DIR (vqwae.training.lock)
    RUN_DIR/eval.json                  results of eval / probe / tsne / generation, merged key by key
    RUN_DIR/code_usage_SPLIT.json|png  code histogram of a split (and the learned pi)
    RUN_DIR/reconstructions_SPLIT.png  originals above reconstructions
    RUN_DIR/reconstructions_SPLIT.npz  the first RECONSTRUCTION_SAMPLES images' reconstructions, uint8 (a report's grid)
    RUN_DIR/training_curves.png        metrics.jsonl as curves
    RUN_DIR/tsne.png                   t-SNE of the quantized latents
    RUN_DIR/tensorboard/               TensorBoard event files (vqwae train --logger tensorboard)
    RUN_DIR/prior/                     the PixelCNN prior (vqwae prior train); prior_cond/, prior_uncond/ beside it
    RUN_DIR/samples/                   images sampled from the prior (vqwae sample)

A run's *record* is its small text files (config, metrics, eval.json, usage histograms) and its t-SNE picture:
everything a report reads once the run is trained and evaluated, without the weights (see RECORD_FILES).

The names live here, below training, because training writes the folder; the workflows over a finished run
(``vqwae.runs``: its config, model and data) read them through ``vqwae.runs.layout``.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from vqwae.figures import read_metrics_jsonl
from vqwae.files import append_line, atomic_write_text, read_json_object
from vqwae.models import VQAutoencoder
from vqwae.models.pretrained import WEIGHTS_NAME, weights_fingerprint

CONFIG = "config.json"
MODEL_WEIGHTS = WEIGHTS_NAME  # "model.safetensors": the model folder's files are the model's (PretrainedMixin)
MODEL_CONFIG = VQAutoencoder.config_name  # "model_config.json"
METRICS = "metrics.jsonl"
PROVENANCE = "provenance.jsonl"
STATE = "state.pt"
METRICS_PENDING = ".metrics.pending.json"  # an epoch's metrics line until its state is saved (append_metrics)
LOCK = "run.lock"
EVAL = "eval.json"
TRANSPORT_FIT = "transport_fit.json"
TRAINING_CURVES = "training_curves.png"
TSNE = "tsne.png"
TENSORBOARD = "tensorboard"
SAMPLES = "samples"
PRIOR = "prior"
#: Second prior folders, so an unconditional and a class-conditional prior can coexist: {conditional: name}.
ALT_PRIORS = {True: "prior_cond", False: "prior_uncond"}

PathLike = str | os.PathLike
#: The files of a run's record (plus code_usage_SPLIT.json): what `vqwae reproduce --records` keeps.
RECORD_FILES = (CONFIG, MODEL_CONFIG, METRICS, EVAL, TSNE, TRANSPORT_FIT, PROVENANCE)


def code_usage_json(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"code_usage_{split}.json"


def code_usage_png(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"code_usage_{split}.png"


def reconstructions_png(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"reconstructions_{split}.png"


def append_provenance(run_dir: PathLike, line: dict) -> None:
    """Log one line of what a step of the run ran with (``vqwae.provenance.provenance``)."""
    append_line(Path(run_dir) / PROVENANCE, json.dumps(line, sort_keys=True))


def read_provenance(run_dir: PathLike) -> list[dict]:
    """The provenance log's lines (a line cut short by a crash is skipped)."""
    path, lines = Path(run_dir) / PROVENANCE, []
    if path.is_file():
        for text in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(text))
    return lines


#: How many of a split's first images an evaluation keeps the reconstructions of (reconstructions_npz)
RECONSTRUCTION_SAMPLES = 16


def reconstructions_npz(run_dir: PathLike, split: str) -> Path:
    return Path(run_dir) / f"reconstructions_{split}.npz"


def record_files(run_dir: PathLike) -> list[Path]:
    """The files of RUN_DIR's record that exist (RECORD_FILES, the code usage histograms' JSON and the kept
    reconstructions)."""
    d = Path(run_dir)
    return ([d / n for n in RECORD_FILES if (d / n).is_file()] + sorted(d.glob("code_usage_*.json"))
            + sorted(d.glob("reconstructions_*.npz")))


def has_weights(run_dir: PathLike) -> bool:
    return (Path(run_dir) / MODEL_WEIGHTS).is_file()


def model_fingerprint(run_dir: PathLike) -> str:
    """What identifies a run's (or a model folder's) weights: the sha256 of its model.safetensors. eval.json, a
    prior and a codes file record it, so that a later read can tell whether the weights changed since."""
    return weights_fingerprint(Path(run_dir) / MODEL_WEIGHTS)


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


# ---- config, metrics, eval.json ------------------------------------------------------------------
def _is_run_config(path: Path) -> bool:
    """Whether ``path`` is a config.json that vqwae train wrote (a run that stopped before its first epoch)."""
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(values, dict) and isinstance(values.get("run"), dict) and "out" in values["run"]


def check_can_train(run_dir: PathLike, resume: bool) -> None:
    """That training may start in RUN_DIR: a fresh folder, or ``resume`` with its state (else a one-line error).

    A fresh run overwrites nothing it did not write: a folder holding a run, or a file of a run's name that no
    run wrote (a user's own config.json, eval.json, ...), is refused. ``resume`` without state.pt continues
    nothing: a run killed before its first checkpoint records no epoch (metrics.jsonl gets an epoch's line only
    once its state is saved, see :func:`append_metrics`) and starts over; a run that records an epoch has lost
    its state.pt and is refused, whatever the count."""
    run_dir = Path(run_dir)
    existing = existing_run_files(run_dir)
    if existing and not resume:
        raise FileExistsError(
            f"{run_dir} already holds a run ({', '.join(existing)}); pass --resume to continue it, "
            "or choose another --out (nothing was overwritten)"
        )
    if not resume:
        foreign = [n for n in (MODEL_CONFIG, EVAL, TRANSPORT_FIT) if (run_dir / n).exists()]
        if (run_dir / CONFIG).exists() and not _is_run_config(run_dir / CONFIG):
            foreign.insert(0, CONFIG)
        if foreign:
            raise FileExistsError(f"{run_dir / foreign[0]} exists and was not written by vqwae train: a run in "
                                  f"{run_dir} would overwrite it; choose another --out, or move the file away")
    if resume and not (run_dir / STATE).exists():
        epochs = last_epoch(read_metrics(run_dir))
        if epochs > 0:
            raise FileNotFoundError(f"cannot resume: {run_dir / STATE} is missing, yet {run_dir} records "
                                    f"{epochs} trained epoch{'s' if epochs > 1 else ''}; nothing was changed "
                                    "(restore the file, or train into another --out)")


def remove_if_unused(run_dir: PathLike) -> None:
    """A run that stopped before its first checkpoint (bad data, a bad option, Ctrl-C in epoch 1) leaves no folder
    behind: this removes RUN_DIR (which this process created) when it holds nothing but what training writes before
    its first checkpoint (lock, config.json, the provenance log, the weights, an epoch's pending metrics line, an empty
    metrics.jsonl, their temporary files). Anything else, a user's file included, keeps the folder as it is."""
    run_dir = Path(run_dir)
    ours = {LOCK, CONFIG, PROVENANCE, MODEL_WEIGHTS, MODEL_CONFIG, METRICS_PENDING, METRICS}

    def before_first_checkpoint(p: Path) -> bool:
        name = p.name
        if name.startswith(".") and name.endswith(".tmp"):  # an atomic write cut short (vqwae.files)
            name = name[1:].rsplit(".", 2)[0]
        if name not in ours or not p.is_file() or p.is_symlink():
            return False
        return name != METRICS or not read_metrics(run_dir)

    with contextlib.suppress(OSError):
        entries = list(run_dir.iterdir())
        if not (run_dir / STATE).exists() and all(before_first_checkpoint(p) for p in entries):
            for p in entries:
                p.unlink(missing_ok=True)
            run_dir.rmdir()


def write_config(run_dir: PathLike, cfg) -> None:
    atomic_write_text(Path(run_dir) / CONFIG, json.dumps(cfg.to_dict(), indent=2))


def last_epoch(history: list[dict]) -> int:
    """The last epoch metrics.jsonl records (``history`` as ``read_metrics`` returns it; 0 for none)."""
    return max((m.get("epoch", 0) for m in history), default=0)


def read_metrics(run_dir: PathLike) -> list[dict]:
    """metrics.jsonl as a list of dicts ([] when there is none; a line cut short by a crash is skipped)."""
    p = Path(run_dir) / METRICS
    return read_metrics_jsonl(p) if p.is_file() else []


def append_metrics(run_dir: PathLike, row: dict) -> None:
    """An epoch's metrics line, pending until the epoch's state is saved: :func:`commit_metrics` (called by
    ``checkpoint.save_state`` once state.pt is written) appends it to metrics.jsonl. So a run that records an
    epoch always has the state to continue it, and a kill between the two writes loses nothing (the resume
    commits the line, :func:`truncate_metrics`)."""
    atomic_write_text(Path(run_dir) / METRICS_PENDING, json.dumps(row))


def commit_metrics(run_dir: PathLike) -> None:
    """Append the pending metrics line (if any) to metrics.jsonl, then drop it."""
    pending = Path(run_dir) / METRICS_PENDING
    if not pending.is_file():
        return
    row = _pending_row(pending)
    if row is not None:
        append_line(Path(run_dir) / METRICS, json.dumps(row))
    pending.unlink(missing_ok=True)


def _pending_row(path: Path) -> dict | None:
    try:
        row = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return row if isinstance(row, dict) else None


def truncate_metrics(run_dir: PathLike, epochs_done: int) -> None:
    """On resume: drop metric lines of epochs after the last saved state (a crash between the two writes), and
    commit a pending line of a saved epoch (a kill after its state was written, before its line was)."""
    pending = Path(run_dir) / METRICS_PENDING
    if pending.is_file():
        row = _pending_row(pending)
        epoch = row.get("epoch", 0) if row is not None else None
        if isinstance(epoch, int) and 0 < epoch <= epochs_done and epoch > last_epoch(read_metrics(run_dir)):
            commit_metrics(run_dir)
        else:
            pending.unlink(missing_ok=True)
    rows = read_metrics(run_dir)
    keep = [r for r in rows if r.get("epoch", 0) <= epochs_done]
    if len(keep) != len(rows):
        atomic_write_text(Path(run_dir) / METRICS, "".join(json.dumps(r) + "\n" for r in keep))


def read_transport_fit(run_dir: PathLike) -> dict:
    """RUN_DIR/transport_fit.json ({} when the saved weights' transport map was never solved)."""
    p = Path(run_dir) / TRANSPORT_FIT
    return read_json_object(p, "a transport fit's record") if p.is_file() else {}


def write_transport_fit(run_dir: PathLike, values: dict) -> None:
    """Record a transport fit of the weights now saved (``values`` names them: weights_fingerprint). The evaluation
    made before it described other weights, so eval.json goes (it is computed, and computed again on demand)."""
    atomic_write_text(Path(run_dir) / TRANSPORT_FIT, json.dumps(values, indent=2))
    (Path(run_dir) / EVAL).unlink(missing_ok=True)


def fit_pending(run_dir: PathLike, fit_steps: int) -> bool:
    """Whether a run that asks for a transport fit (the quantizer option fit_steps) has saved weights the fit has not
    yet solved: training that ended in a kill before its fit is not finished (``vqwae.training.train`` resumes it)."""
    return bool(fit_steps) and has_weights(run_dir) and (
        read_transport_fit(run_dir).get("weights_fingerprint") != model_fingerprint(run_dir))


def read_eval(run_dir: PathLike) -> dict:
    """RUN_DIR/eval.json ({} when there is none); a ValueError naming the file when it is damaged."""
    p = Path(run_dir) / EVAL
    return read_json_object(p, "a run's evaluation (written by `vqwae eval`)") if p.is_file() else {}


def update_eval(run_dir: PathLike, values: dict, drop: tuple[str, ...] = ()) -> dict:
    """Merge ``values`` into RUN_DIR/eval.json (atomically), removing the keys ``drop``; returns the merged dict.
    A damaged eval.json does not stop the evaluation that writes it: it is kept aside, renamed
    ``eval.json.damaged`` (``.damaged-2``...), with a note on stderr, and a new one started."""
    try:
        old = read_eval(run_dir)
    except ValueError as e:
        p = Path(run_dir) / EVAL
        aside = p.with_name(EVAL + ".damaged")
        n = 1
        while aside.exists():
            n += 1
            aside = p.with_name(f"{EVAL}.damaged-{n}")
        os.replace(p, aside)
        print(f"note: {e}; it was kept as {aside} and a new {EVAL} started", file=sys.stderr, flush=True)
        old = {}
    merged = {k: v for k, v in {**old, **values}.items() if k not in drop or k in values}
    atomic_write_text(Path(run_dir) / EVAL, json.dumps(merged, indent=2))
    return merged
