"""Progress bars for the commands' long stages (tqdm), readable in a terminal and in a log file.

In a terminal the bar redraws in place. When stderr is a file (``nohup``, a cluster job's log) the bar is
written as a plain line (position, rate, ETA) at the start and then at most every 30 seconds, so a log shows
that work goes on without filling up with redraws or carriage returns. Every bar in vqwae comes from here.
"""
from __future__ import annotations

import sys

from tqdm.auto import tqdm

#: Seconds between two lines of a bar in a log file (the "a line at least every 30 s" promise).
LOG_INTERVAL = 30.0


class _Lines:
    """A text stream for tqdm that turns its in-place redraws into whole lines (a log file has no cursor)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


def interactive() -> bool:
    """Whether progress goes to a terminal (else: a log file or a pipe)."""
    return sys.stderr.isatty()


def progress_bar(iterable=None, *, desc: str | None, total: int | None = None, unit: str = "it") -> tqdm:
    """A bar labelled ``desc``; ``desc=None`` makes it silent (the callers' "no progress" switch)."""
    live = interactive()
    return tqdm(iterable, total=total, desc=desc, disable=desc is None, leave=False, unit=unit,
                file=sys.stderr if live else _Lines(sys.stderr), mininterval=0.1 if live else LOG_INTERVAL,
                dynamic_ncols=live, ascii=None if live else True)


def refresh_interval() -> float:
    """Seconds between two updates of a bar's figures that cost a host read (a loss in the postfix): often enough
    that the line a log gets every 30 s shows figures at most 5 s old."""
    return 0.5 if interactive() else 5.0
