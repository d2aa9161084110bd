"""One save / load mixin for vqwae's models: safetensors weights and a JSON config, written atomically.

    model.save_pretrained("folder")                  # folder/model.safetensors + folder/<config_name>
    same = Model.from_pretrained("folder")           # a local folder (what runs and tests use)
    same = Model.from_pretrained("user/repo")        # a Hugging Face Hub repo (needs `pip install huggingface_hub`)

Why not huggingface_hub's ``PyTorchModelHubMixin``: it names its config ``config.json``, which in a run
folder is the training config; the autoencoder's stays ``model_config.json`` so existing runs keep loading.
The Hub is still reachable through ``hf_hub_download`` when the argument is not a local folder.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import torch
from torch import nn
from safetensors.torch import load_file, save_file

from vqwae.extras import require
from vqwae.files import atomic_path, atomic_write_text, read_json_object

WEIGHTS_NAME = "model.safetensors"


class PretrainedMixin:
    """Subclasses set ``config_name`` and ``format_version`` and implement ``config_dict()`` and
    ``_from_config_dict(config, version)``."""

    config_name: str = "config.json"
    format_version: int = 1

    def config_dict(self) -> dict:
        raise NotImplementedError

    @classmethod
    def _from_config_dict(cls, config: dict, version: int):
        raise NotImplementedError

    def _check_loaded(self, missing: list[str], unexpected: list[str], where: Path) -> None:
        """Missing or unexpected keys are an error (subclasses may tolerate buffers a file predates)."""
        if missing or unexpected:
            raise ValueError(f"{where} does not match its config: missing {missing[:5]}, unexpected {unexpected[:5]}")

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write the weights and the config (each atomically) into ``directory``."""
        d = Path(directory)
        # Clones: tied weights (the authors' shared residual layers) appear under several names, and
        # safetensors refuses shared storage.
        state = {k: v.detach().cpu().contiguous().clone() for k, v in self.state_dict().items()}
        with atomic_path(d / WEIGHTS_NAME) as tmp:
            save_file(state, str(tmp), metadata={"format": "pt"})
        atomic_write_text(d / self.config_name,
                          json.dumps({"format_version": self.format_version, **self.config_dict()}, indent=2) + "\n")
        return d

    @classmethod
    def from_pretrained(cls, source: str | os.PathLike, map_location: str | torch.device = "cpu"):
        """A model from a folder written by ``save_pretrained`` (or a Hub repo id "user/repo"), in eval mode: running
        it never changes it (in training mode a quantizer's forward moves its codebook and its solver's state)."""
        d = _resolve(source, cls.config_name)
        cfg_path, w_path = d / cls.config_name, d / WEIGHTS_NAME
        for p in (cfg_path, w_path):
            if not p.is_file():
                raise FileNotFoundError(f"{p} not found: expected a folder written by save_pretrained (or a vqwae run)")
        config = read_json_object(cfg_path, f"a {cls.__name__} config")
        version = config.pop("format_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= cls.format_version:
            raise ValueError(f"{cfg_path} has format_version {version!r}; this vqwae reads 1 to {cls.format_version} "
                             "(a newer vqwae wrote it? upgrade vqwae)")
        try:
            model = cls._from_config_dict(config, version)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"{cfg_path} is not a valid {cls.__name__} config: {type(e).__name__}: {e}") from None
        try:
            state = load_file(str(w_path), device="cpu")
        except Exception as e:  # safetensors raises its own error types for truncated/corrupt files
            raise ValueError(f"{w_path} could not be read (corrupt or truncated?): {e}") from e
        try:
            missing, unexpected = load_checked(model, state, w_path, strict=False)
        except RuntimeError as e:  # a shape that differs: torch lists every one, we name the first
            mismatches = [line.strip() for line in str(e).splitlines() if "size mismatch" in line]
            raise ValueError(f"{w_path} does not fit {cfg_path} ({len(mismatches)} tensor(s) of another shape): "
                             f"{mismatches[0] if mismatches else e}") from None
        model._check_loaded(list(missing), list(unexpected), w_path)
        bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:  # a run that diverged: NaN weights would give NaN metrics and all-zero codes, silently
            raise ValueError(f"{w_path} holds non-finite values (NaN or inf) in {', '.join(bad[:3])}"
                             + (f" and {len(bad) - 3} more tensors" if len(bad) > 3 else "")
                             + ": the weights are damaged (training diverged?); retrain, or use an earlier copy")
        return model.to(map_location).eval()


