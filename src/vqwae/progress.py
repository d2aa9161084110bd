"""Progress bars for the commands' long stages (tqdm), readable in a terminal and in a log file.

In a terminal the bar redraws in place; when stderr is a file (``nohup``, a cluster job's log) it is
written at most every 30 seconds, so a log shows that work goes on without filling up with redraws.
"""
from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress_bar(iterable=None, *, desc: str | None, total: int | None = None, unit: str = "it") -> tqdm:
    """A bar labelled ``desc``; ``desc=None`` makes it silent (the callers' "no progress" switch)."""
    interactive = sys.stderr.isatty()
    return tqdm(iterable, total=total, desc=desc, disable=desc is None, leave=False, unit=unit,
                mininterval=0.1 if interactive else 30.0, dynamic_ncols=interactive)
