"""Stage two on a run folder: fit the PixelCNN prior to a run's codes, sample images, generation FID.
(The prior itself, its training loop and sampling are the library in ``vqwae.prior``; this module is the
run-folder workflow around them.)

Layout (inside a run folder made by ``vqwae train``; names in ``vqwae.runs.layout``)::

    RUN_DIR/prior/                    the prior written by ``vqwae prior train RUN_DIR`` (with or without
        config.json                   --conditional: ``num_classes`` is null for an unconditional prior)
        model.safetensors             best weights by validation NLL
        metrics.jsonl                 one line per epoch: train_bpc, val_bpc (bits per code), seconds
        train_summary.json            best epoch / NLL, plus ``conditional``, the autoencoder's weights
                                      fingerprint and the data the codes came from
        codes_train.pt, codes_val.pt  cached code grids, keyed by the autoencoder weights' fingerprint
    RUN_DIR/prior_cond/, RUN_DIR/prior_uncond/
                                      where ``--out`` may put a second prior so that an unconditional and
                                      a class-conditional one coexist; :func:`find_prior` looks there too.

Generation FID (:func:`vqwae.runs.generation.generation_fid`) compares N decoded samples with the images of the test split, with
the same Inception pipeline and the same real-statistics cache key as the reconstruction FID of
:func:`vqwae.runs.evaluation.evaluate_run` (dataset, split, limit, data root, :func:`dataset_fingerprint`),
so ``vqwae eval`` and the gFID share the real statistics when split and limit agree.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from vqwae.figures.image_folder import save_image_folder
from vqwae.models.pretrained import WEIGHTS_NAME
from vqwae.prior.pixelcnn import CONFIG_NAME, GatedPixelCNN, PixelCNNConfig
from vqwae.prior.sampling import sample as sample_codes
from vqwae.prior.train import METRICS_NAME, SUMMARY_NAME, PriorTrainResult, cached_codes, train_prior
from vqwae.data.codes import CodesDataset
from vqwae.files import atomic_write_text
from vqwae.runs import layout
from vqwae.runs.codes import check_codes_fit, check_codes_match

__all__ = [
    "available_priors",
    "find_prior",
    "prior_is_conditional",
    "load_prior",
    "train_run_prior",
    "generate",
    "kind_replaced",
    "train_and_record_prior",
    "save_samples",
]

PRIOR_DIR, ALT_PRIOR_DIRS = layout.PRIOR, layout.ALT_PRIORS


def _kind(conditional: bool) -> str:
    return "class-conditional" if conditional else "unconditional"


# ---- locating a trained prior ----------------------------------------------------------------------
def prior_is_conditional(prior_dir: str | os.PathLike) -> bool:
    """Whether the prior in ``prior_dir`` is class-conditional (its config has ``num_classes``)."""
    p = Path(prior_dir) / CONFIG_NAME
    if not p.is_file() or not (Path(prior_dir) / WEIGHTS_NAME).is_file():
        raise FileNotFoundError(f"no trained prior in {prior_dir} (need {CONFIG_NAME} and {WEIGHTS_NAME})")
    return json.loads(p.read_text()).get("num_classes") is not None


def _is_prior(d: Path) -> bool:
    return (d / CONFIG_NAME).is_file() and (d / WEIGHTS_NAME).is_file()


def available_priors(run_dir: str | os.PathLike) -> dict[str, Path]:
    """The trained priors of a run: ``{"uncond": folder, "cond": folder}`` (a kind is absent when there is
    none). ``RUN_DIR/prior`` is preferred over ``RUN_DIR/prior_cond`` / ``RUN_DIR/prior_uncond``."""
    run_dir = Path(run_dir)
    found: dict[str, Path] = {}
    for d in (run_dir / PRIOR_DIR, run_dir / ALT_PRIOR_DIRS[False], run_dir / ALT_PRIOR_DIRS[True]):
        if _is_prior(d):
            found.setdefault("cond" if prior_is_conditional(d) else "uncond", d)
    return found


def find_prior(run_dir: str | os.PathLike, conditional: bool | None = None,
               prior_dir: str | os.PathLike | None = None) -> Path:
    """The folder of a trained prior of ``run_dir``.

    conditional: True / False for a class-conditional / unconditional prior, None for either (RUN_DIR/prior
        first). prior_dir: an explicit folder (checked to be of the requested kind).
    Raises FileNotFoundError when there is no prior (the message says how to train one), ValueError when
    the explicit folder holds the other kind."""
    run_dir = Path(run_dir)
    if prior_dir is not None:
        d = Path(prior_dir)
        is_cond = prior_is_conditional(d)  # FileNotFoundError when empty
        if conditional is not None and is_cond != conditional:
            raise ValueError(f"{d} holds an {_kind(is_cond)} prior, but an {_kind(conditional)} one is needed"
                             + (" (train one with `vqwae prior train RUN_DIR --conditional`)" if conditional else ""))
        return d
    found = available_priors(run_dir)
    if conditional is None:
        if _is_prior(run_dir / PRIOR_DIR):
            return run_dir / PRIOR_DIR
        if found:
            return next(iter(found.values()))
        raise FileNotFoundError(f"no prior trained for {run_dir} yet: run `vqwae prior train {run_dir}` first")
    key = "cond" if conditional else "uncond"
    if key in found:
        return found[key]
    flag = " --conditional" if conditional else ""
    extra = ""
    if found:
        extra = (f" (it has only an {_kind(not conditional)} prior in {next(iter(found.values()))}; "
                 f"keep both with `vqwae prior train {run_dir}{flag} --out {run_dir / ALT_PRIOR_DIRS[conditional]}`)")
    raise FileNotFoundError(f"no {_kind(conditional)} prior trained for {run_dir}: run "
                            f"`vqwae prior train {run_dir}{flag}` first{extra}")


def read_summary(prior_dir: Path) -> dict:
    p = prior_dir / SUMMARY_NAME
    return json.loads(p.read_text()) if p.is_file() else {}


def load_prior(run_dir: str | os.PathLike, prior_dir: str | os.PathLike, device="cpu",
               *, check_fingerprint: bool = True) -> tuple[GatedPixelCNN, dict]:
    """The prior in ``prior_dir`` (eval mode, on ``device``) and its train_summary.json.

    With ``check_fingerprint`` a prior trained on other autoencoder weights than RUN_DIR's current ones
    (the run was retrained since) is refused with a ValueError."""
    prior_dir = Path(prior_dir)
    summary = read_summary(prior_dir)
    fp = summary.get("autoencoder_fingerprint")
    if check_fingerprint and fp is not None:
        current = layout.model_fingerprint(run_dir)
        if fp != current:
            raise ValueError(f"the prior in {prior_dir} was trained on other weights than {run_dir}'s current "
                             f"model (retrained since?); train it again with `vqwae prior train {run_dir}`")
    return GatedPixelCNN.from_pretrained(prior_dir, map_location=device), summary


# ---- data ------------------------------------------------------------------------------------------
# ---- training ----------------------------------------------------------------------------------------
def _resolve_limit(override: int | None, recorded: int | None) -> int | None:
    if override is None:
        return recorded
    return None if override < 0 else override


def train_run_prior(
    run_dir: str | os.PathLike,
    *,
    conditional: bool = False,
    epochs: int = 20,
    batch_size: int = 128,
    lr: float = 3e-4,
    hidden_channels: int = 64,
    num_layers: int = 15,
    max_steps: int | None = None,
    device: str | torch.device = "cpu",
    train_limit: int | None = None,
    eval_limit: int | None = None,
    out_dir: str | os.PathLike | None = None,
    data_root: str | None = None,
    seed: int = 0,
    progress: bool = False,
    refresh_codes: bool = False,
    codes_file: str | os.PathLike | None = None,
    val_codes_file: str | os.PathLike | None = None,
    on_epoch=None,
) -> tuple[PriorTrainResult, dict]:
    """Fit the gated PixelCNN to the code grids of a run's training split (best epoch by validation NLL).

    The data are the run's own (dataset, data root, image size, seed and train / eval limits);
    ``train_limit`` / ``eval_limit`` override the recorded limits (a negative value: the whole split).
    Code grids are extracted once with the frozen autoencoder and cached under RUN_DIR/prior keyed by the
    weights' fingerprint. Writes ``out_dir`` (default RUN_DIR/prior): config.json, model.safetensors,
    metrics.jsonl (bits per code) and train_summary.json, which also records ``conditional``,
    ``num_classes``, ``autoencoder_fingerprint``, the dataset and limits, and ``seconds``.
    ``codes_file`` (and ``val_codes_file``): train on the codes ``vqwae encode`` wrote instead of extracting
    them; they must come from RUN_DIR's current weights (without validation codes the best epoch is chosen by
    the training NLL). ``on_epoch(row)``: called with each epoch's metrics as it ends.
    Returns (PriorTrainResult, summary dict). Raises ValueError for --conditional on unlabelled data.
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    cfg = layout.read_config(run_dir)
    device = torch.device(device)
    fingerprint = layout.model_fingerprint(run_dir)
    cache_dir = run_dir / PRIOR_DIR
    if codes_file is not None:
        codes_tr, labels_tr, meta = _codes_from_file(run_dir, codes_file, fingerprint, conditional)
        codes_va = labels_va = None
        if val_codes_file is not None:
            codes_va, labels_va, _ = _codes_from_file(run_dir, val_codes_file, fingerprint, conditional)
        num_codes, num_classes, image_size = meta.num_codes, meta.num_classes, meta.image_size
        t_lim = e_lim = None
        source = str(Path(codes_file).resolve())
    else:
        t_lim, e_lim = _resolve_limit(train_limit, cfg.data.train_limit), _resolve_limit(eval_limit, cfg.data.eval_limit)
        root = layout.data_root_of(cfg, data_root)
        train_set, info = layout.load_run_split(run_dir, "train", limit=t_lim, data_root=root, cfg=cfg)
        val_set, _ = layout.load_run_split(run_dir, "val", limit=e_lim, data_root=root, cfg=cfg)
        num_classes = info.num_classes
        if conditional and not num_classes:
            raise ValueError(f"--conditional needs class labels, but dataset {cfg.data.dataset!r} has none")
        if len(train_set) == 0:
            raise ValueError("the training split is empty (check --train-limit)")
        model = layout.load_model(run_dir, device)
        codes_tr, labels_tr = cached_codes(model, DataLoader(train_set, batch_size=256), split="train",
                                           cache_dir=cache_dir, fingerprint=fingerprint, device=device,
                                           refresh=refresh_codes)
        codes_va = labels_va = None
        if len(val_set) > 0:
            codes_va, labels_va = cached_codes(model, DataLoader(val_set, batch_size=256), split="val",
                                               cache_dir=cache_dir, fingerprint=fingerprint, device=device,
                                               refresh=refresh_codes)
        num_codes = int(model.quantizer.num_codes)
        del model
        image_size, source = info.image_size, None
    config = PixelCNNConfig(num_codes=num_codes, num_classes=num_classes if conditional else None,
                            hidden_channels=hidden_channels, num_layers=num_layers)
    out_dir = Path(out_dir) if out_dir is not None else cache_dir
    result = train_prior(codes_tr, codes_va, labels_train=labels_tr if conditional else None,
                         labels_val=labels_va if conditional else None, config=config, epochs=epochs,
                         batch_size=batch_size, lr=lr, out_dir=out_dir, seed=seed, device=device,
                         max_steps=max_steps, progress=progress, on_epoch=on_epoch)
    summary = read_summary(out_dir)
    summary.update(conditional=conditional, num_classes=config.num_classes, autoencoder_fingerprint=fingerprint,
                   run_dir=str(run_dir.resolve()), dataset=cfg.data.dataset, train_limit=t_lim, eval_limit=e_lim,
                   image_size=image_size, codes_file=source, hidden_channels=hidden_channels, num_layers=num_layers,
                   seconds=time.perf_counter() - t0)
    atomic_write_text(out_dir / SUMMARY_NAME, json.dumps(summary, indent=2) + "\n")
    return result, summary


