"""LPIPS-VGG (the VGG16 trunk): reference values, weight resolution, gradients, the ``lpips_vgg`` eval metric.

The reference values need the shared weights in ../shared/weights and skip with a reason without them; the
other tests build a weight folder of their own from randomly initialised networks (same layout, same key
names), so they always run.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from vqwae.metrics.evaluate import evaluate_reconstructions
from vqwae.metrics.lpips import (
    LPIPS,
    LPIPS_ENV,
    load_lpips,
    net_spec,
    require_lpips,
    resolve_lpips_weights,
)

VGG_TRUNK = "vgg16_features.pth"


# -- helpers ------------------------------------------------------------------------------------
def _shared_lpips_dir(shared_weights: Path) -> Path:
    d = shared_weights / "lpips"
    for f in (d / "alexnet_features.pth", d / "v0.1" / "alex.pth", d / VGG_TRUNK, d / "v0.1" / "vgg.pth"):
        if not f.is_file():
            pytest.skip(f"LPIPS weights not found: {f}")
    return d


def _example(d: Path, name: str) -> torch.Tensor:
    from PIL import Image

    p = d / "examples" / f"{name}.png"
    if not p.is_file():
        pytest.skip(f"LPIPS example image {p} not found")
    arr = np.array(Image.open(p).convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(arr).permute(2, 0, 1)[None]


def _save_net(net: LPIPS, folder: Path) -> None:
    """Write ``net``'s weights as the shared files are laid out: a ``features.*`` trunk and ``lin{k}`` heads."""
    spec = net.spec
    (folder / spec.heads_relpath.parent).mkdir(parents=True, exist_ok=True)
    torch.save({f"features.{k}": v for k, v in net.features.state_dict().items()}, folder / spec.trunk_filename)
    torch.save({f"lin{k}.model.1.weight": lin.weight for k, lin in enumerate(net.lins)}, folder / spec.heads_relpath)


@pytest.fixture(scope="module")
def weights_root(tmp_path_factory) -> SimpleNamespace:
    """``root/lpips`` holding both nets' files (random weights), ``alex_only`` holding AlexNet's alone."""
    root = tmp_path_factory.mktemp("weights")
    torch.manual_seed(1)
    nets = {name: LPIPS(name) for name in ("alex", "vgg")}
    for net in nets.values():
        for lin in net.lins:
            lin.weight.abs_()  # LPIPS heads are non-negative, so distances are too
        _save_net(net, root / "lpips")
    alex_only = tmp_path_factory.mktemp("alex_only")
    _save_net(nets["alex"], alex_only)
    return SimpleNamespace(root=root, lpips=root / "lpips", alex_only=alex_only, nets=nets)


def _one_line(why: str | None) -> str:
    assert why and "\n" not in why, why
    return why


# -- reference values ---------------------------------------------------------------------------
@pytest.mark.parametrize("net, d0_ref, d1_ref", [("vgg", 0.5686, 0.4217), ("alex", 0.7219, 0.1376)])
def test_reference_values(shared_weights, net, d0_ref, d1_ref):
    d = _shared_lpips_dir(shared_weights)
    lp, why = load_lpips(d, net=net, download=False)
    assert lp is not None, why
    assert lp.net == net and d.joinpath(net_spec(net).trunk_filename).as_posix() in lp.source
    ref, p0, p1 = (_example(d, n) for n in ("ex_ref", "ex_p0", "ex_p1"))
    with torch.inference_mode():
        d0 = lp(ref * 2 - 1, p0 * 2 - 1).item()
        d1 = lp(ref * 2 - 1, p1 * 2 - 1).item()
        d1n = lp(ref, p1, normalize=True).item()
        same = lp(ref, ref, normalize=True).item()
    assert d0 == pytest.approx(d0_ref, abs=1e-3)
    assert d1 == pytest.approx(d1_ref, abs=1e-3)
    assert d1n == pytest.approx(d1, abs=1e-6)
    assert same == pytest.approx(0.0, abs=1e-7)


