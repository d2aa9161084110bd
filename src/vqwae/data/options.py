"""The data section of a training configuration."""
from __future__ import annotations

import os
from dataclasses import dataclass

from vqwae.data.catalog import DATASETS, normalise_name
from vqwae.options import WHERE, check_fields, option


@dataclass(frozen=True)
class DataOptions:
    """The ``data`` section: the dataset, where it is read from, and the splits a run trains and validates on."""

    dataset: str = option("mnist", "mnist | fashionmnist | kmnist | cifar10 | svhn | celeba | ffhq | celebahq | imagefolder | digits "
                          "(vqwae.data.DATASETS)")
    data_root: str | None = option(None, "local copy of the dataset, e.g. ../shared/data (None: torchvision's "
                                   "default, with --download)", role=WHERE)
    download: bool = option(False, "let torchvision download the dataset when online", role=WHERE)
    image_size: int | None = option(None, "resize images to this side (None: the dataset's native size: 32; 64 for "
                                    "CelebA and image folders; 256 for FFHQ and CelebA-HQ)", min=1)
    train_limit: int | None = option(None, "use the first N training images (None: all)", min=1)
    eval_limit: int | None = option(None, "use the first N validation and test images (None: all)", min=1)
    skip_unreadable: bool = option(False, "imagefolder: leave out (and count) image files that cannot be decoded "
                                   "instead of stopping at the first")
    num_workers: int = option(0, "DataLoader workers (the splits are in memory: 0 is usually fastest)", min=0,
                             role=WHERE)

    def __post_init__(self):
        check_fields(self)
        if self.data_root:  # stored absolute: the run works (eval, --resume) from any folder
            object.__setattr__(self, "data_root", os.path.abspath(os.path.expanduser(self.data_root)))
        if normalise_name(self.dataset) not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; valid: {', '.join(DATASETS)}")
