"""``vqwae reproduce``: the paper's experiments as cached training runs, and a report beside the paper's numbers.

    grid            experiments, budgets, and the runs each needs (one function per grid cell)
    runner          train and evaluate each run once, cached by its configuration
    claims          the paper's claims checked against one run's noise
    sections        one report section per experiment: tables, claims checked, figures
    orchestrate     ``reproduce()``: the runs an invocation needs, trained and evaluated, and the report
    report          Markdown / HTML
    paper_numbers   the paper's tables as data
"""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy)
    from vqwae.reproduce.orchestrate import reproduce

__all__ = ["reproduce"]
__getattr__, __dir__ = attach(__name__)