# -- weight resolution --------------------------------------------------------------------------
def test_vgg_weight_resolution(weights_root, monkeypatch):
    w = weights_root
    monkeypatch.delenv(LPIPS_ENV, raising=False)
    x, y = torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32)
    with torch.inference_mode():
        expected = w.nets["vgg"](x, y)
    # the lpips folder, its parent, the VGG trunk file, and the AlexNet trunk file (standing for its folder)
    for loc in (w.lpips, w.root, w.lpips / VGG_TRUNK, w.lpips / "alexnet_features.pth"):
        assert resolve_lpips_weights(loc, net="vgg") == (w.lpips / VGG_TRUNK, w.lpips / "v0.1" / "vgg.pth")
        net, why = load_lpips(loc, net="vgg", download=False)
        assert net is not None and net.net == "vgg", why
        with torch.inference_mode():
            assert torch.allclose(net(x, y), expected)
    # the environment variable serves both trunks
    monkeypatch.setenv(LPIPS_ENV, str(w.lpips))
    for name in ("alex", "vgg"):
        net, why = load_lpips(net=name, download=False)
        assert net is not None and net.net == name, why
    # an explicit path overrides the environment variable, both ways
    net, why = load_lpips(w.alex_only, net="vgg", download=False)
    assert net is None and VGG_TRUNK in _one_line(why) and str(w.alex_only) in why and LPIPS_ENV not in why
    monkeypatch.setenv(LPIPS_ENV, str(w.alex_only))
    net, why = load_lpips(w.lpips, net="vgg", download=False)
    assert net is not None, why


def test_folder_without_vgg_trunk_names_it(weights_root, monkeypatch):
    w = weights_root
    monkeypatch.delenv(LPIPS_ENV, raising=False)
    net, why = load_lpips(w.alex_only, download=False)  # AlexNet alone is fine there
    assert net is not None and net.net == "alex", why
    net, why = load_lpips(w.alex_only, net="vgg", download=False)
    assert net is None and VGG_TRUNK in _one_line(why)
    net, why = load_lpips(w.alex_only / "alexnet_features.pth", net="vgg", download=False)
    assert net is None and VGG_TRUNK in _one_line(why)
    monkeypatch.setenv(LPIPS_ENV, str(w.alex_only))
    net, why = load_lpips(net="vgg", download=False)
    assert net is None and VGG_TRUNK in _one_line(why) and LPIPS_ENV in why


def test_require_lpips(weights_root, tmp_path, monkeypatch):
    monkeypatch.setenv(LPIPS_ENV, str(weights_root.alex_only))
    with pytest.raises(FileNotFoundError) as e:
        require_lpips(net="vgg", download=False)
    assert VGG_TRUNK in _one_line(str(e.value)) and LPIPS_ENV in str(e.value)
    with pytest.raises(FileNotFoundError) as e:  # an explicit path: the variable is named all the same
        require_lpips(tmp_path / "nowhere", net="vgg", download=False)
    assert VGG_TRUNK in _one_line(str(e.value)) and LPIPS_ENV in str(e.value)
    monkeypatch.delenv(LPIPS_ENV)
    with pytest.raises(FileNotFoundError) as e:  # nothing given, downloads off
        require_lpips(net="vgg", download=False)
    assert VGG_TRUNK in _one_line(str(e.value)) and LPIPS_ENV in str(e.value)
    net = require_lpips(weights_root.lpips, net="vgg", download=False)
    assert isinstance(net, LPIPS) and net.net == "vgg"


def test_foreign_weights_are_one_line(weights_root, tmp_path, monkeypatch):
    monkeypatch.delenv(LPIPS_ENV, raising=False)
    # AlexNet's trunk and heads saved under VGG16's names: present, but they do not load
    (tmp_path / "v0.1").mkdir()
    for src, dst in (("alexnet_features.pth", VGG_TRUNK), ("v0.1/alex.pth", "v0.1/vgg.pth")):
        (tmp_path / dst).write_bytes((weights_root.lpips / src).read_bytes())
    net, why = load_lpips(tmp_path, net="vgg", download=False)
    assert net is None and "could not be loaded" in _one_line(why)
    with pytest.raises(ValueError, match="could not be loaded"):
        require_lpips(tmp_path, net="vgg", download=False)


@pytest.mark.parametrize("call", [
    lambda: LPIPS("vgg19"),
    lambda: load_lpips(net="squeeze", download=False),
    lambda: require_lpips(net="VGG", download=False),
    lambda: resolve_lpips_weights(net="resnet"),
])
def test_bad_net_value(call):
    with pytest.raises(ValueError) as e:
        call()
    msg = _one_line(str(e.value))
    assert "'alex'" in msg and "'vgg'" in msg