def load_checked(model: nn.Module, state: dict, where: str | Path, strict: bool = True):
    """``model.load_state_dict(state, strict)``, refusing (one line naming it) a tensor whose dtype is not the one
    the model holds: ``load_state_dict`` would cast it (a header that calls float32 bytes ``I32`` gives codebook values
    ~1e9; a float64 counter becomes an int64 one). Each module checks its own tensors after its upgrade hook has
    renamed them (``_load_from_state_dict``), so older layouts still load. Every file vqwae reads weights from
    (``from_pretrained``, a run's resume state) comes through here."""
    with _refusing_other_dtypes(model, where):
        return model.load_state_dict(state, strict=strict)


@contextlib.contextmanager
def _refusing_other_dtypes(model: nn.Module, where: str | Path):

    def check(module, state_dict, prefix, *_):
        own = {**module._parameters, **{k: v for k, v in module._buffers.items()
                                         if k not in module._non_persistent_buffers_set}}
        for name, expected in own.items():
            got = state_dict.get(prefix + name)
            if expected is not None and isinstance(got, torch.Tensor) and got.dtype != expected.dtype:
                raise ValueError(f"{where}: tensor {prefix + name} is {got.dtype} in the file, but the model holds "
                                 f"{expected.dtype}: the file was not written for this model (or its header was "
                                 "altered)")

    # the private form: the public register_load_state_dict_pre_hook is younger than the torch vqwae supports (2.1)
    handles = [m._register_load_state_dict_pre_hook(check, with_module=True) for m in model.modules()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def weights_fingerprint(source: str | Path | nn.Module) -> str:
    """A sha256 hex digest identifying autoencoder weights.

    source: a weights file (hash of its bytes), a directory (hash of every ``*.safetensors``, ``*.pt`` and
    ``*.pth`` file in it, sorted by name) or an ``nn.Module`` (hash of its state dict: names, dtypes,
    shapes and values)."""
    h = hashlib.sha256()
    if isinstance(source, nn.Module):
        for name, t in sorted(source.state_dict().items()):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return h.hexdigest()
    p = Path(source)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in {".safetensors", ".pt", ".pth"})
        if not files:
            raise FileNotFoundError(f"no weights (*.safetensors, *.pt, *.pth) in {p}")
    elif p.is_file():
        files = [p]
    else:
        raise FileNotFoundError(p)
    for f in files:
        h.update(f.name.encode() + b"|")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _resolve(source: str | os.PathLike, config_name: str) -> Path:
    """A local folder as is; otherwise, when ``source`` looks like a Hub repo id, its downloaded snapshot."""
    d = Path(source)
    text = str(source)
    if d.exists() or text.count("/") != 1 or text.startswith((".", "/", "~")) or text.endswith("/"):
        return d
    if Path(text.split("/")[0]).is_dir():  # "runs/nope" where runs/ is a local folder: a typo, not a Hub repo
        raise FileNotFoundError(f"no such run folder: {d} (there is a local folder {text.split('/')[0]}/ but no "
                                f"{d.name} in it)")
    try:
        hf_hub_download = require("huggingface_hub").hf_hub_download  # optional: only for Hub repo ids
    except ModuleNotFoundError as e:
        raise FileNotFoundError(f"{source} is not a local folder; to load it from the Hugging Face Hub: {e}") from None
    hf_hub_download(text, WEIGHTS_NAME)
    return Path(hf_hub_download(text, config_name)).parent  # both files land in the repo's snapshot folder
