"""Every public entry point of vqwae with one optional package made unimportable (tests/test_extras.py).

    python tests/scripts/extras_walk.py PACKAGE WORK [SHARED]

PACKAGE (an import name of ``vqwae.extras.EXTRA``) is blocked before vqwae is imported: importing it, or anything
under it, raises the ModuleNotFoundError a missing package raises. WORK holds what the test made beforehand with
every package present (``run``: a trained run with a prior, ``codes.safetensors``, ``images/``, ``x.yaml``).
Each entry point is then called; one JSON line per entry: ``{"entry", "outcome", "line"}``, the outcome
``ok`` (it ran), ``hint`` (it stopped with one line naming ``pip install 'vqwae[...]'``) or ``bad`` (a traceback,
a bare error, a line that names no extra). A command's progress lines may come before its one ``error:`` line.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import io
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

BLOCKED, WORK = sys.argv[1], Path(sys.argv[2])
SHARED = Path(sys.argv[3]) if len(sys.argv) > 3 else None


class Missing(importlib.abc.MetaPathFinder):
    """Finds BLOCKED and its submodules as a Python where the package is not installed does: not at all."""

    def find_spec(self, name, path=None, target=None):
        if name == BLOCKED or name.startswith(BLOCKED + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


for loaded in [m for m in sys.modules if m == BLOCKED or m.startswith(BLOCKED + ".")]:
    del sys.modules[loaded]
sys.meta_path.insert(0, Missing())
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
OUT = WORK / f"out_{BLOCKED}"  # this walk's own: what an earlier walk left there is not its to keep
shutil.rmtree(OUT, ignore_errors=True)
OUT.mkdir()
RUN = WORK / "run"
HINT = "pip install 'vqwae["
if SHARED is not None:  # the metrics' weights from ../shared, as a user's environment names them
    os.environ.setdefault("VQWAE_INCEPTION_WEIGHTS", str(next((SHARED / "weights" / "inception").glob("*.pt"), "")))
    os.environ.setdefault("VQWAE_LPIPS_WEIGHTS", str(SHARED / "weights" / "lpips"))


def classify_exception(e: BaseException) -> tuple[str, str]:
    text = str(e)
    if HINT in text and "\n" not in text:
        return "hint", text
    return "bad", "".join(traceback.format_exception(e))[-1500:]


def call_api(fn) -> tuple[str, str]:
    try:
        fn()
    except Exception as e:
        return classify_exception(e)
    return "ok", ""


def call_cli(*args) -> tuple[str, str]:
    """``vqwae ARGS`` in this process, through the console script's own entry point (``CONSOLE``)."""
    err, out = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["vqwae", *map(str, args)]
    code = 0
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            CONSOLE()
    except SystemExit as e:
        code = e.code
        if isinstance(code, str):  # sys.exit("error: ..."): the line Python prints
            err.write(code + "\n")
            code = 1
    except Exception as e:  # a command that let an error through: the traceback a user would see
        return "bad", "".join(traceback.format_exception(e))[-1500:]
    finally:
        sys.argv = argv
    if not code:
        return "ok", ""
    said = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]  # beside progress lines
    if len(said) == 1 and HINT in said[0] and "Traceback" not in err.getvalue():
        return "hint", said[0]
    return "bad", err.getvalue()[-1500:] or out.getvalue()[-1500:]


