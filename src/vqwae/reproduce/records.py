"""Run records: the small files of finished runs, kept apart from the run cache, so a report can be built over
several sessions or machines and rebuilt without training.

``vqwae reproduce --records DIR`` first copies into OUT/runs every record in DIR whose run OUT lacks; it then
writes each run's record to DIR as soon as the run is trained and evaluated, and again after each analysis that
adds to eval.json (the probe, t-SNE and generation results), so an invocation killed mid-way keeps what it did.
A record holds no weights (``layout.RECORD_FILES``): a run restored from one is used as it stands when it already
has everything the invocation reads, and is trained again otherwise (``runner.ensure_run``). DIR mirrors
OUT/runs: ``DIR/<dataset>/<model>-<hash>/``.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from vqwae.runs import layout


def restore(records: Path, out: Path) -> int:
    """Copy each record in ``records`` whose run folder OUT/runs lacks; returns how many were copied."""
    copied = 0
    for src in sorted(p for p in Path(records).glob("*/*") if p.is_dir()):
        dst = Path(out) / "runs" / src.parent.name / src.name
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".restoring")  # a kill mid-copy leaves no half run folder behind
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        os.replace(tmp, dst)
        copied += 1
    return copied


def save(run_dir: Path, records: Path) -> Path:
    """Write RUN_DIR's record to ``records`` (each file replaced atomically; the config without this machine's paths:
    ``portable_config``); returns the record's folder."""
    run_dir = Path(run_dir)
    dst = Path(records) / run_dir.parent.name / run_dir.name
    dst.mkdir(parents=True, exist_ok=True)
    for f in layout.record_files(run_dir):
        tmp = dst / (f.name + ".tmp")
        if f.name == layout.CONFIG:
            tmp.write_text(portable_config(f.read_text(), f"runs/{run_dir.parent.name}/{run_dir.name}"))
        else:
            shutil.copyfile(f, tmp)
        os.replace(tmp, dst / f.name)
    return dst


def portable_config(text: str, out: str) -> str:
    """A run's config.json as a record keeps it: ``run.out`` as OUT/``out`` would place it, and every other absolute
    path (the data root, a weights file) left out (null): where a machine keeps its files is not what a run trained."""
    def scrub(value):
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, str) and (os.path.isabs(value) or value.startswith("~")):
            return None
        return value

    values = scrub(json.loads(text))
    if isinstance(values.get("run"), dict):
        values["run"]["out"] = out
    return json.dumps(values, indent=2) + "\n"
