"""What ``pip install vqwae`` brings and what each extra adds, as the code needs it: the core (the quantizers, their
state dicts through safetensors) needs torch, numpy and safetensors only; every other package comes with an extra,
and a missing one is a one-line error naming the ``pip install`` that brings it.

    pip install vqwae                 # the quantizers
    pip install 'vqwae[paper]'        # + POT: the paper's exact OT, diagnostics' exact W
    pip install 'vqwae[train]'        # + training, data sets, figures from Python
    pip install 'vqwae[eval]'         # + SSIM / PSNR / LPIPS / FID
    pip install 'vqwae[cli]'          # the `vqwae` command: all of the above
    pip install 'vqwae[all]'          # + the Hugging Face Hub and TensorBoard
"""
from __future__ import annotations

import importlib
import types

#: the extra that brings each package (by its import name) vqwae imports beyond the core
EXTRA = {
    "ot": "paper",
    "yaml": "train", "tqdm": "train", "torchvision": "train", "PIL": "train", "sklearn": "train",
    "matplotlib": "train", "threadpoolctl": "train",
    "torchmetrics": "eval", "scipy": "eval",
    "typer": "cli", "rich": "cli",
    "huggingface_hub": "hub", "tensorboard": "tensorboard",
}
#: the distribution's name where it differs from the import name
DISTRIBUTION = {"ot": "POT", "yaml": "pyyaml", "PIL": "Pillow", "sklearn": "scikit-learn"}


def missing_extra(error: ModuleNotFoundError) -> ModuleNotFoundError | None:
    """The one-line error naming the extra for a package vqwae needs and could not import (None for another)."""
    top = (error.name or "").split(".")[0]
    extra = EXTRA.get(top)
    if extra is None:
        return None
    return ModuleNotFoundError(f"{DISTRIBUTION.get(top, top)} is not installed; this part of vqwae needs it: "
                               f"pip install 'vqwae[{extra}]'", name=error.name)


def require(module: str) -> types.ModuleType:
    """``importlib.import_module(module)``, or the one-line error naming its extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        hint = missing_extra(e)
        if hint is None:
            raise
        raise hint from None
