"""``vqwae reproduce``: the paper's experiments as cached training runs, and a report beside the paper's numbers.

    grid            experiments, budgets, and the runs each needs (one function per grid cell)
    runner          train and evaluate each run once, cached by its configuration
    analyses        one report section per experiment: tables, claims checked, figures; ``reproduce()``
    report          Markdown / HTML
    paper_numbers   the paper's tables as data
"""
from vqwae.reproduce.analyses import reproduce

__all__ = ["reproduce"]
