"""Training: the run configuration, the loop, checkpoints and torchrun support."""
from vqwae.training.config import PRESETS, TrainConfig
from vqwae.training.trainer import TrainingDiverged, TrainResult, build_model, train

__all__ = ["TrainConfig", "PRESETS", "train", "TrainResult", "TrainingDiverged", "build_model"]
