"""Live training curves for TensorBoard (``vqwae train --logger tensorboard``), besides metrics.jsonl.

    tensorboard --logdir RUN_DIR/tensorboard      # or the parent folder of several runs

Every ``every`` steps the step's loss terms and perplexity (one host read per logged step, none in between),
and at each epoch's end every metric of its metrics.jsonl line, all against the global step. A resumed run
appends to the same folder; TensorBoard shows the steps after the resume point over the old ones.
"""
from __future__ import annotations

from pathlib import Path

import torch

from vqwae.training import folder


class NullLogger:
    """The default (``--logger none``): metrics.jsonl only."""

    def step(self, step: int, values: dict) -> None:
        pass

    def epoch(self, step: int, metrics: dict) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(NullLogger):
    def __init__(self, run_dir: Path, every: int = 50):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # torch's writer needs the tensorboard package
            raise ValueError("--logger tensorboard needs the tensorboard package: pip install 'vqwae[tensorboard]'") from e
        self.every = every
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / folder.TENSORBOARD))

    def step(self, step: int, values: dict) -> None:
        if step % self.every:
            return
        for name, value in values.items():
            self.writer.add_scalar(f"step/{name}", float(value.detach() if torch.is_tensor(value) else value), step)

    def epoch(self, step: int, metrics: dict) -> None:
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in ("epoch", "step"):
                self.writer.add_scalar(name, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def build_logger(kind: str, run_dir: Path, is_main: bool) -> NullLogger:
    """The logger a run asked for (rank 0 only: the others log nothing)."""
    if kind == "tensorboard" and is_main:
        return TensorBoardLogger(run_dir)
    return NullLogger()
