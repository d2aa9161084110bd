"""Training: the run configuration, the loop, checkpoints and torchrun support."""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy), in the API reference's order
    from vqwae.training.config import PRESETS, TrainConfig
    from vqwae.training.trainer import TrainingDiverged, TrainResult, build_model, train

__all__ = ["TrainConfig", "PRESETS", "train", "TrainResult", "TrainingDiverged", "build_model"]
__getattr__, __dir__ = attach(__name__)