# -- the network as a training loss -------------------------------------------------------------
@pytest.mark.parametrize("net", ["vgg", "alex"])
def test_gradients_flow_to_inputs_only(weights_root, net):
    lp = weights_root.nets[net]
    lp.train()  # as a submodule of a training module would be
    assert not lp.training and not any(m.training for m in lp.modules())
    assert not any(p.requires_grad for p in lp.parameters())
    x = torch.rand(2, 3, 32, 32, requires_grad=True)
    y = torch.rand(2, 3, 32, 32)
    lp(x, y, normalize=True).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert all(p.grad is None for p in lp.parameters())
    # flat images (all-zero activations somewhere) and greyscale inputs too
    g = torch.zeros(2, 1, 32, 32, requires_grad=True)
    lp(g, torch.ones(2, 1, 32, 32), normalize=True).sum().backward()
    assert torch.isfinite(g.grad).all()


def test_images_too_small_for_vgg_are_one_line(weights_root):
    with pytest.raises(ValueError, match="at least 16x16, got 8x8"):
        weights_root.nets["vgg"](torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8))


# -- the eval metric ----------------------------------------------------------------------------
class _NoisyIdentity(nn.Module):
    """x + noise, codes from the first channel: a model for evaluate_reconstructions."""

    def __init__(self, num_codes: int = 16):
        super().__init__()
        self.num_codes = num_codes
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        x_hat = x * self.scale + 0.05 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
        idx = (x[:, 0, ::8, ::8] * self.num_codes).long().clamp(0, self.num_codes - 1)
        return x_hat, SimpleNamespace(indices=idx)


def _loader(n: int = 4, size: int = 32):
    data = torch.rand(n, 3, size, size)
    ds = torch.utils.data.TensorDataset(data, torch.zeros(n, dtype=torch.long))
    return data, torch.utils.data.DataLoader(ds, batch_size=2, shuffle=False)


def test_eval_lpips_vgg_only_when_asked(weights_root, tmp_path, monkeypatch):
    model, vgg = _NoisyIdentity(), weights_root.nets["vgg"]
    data, loader = _loader()
    kw = dict(num_codes=16, device="cpu", progress=False, num_threads=1)

    res = evaluate_reconstructions(model, loader, **kw)
    assert "lpips_vgg" not in res and "lpips_vgg_skipped" not in res

    res = evaluate_reconstructions(model, loader, lpips_vgg_net=vgg, **kw)
    with torch.no_grad():
        rec = torch.cat([model(b)[0] for b, _ in loader]).clamp(0, 1)
        expected = float(vgg(rec, data, normalize=True).mean())
    assert "lpips_vgg_skipped" not in res and res["lpips_vgg"] == pytest.approx(expected, rel=1e-5)
    assert res["lpips"] is None  # the AlexNet metric is independent of it

    monkeypatch.setenv(LPIPS_ENV, str(weights_root.lpips))
    res = evaluate_reconstructions(model, loader, lpips_vgg_net="auto", **kw)
    assert res["lpips_vgg"] == pytest.approx(expected, rel=1e-5)

    monkeypatch.setenv(LPIPS_ENV, str(tmp_path))
    res = evaluate_reconstructions(model, loader, lpips_vgg_net="auto", **kw)
    assert res["lpips_vgg"] is None and VGG_TRUNK in res["lpips_vgg_skipped"] and LPIPS_ENV in res["lpips_vgg_skipped"]

    with pytest.raises(ValueError, match="lpips_vgg_net"):
        evaluate_reconstructions(model, loader, lpips_vgg_net="vgg", **kw)


def test_eval_cli_lpips_vgg_flag(weights_root, tmp_path):
    from typer.testing import CliRunner

    from vqwae.cli.main import app
    from vqwae.runs.layout import read_eval
    from vqwae.training import TrainConfig, train

    run = tmp_path / "run"
    train(TrainConfig.resolve(out=str(run), epochs=1, max_steps=1, dataset="digits", train_limit=32, eval_limit=8,
                              num_codes=16, device="cpu"))
    env = {LPIPS_ENV: str(weights_root.lpips)}
    base = ["eval", str(run), "--no-fid", "--no-lpips", "--limit", "4", "--device", "cpu", "--threads", "1"]

    def table_row(output: str) -> list[str] | None:
        rows = [line.split() for line in output.splitlines() if line.split()[:1] == ["lpips_vgg"]]
        return rows[0] if rows else None

    res = CliRunner().invoke(app, base, env=env)
    assert res.exit_code == 0, (res.output, res.exception)
    assert table_row(res.output) is None and "lpips_vgg" not in read_eval(run)

    res = CliRunner().invoke(app, [*base, "--lpips-vgg"], env=env)
    assert res.exit_code == 0, (res.output, res.exception)
    value = read_eval(run)["lpips_vgg"]
    assert isinstance(value, float) and value > 0
    assert table_row(res.output) == ["lpips_vgg", f"{value:.6g}"], res.output