def _codes_from_file(run_dir: Path, path, fingerprint: str, conditional: bool):
    """(codes, labels, metadata) of a codes file that RUN_DIR's weights (``fingerprint``) wrote."""
    ds = CodesDataset(path)  # what any second stage reads; the prior takes its tensors whole
    codes, labels, meta = ds.codes, ds.labels, ds.meta
    check_codes_match(meta, path, fingerprint, run_dir)
    check_codes_fit(meta, path, layout.load_model(run_dir), run_dir)
    if meta.levels is not None or codes.dim() != 3:
        raise ValueError(f"{path} holds codes of shape {meta.grid}: the PixelCNN prior models (h, w) grids of one "
                         "quantizer, not residual levels")
    if conditional and labels is None:
        raise ValueError(f"--conditional needs class labels, but {path} has none ({meta.source})")
    return codes, labels, meta


# ---- sampling ----------------------------------------------------------------------------------------
@torch.no_grad()
def generate(
    run_dir: str | os.PathLike,
    n: int,
    *,
    labels: torch.Tensor | int | None = None,
    conditional: bool | None = None,
    prior_dir: str | os.PathLike | None = None,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, Path]:
    """Sample ``n`` code grids from a run's prior and decode them with the run's frozen autoencoder.

    labels: for a class-conditional prior, one class for all samples or (n,) classes; None cycles through
        the classes (0, 1, ..., C-1, 0, ...). Must be None for an unconditional prior.
    conditional: which kind of prior to use when ``prior_dir`` is None (None: RUN_DIR/prior whatever its
        kind; True when ``labels`` are given).
    Returns (images (n, C, S, S) float32 in [0, 1] on the CPU, labels (n,) or None, the prior's folder).
    Draws are reproducible for a fixed (seed, batch_size, device)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    run_dir = Path(run_dir)
    device = torch.device(device)
    if conditional is None and labels is not None:
        conditional = True
    pdir = find_prior(run_dir, conditional, prior_dir)
    prior, summary = load_prior(run_dir, pdir, device)
    C = prior.config.num_classes
    if C is None:
        if labels is not None:
            raise ValueError(f"the prior in {pdir} is unconditional: it takes no class")
        lab = None
    else:
        if labels is None:
            lab = torch.arange(n) % C
        else:
            lab = torch.as_tensor(labels).long().reshape(-1)
            lab = lab.expand(n).clone() if lab.numel() == 1 else lab
        if lab.numel() != n:
            raise ValueError(f"expected 1 or {n} labels, got {lab.numel()}")
        if int(lab.min()) < 0 or int(lab.max()) >= C:
            raise ValueError(f"class {int(lab.max()) if int(lab.max()) >= C else int(lab.min())} is out of range: "
                             f"the prior has {C} classes (0..{C - 1})")
    model = layout.load_model(run_dir, device)
    grid = summary.get("grid")
    if grid is None:
        raise ValueError(f"{pdir / SUMMARY_NAME} lacks the latent grid size: train the prior again")
    gen = torch.Generator(device=device).manual_seed(int(seed))
    codes = sample_codes(prior, n, tuple(grid), labels=lab, temperature=temperature, batch_size=batch_size,
                         progress=progress, generator=gen)
    images = []
    for s in range(0, n, batch_size):
        images.append(model.decode_indices(codes[s:s + batch_size].to(device)).float().clamp(0, 1).cpu())
    return torch.cat(images), lab, pdir


# ---- the commands' workflows ---------------------------------------------------------------------------
def kind_replaced(out_dir: str | os.PathLike, conditional: bool) -> str | None:
    """The kind of the prior that training a ``conditional`` one into ``out_dir`` would replace, if it differs."""
    d = Path(out_dir)
    if not _is_prior(d):
        return None
    try:
        was_cond = prior_is_conditional(d)
    except (OSError, ValueError):
        return None
    return _kind(was_cond) if was_cond != conditional else None


def holds_prior(out_dir: str | os.PathLike) -> bool:
    """Whether ``out_dir`` holds a trained prior (which training into it would replace)."""
    return _is_prior(Path(out_dir))


def _json_or_none(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _prior_wrote(path: Path) -> bool:
    """Whether ``path`` (one of the names a prior's training writes) is provably a prior's file."""
    d, name = path.parent, path.name
    cfg = _json_or_none(d / CONFIG_NAME)
    is_cfg = isinstance(cfg, dict) and {"num_codes", "hidden_channels", "num_layers"} <= set(cfg)
    if name in (CONFIG_NAME, WEIGHTS_NAME):
        return is_cfg
    if name == SUMMARY_NAME:
        summary = _json_or_none(path)
        return isinstance(summary, dict) and "uniform_bpc" in summary
    try:  # metrics.jsonl: empty, or lines of the prior's epochs
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return False
    return all(isinstance(r, dict) and "train_bpc" in r for r in rows)


def foreign_files(out_dir: str | os.PathLike) -> list[Path]:
    """The files in ``out_dir`` that training a prior there would overwrite but that no prior wrote (a user's own
    config.json, say): training into it is refused while there are any."""
    d = Path(out_dir)
    return [d / n for n in (CONFIG_NAME, WEIGHTS_NAME, METRICS_NAME, SUMMARY_NAME)
            if (d / n).exists() and not _prior_wrote(d / n)]


def train_and_record_prior(run_dir: str | os.PathLike, *, conditional: bool = False, **kwargs):
    """``train_run_prior``, and the best validation NLL into eval.json (prior_val_bpc / prior_cond_val_bpc) when
    the prior is one of the run's own folders (RUN_DIR/prior, prior_cond, prior_uncond): a prior written
    elsewhere does not speak for the run."""
    result, summary = train_run_prior(run_dir, conditional=conditional, **kwargs)
    own = {Path(run_dir).resolve() / name for name in (layout.PRIOR, *layout.ALT_PRIORS.values())}
    if Path(result.out_dir).resolve() in own:
        layout.update_eval(run_dir, {"prior_cond_val_bpc" if conditional else "prior_val_bpc": result.best_val_bpc})
    return result, summary


def save_samples(images: torch.Tensor, labels: torch.Tensor | None, out: str | os.PathLike, *,
                 nrow: int | None = None, cycling: bool = False, legacy: bool = False) -> Path:
    """One PNG per image (``sample_007_class3.png``) and grid.png in ``out``; ``nrow`` defaults to the classes
    when they are cycled, else about sqrt(n). ``legacy``: ``out`` is a run's own samples/ folder (see
    ``save_image_folder``)."""
    n = images.shape[0]
    if nrow is None and cycling and labels is not None:
        classes = int(labels.max()) + 1
        nrow = classes if n > classes - 1 else None
    suffixes = [f"_class{int(c)}" for c in labels] if labels is not None else None
    return save_image_folder(images, out, prefix="sample", suffixes=suffixes, nrow=nrow, legacy=legacy)
