"""The dataset layer: ``load_splits(name, root, ...)`` -> train / val / test + :class:`DatasetInfo`.

>>> from vqwae.data import load_splits
>>> s = load_splits("digits", None)            # no files needed
>>> x, y = s.train[0]                           # float32 (1, 32, 32) in [0, 1], int64 label
>>> s.info
DatasetInfo(name='digits', channels=1, image_size=32, num_classes=10)

Datasets (:data:`DATASETS`): ``mnist`` (1x32x32), ``cifar10`` (3x32x32, python batches or JPEG
tree), ``svhn`` (3x32x32), ``celeba`` (3x64x64), ``ffhq`` and ``celebahq`` (3x256x256), ``imagefolder`` (3xSxS,
any images), ``digits`` (1x32x32, scikit-learn's embedded digits). Each module documents its layouts and
splits. Splits are held in memory as one tensor (:class:`ImageTensorDataset`), except FFHQ and CelebA-HQ,
read from their files on each access (:class:`~vqwae.data.images.ImageFileDataset`); decoded JPEG folders
are cached under ``$VQWAE_CACHE`` (default ``~/.cache/vqwae``).

A data set's *codes* (``vqwae encode``) are read back by :class:`CodesDataset` (:mod:`vqwae.data.codes`).
"""
from typing import TYPE_CHECKING

from vqwae.lazy import attach

if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy), in the API reference's order
    from vqwae.data.base import CorruptImageError, DatasetInfo, DatasetNotFoundError, ImageTensorDataset, Splits
    from vqwae.data.cache import cache_dir
    from vqwae.data.catalog import DATASETS
    from vqwae.data.codes import CodesDataset, CodesMeta, load_codes, save_codes
    from vqwae.data.registry import LOADERS, load_split, load_splits, register_dataset

__all__ = ["load_splits", "load_split", "DATASETS", "DatasetInfo", "Splits", "ImageTensorDataset",
           "DatasetNotFoundError", "CorruptImageError", "register_dataset", "cache_dir", "LOADERS",
           "CodesDataset", "CodesMeta", "load_codes", "save_codes"]
__getattr__, __dir__ = attach(__name__)
