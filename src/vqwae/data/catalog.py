"""The dataset names, declared once, without importing a loader or torch (a training config and the command line's
help read them); :mod:`vqwae.data.registry` loads each from the module named here."""
from __future__ import annotations

#: The built-in datasets: name -> the module of ``vqwae.data`` that loads it, or ``module.OBJECT`` for one of the
#: datasets a module serves.
LOADER_MODULES = {"mnist": "mnist.MNIST", "fashionmnist": "mnist.FASHION_MNIST", "kmnist": "mnist.KMNIST",
                  "cifar10": "cifar10", "svhn": "svhn", "celeba": "celeba", "ffhq": "ffhq", "celebahq": "celebahq",
                  "imagefolder": "imagefolder", "digits": "digits"}
DATASETS: list[str] = list(LOADER_MODULES)
"""The valid dataset names, as ``vqwae train --dataset`` takes them (``load_splits`` also accepts them in any case,
with ``-`` / ``_``). A list updated in place by :func:`~vqwae.data.registry.register_dataset`, so every importer sees
additions."""


def normalise_name(name: str) -> str:
    return str(name).strip().lower().replace("-", "").replace("_", "")
