"""A report cell: a run's value from the results ``ensure_runs`` returned, the paper's value beside it, the run's
code-usage histogram (what every report section reads of its runs)."""
from __future__ import annotations

import json

import numpy as np

from vqwae.reproduce.grid import PAPER_ROWS, RunSpec
from vqwae.reproduce.report import fmt
from vqwae.runs import layout


def paper_key(d: str, row: str) -> tuple[str, str | None]:
    """The paper's numbers for a row: both VQ-WAE rows sit beside the paper's VQ-WAE; the field's VQ has none."""
    return d, PAPER_ROWS.get(row)


def get(results, s: RunSpec, key):
    """Run ``s``'s value of ``key`` (None when the run or the value is missing)."""
    return results[s].get(key) if s in results else None


def paper_pair(this, paper, digits=4):
    """"this (paper)", as the tables show a value beside the paper's."""
    return f"{fmt(this, digits)} ({fmt(paper, digits)})"


def usage(results, s: RunSpec) -> np.ndarray:
    """Run ``s``'s code-usage histogram on the test split (counts per code)."""
    p = layout.code_usage_json(results[s]["run_dir"], "test")
    return np.asarray(json.loads(p.read_text()), dtype=float)