def api_entries():
    """Every lazy export of every package, then the calls that import an extra inside a function."""
    import vqwae

    for pkg in ("quantizers", "compat", "ot", "models", "data", "training", "metrics", "figures", "studies", "prior",
                "reproduce"):
        def export(pkg=pkg):
            module = importlib.import_module(f"vqwae.{pkg}")
            for name in module.__all__:
                getattr(module, name)
        yield f"import vqwae.{pkg}.*", export

    x = torch.rand(4, 1, 32, 32)
    yield "metrics.psnr / ssim", lambda: (vqwae.metrics.psnr(x, x), vqwae.metrics.ssim(x, x))
    yield "metrics.frechet_distance", lambda: vqwae.metrics.frechet_distance(np.zeros(3), np.eye(3), np.ones(3),
                                                                             np.eye(3))
    yield "metrics.fid_from_features", lambda: vqwae.metrics.fid_from_features(torch.randn(20, 4), torch.randn(20, 4))
    yield "metrics.load_lpips", lambda: vqwae.metrics.load_lpips(os.environ.get("VQWAE_LPIPS_WEIGHTS"))
    yield "figures.reconstruction_grid", lambda: vqwae.figures.reconstruction_grid(x, x, OUT / "grid.png")
    yield "figures.usage_histogram", lambda: vqwae.figures.usage_histogram(np.arange(8.0), OUT / "usage.png")
    yield "studies.tsne_embed", lambda: vqwae.studies.tsne_embed(np.random.rand(30, 8), pca_dim=None, max_iter=250)
    yield "data.load_split digits", lambda: vqwae.data.load_split("digits", None, "test", limit=8)
    if SHARED is not None:
        yield "data.load_split mnist", lambda: vqwae.data.load_split("mnist", SHARED / "data", "test", limit=8)
        yield "data.load_split cifar10", lambda: vqwae.data.load_split("cifar10", SHARED / "data", "test", limit=8)
    yield "models.VQAutoencoder.from_pretrained", lambda: vqwae.models.VQAutoencoder.from_pretrained(RUN)
    if BLOCKED == "huggingface_hub":  # with the Hub's client present it would go online: walked only without it
        yield "models.VQAutoencoder.from_pretrained('user/repo')", \
            lambda: vqwae.models.VQAutoencoder.from_pretrained("vqwae-tests/no-such-repo")
    yield "prior.GatedPixelCNN", lambda: vqwae.prior.GatedPixelCNN(vqwae.prior.PixelCNNConfig(
        num_codes=8, hidden_channels=4, num_layers=2))(torch.zeros(1, 4, 4, dtype=torch.long))
    yield "training.TrainConfig.resolve(config_file=x.yaml)", lambda: vqwae.training.TrainConfig.resolve(
        config_file=WORK / "x.yaml")
    yield "quantizers.diagnostics (exact W)", lambda: vqwae.quantizers.diagnostics(
        vqwae.quantizers.WassersteinQuantizer(num_codes=8, dim=4, channel_last=True), torch.randn(4, 16, 4))
    yield "quantizers.PaperWassersteinQuantizer (exact OT)", lambda: vqwae.quantizers.PaperWassersteinQuantizer(
        num_codes=8, dim=4, channel_last=True, solver="exact").train()(torch.randn(2, 4, 4))


def cli_entries():
    cpu = ("--device", "cpu", "--threads", "1")
    tiny = ("--train-limit", "16", "--eval-limit", "8", "--max-steps", "1", "--epochs", "1", *cpu)
    yield "vqwae train --config x.yaml --logger tensorboard (digits)", (
        "train", "--config", WORK / "x.yaml", "--logger", "tensorboard", "--out", OUT / "t_digits", *tiny)
    yield "vqwae train --preset paper", ("train", "--preset", "paper", "--dataset", "digits", "--out",
                                         OUT / "t_paper", *tiny)
    if SHARED is not None:
        for dataset in ("mnist", "cifar10"):
            yield f"vqwae train ({dataset})", ("train", "--dataset", dataset, "--data-root", SHARED / "data", "--out",
                                               OUT / f"t_{dataset}", *tiny)
    yield "vqwae eval", ("eval", RUN, "--limit", "8", *cpu)
    yield "vqwae encode --split", ("encode", RUN, "--split", "test", "--limit", "8", "--force", "--out",
                                   OUT / "codes.safetensors", *cpu)
    yield "vqwae encode --images", ("encode", RUN, "--images", WORK / "images", "--force", "--out",
                                    OUT / "img_codes.safetensors", *cpu)
    yield "vqwae decode", ("decode", RUN, WORK / "codes.safetensors", "--out", OUT / "decoded", *cpu)
    yield "vqwae tsne", ("tsne", RUN, "--n", "40", "--out", OUT / "tsne.png", *cpu)
    yield "vqwae probe", ("probe", RUN, "--limit", "32", *cpu)
    yield "vqwae prior train", ("prior", "train", RUN, "--epochs", "1", "--max-steps", "1", "--hidden", "4",
                                "--layers", "2", "--out", OUT / "prior", *cpu)
    yield "vqwae sample", ("sample", RUN, "--n", "2", "--out", OUT / "samples", *cpu)


if __name__ == "__main__":
    from vqwae.cli import main as CONSOLE  # the function: importing vqwae.cli.main later binds the module there

    results = []
    for name, fn in api_entries():
        outcome, line = call_api(fn)
        results.append(dict(entry=name, outcome=outcome, line=line))
    for name, args in cli_entries():
        outcome, line = call_cli(*args)
        results.append(dict(entry=name, outcome=outcome, line=line))
    for r in results:
        print(json.dumps(r), flush=True)
