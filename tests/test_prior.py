"""Stage two: gated PixelCNN causality, sampling, training on a toy code distribution, persistence, code cache."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn


from vqwae.prior import (
    GatedMaskedLayer,
    GatedPixelCNN,
    PixelCNNConfig,
    cached_codes,
    evaluate_bpc,
    extract_codes,
    sample,
    train_prior,
    weights_fingerprint,
)



def _small(num_classes=None, K=16, C=16, layers=15) -> GatedPixelCNN:
    torch.manual_seed(0)
    return GatedPixelCNN(PixelCNNConfig(num_codes=K, num_classes=num_classes, hidden_channels=C, num_layers=layers))


def _grad_map(model, x_in, forward, i, j) -> torch.Tensor:
    """(H, W) total |d logits[:, :, i, j] / d input| over batch and channels."""
    x = x_in.detach().clone().requires_grad_(True)
    logits = forward(x)
    # random weights on the K logits so no cancellation can hide a dependency
    w = torch.randn(logits.shape[1], generator=torch.Generator().manual_seed(i * 1000 + j), dtype=logits.dtype)
    (logits[:, :, i, j] * w).sum().backward()
    return x.grad.abs().sum(dim=(0, 1))


# ---- causality ----------------------------------------------------------------------------------------
def _all_position_grad_maps(model, codes, labels=None, *, head=True) -> torch.Tensor:
    """(H*W, H*W) matrix G with G[p, q] = total |d output at raster p / d embedded input at raster q|.

    One backward pass: the grid is replicated H*W times along the batch (samples are independent), and
    copy p only back-propagates from position p. Output: the logits (``head=True``) or the horizontal
    stack's features before the 1x1 head (whose ReLUs can zero a whole position's gradient by chance)."""
    H, W = codes.shape
    P = H * W
    x = model.embed(codes[None].expand(P, H, W)).detach().requires_grad_(True)
    lab = None if labels is None else torch.as_tensor(labels).reshape(1).expand(P)
    out = (model.forward_embedded if head else model.features)(x, lab).flatten(2)  # (P, K or C, P)
    w = torch.randn(P, out.shape[1], generator=torch.Generator().manual_seed(0), dtype=out.dtype)
    out[torch.arange(P), :, torch.arange(P)].mul(w).sum().backward()  # copy p: position p only
    return x.grad.abs().sum(1).flatten(1)  # (P, P)


@pytest.mark.parametrize("num_classes", [None, 5])
@pytest.mark.parametrize("grid", [(8, 8), (16, 16), (5, 11)])
def test_causal_by_gradient_and_no_blind_spot(num_classes, grid):
    H, W = grid
    model = _small(num_classes, C=8).double()
    codes = torch.randint(0, 16, (H, W))
    P = H * W
    future = torch.triu(torch.ones(P, P, dtype=torch.bool))  # q >= p: the present and the future
    G = _all_position_grad_maps(model, codes, 3 if num_classes else None)
    assert torch.all(G[future] == 0), f"{grid}: some logits see the present or the future"
    assert (G[~future] > 0).float().mean() > 0.9  # the logits do depend on the past
    G = _all_position_grad_maps(model, codes, 3 if num_classes else None, head=False)
    assert torch.all(G[future] == 0), f"{grid}: some features see the present or the future"
    # 15 layers reach 17 rows up and 17 columns either side: every earlier position must be seen
    assert torch.all(G[~future] > 0), f"{grid}: blind spot at {(G == 0).logical_and(~future).nonzero()[:5].tolist()}"


def test_causal_wrt_one_hot_input_conditional():
    model = _small(num_classes=3).double()
    H, W = 8, 8
    one_hot = nn.functional.one_hot(torch.randint(0, 16, (2, H, W)), 16).double()
    labels = torch.tensor([0, 2])

    def fwd(oh):  # one-hot (B, H, W, K) -> embedding -> logits
        x = (oh @ model.embedding.weight).permute(0, 3, 1, 2)
        return model.forward_embedded(x, labels)

    for p in [0, 9, 27, 63]:
        i, j = divmod(p, W)
        xo = one_hot.detach().clone().requires_grad_(True)
        fwd(xo)[:, :, i, j].sum().backward()
        g = xo.grad.abs().sum(dim=(0, 3)).flatten()
        assert torch.all(g[p:] == 0) and torch.all(g[:p] > 0)


def test_first_layer_excludes_current_position():
    torch.manual_seed(0)
    layer = GatedMaskedLayer(8, 7, mask_a=True, residual=False).double()
    H, W = 9, 9
    v0 = torch.randn(2, 8, H, W, dtype=torch.double)
    h0 = torch.randn(2, 8, H, W, dtype=torch.double)
    i, j = 5, 4
    v, h = v0.clone().requires_grad_(True), h0.clone().requires_grad_(True)
    v_out, h_out = layer(v, h)
    h_out[:, :, i, j].sum().backward()
    gv, gh = v.grad.abs().sum((0, 1)), h.grad.abs().sum((0, 1))
    # horizontal input: only columns j-3 .. j-1 of row i
    assert gh[i, j] == 0 and torch.all(gh[i, j:] == 0) and torch.all(gh[i + 1:] == 0) and torch.all(gh[:i] == 0)
    assert torch.all(gh[i, j - 3:j] > 0) and torch.all(gh[i, : j - 3] == 0)
    # vertical input: rows i-3 .. i-1 only (columns j-3 .. j+3), never row i
    assert torch.all(gv[i:] == 0) and torch.all(gv[i - 3:i, j - 3:j + 4] > 0) and torch.all(gv[: i - 3] == 0)
    # the vertical output of row i sees no row >= i either
    v, h = v0.clone().requires_grad_(True), h0.clone().requires_grad_(True)
    layer(v, h)[0][:, :, i, j].sum().backward()
    assert torch.all(v.grad.abs().sum((0, 1))[i:] == 0)
    # a one-layer model: the logits at p never depend on the code at p
    model = _small(layers=1).double()
    emb = model.embed(torch.randint(0, 16, (2, H, W)))
    g = _grad_map(model, emb, model.forward_embedded, i, j)
    assert g[i, j] == 0 and g[i, j - 1] > 0 and g[i - 1, j] > 0


def test_logits_of_row_i_only_need_rows_up_to_i():
    model = _small(num_classes=4).eval()
    codes = torch.randint(0, 16, (3, 8, 6))
    labels = torch.tensor([0, 1, 3])
    with torch.no_grad():
        full = model(codes, labels)
        for i in range(8):
            part = model(codes[:, : i + 1], labels)
            torch.testing.assert_close(part[:, :, i], full[:, :, i], rtol=1e-5, atol=1e-6)
        # changing a future code leaves earlier logits untouched (forward check of causality)
        c2 = codes.clone()
        c2[:, 4, 3] = (c2[:, 4, 3] + 1) % 16
        out2 = model(c2, labels).flatten(2)
        p = 4 * 6 + 3
        assert torch.equal(out2[:, :, : p + 1], full.flatten(2)[:, :, : p + 1])
        assert not torch.allclose(out2[:, :, p + 1:], full.flatten(2)[:, :, p + 1:])


def test_config_validation_and_label_checks():
    with pytest.raises(ValueError):
        PixelCNNConfig(num_codes=16, first_kernel_size=4)
    with pytest.raises(ValueError):
        PixelCNNConfig(num_codes=1)
    cond, uncond = _small(num_classes=3, layers=2), _small(layers=2)
    codes = torch.randint(0, 16, (2, 4, 4))
    with pytest.raises(ValueError):
        cond(codes)
    with pytest.raises(ValueError):
        uncond(codes, torch.tensor([0, 1]))
    assert cond(codes, torch.tensor([0, 2])).shape == (2, 16, 4, 4)


# ---- sampling -----------------------------------------------------------------------------------------
def test_sample_shapes_range_and_reproducibility():
    model = _small(K=16, C=8, layers=4)
    out = sample(model, 7, (3, 5), batch_size=3, progress=False, generator=torch.Generator().manual_seed(1))
    assert out.shape == (7, 3, 5) and out.dtype == torch.long
    assert out.min() >= 0 and out.max() < 16
    again = sample(model, 7, (3, 5), batch_size=3, progress=False, generator=torch.Generator().manual_seed(1))
    other = sample(model, 7, (3, 5), batch_size=3, progress=False, generator=torch.Generator().manual_seed(2))
    assert torch.equal(out, again) and not torch.equal(out, other)
    assert model.training  # mode restored
    assert sample(model, 0, (2, 2), progress=False).shape == (0, 2, 2)
    assert sample(model, 2, (2, 2), progress=True).shape == (2, 2, 2)  # tqdm path


def test_temperature_zero_is_greedy_and_temperature_controls_spread():
    model = _small(K=16, C=8, layers=4).eval()
    greedy = sample(model, 4, (4, 4), temperature=0, progress=False)
    # reference greedy decoding with full-grid forward passes
    ref = torch.zeros(4, 4, 4, dtype=torch.long)
    with torch.no_grad():
        for p in range(16):
            i, j = divmod(p, 4)
            ref[:, i, j] = model(ref)[:, :, i, j].argmax(1)
    assert torch.equal(greedy, ref)
    cold = sample(model, 4, (4, 4), temperature=1e-6, progress=False, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cold, greedy)
    hot = sample(model, 300, (1, 1), temperature=100.0, progress=False, generator=torch.Generator().manual_seed(0))
    assert len(hot.unique()) >= 15  # near uniform over K = 16
    with pytest.raises(ValueError):
        sample(model, 2, (2, 2), temperature=-1.0, progress=False)


def test_conditional_labels_change_samples():
    model = _small(num_classes=4, K=16, C=8, layers=4)
    a = sample(model, 16, (4, 4), labels=0, progress=False, generator=torch.Generator().manual_seed(0))
    b = sample(model, 16, (4, 4), labels=torch.full((16,), 3), progress=False,
               generator=torch.Generator().manual_seed(0))
    assert not torch.equal(a, b)
    with pytest.raises(ValueError):
        sample(model, 2, (2, 2), progress=False)  # labels missing
    with pytest.raises(ValueError):
        sample(model, 2, (2, 2), labels=torch.tensor([0, 9]), progress=False)  # out of range


# ---- training -----------------------------------------------------------------------------------------
def _toy_codes(n, K=16, H=8, W=8, seed=0):
    """c[i, j] = (s + i + j) mod K with s uniform: entropy log2(K) bits per GRID, i.e. 4/64 bits per code."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randint(0, K, (n,), generator=g)
    grid = torch.arange(H)[:, None] + torch.arange(W)[None, :]
    return (s[:, None, None] + grid) % K, s


def test_prior_learns_toy_distribution(tmp_path):
    K = 16
    tr, _ = _toy_codes(512, K)
    va, _ = _toy_codes(128, K, seed=1)
    cfg = PixelCNNConfig(num_codes=K, hidden_channels=32, num_layers=6)
    res = train_prior(tr, va, config=cfg, epochs=20, batch_size=32, lr=3e-3, out_dir=tmp_path / "prior",
                      seed=0, max_steps=40)
    assert res.steps == 40
    first_train = res.history[0]["train_bpc"]
    assert res.best_val_bpc < 0.5 < math.log2(K), (first_train, res.best_val_bpc)  # uniform is 4 bits
    rows = [json.loads(line) for line in (tmp_path / "prior" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(res.history) == 3  # 16 steps per epoch, stopped in epoch 3
    assert {"epoch", "train_bpc", "val_bpc", "seconds", "steps"} <= set(rows[0])
    # the saved model is the best one
    loaded = GatedPixelCNN.from_pretrained(tmp_path / "prior")
    assert evaluate_bpc(loaded, va) == pytest.approx(res.best_val_bpc, rel=1e-5)
    summary = json.loads((tmp_path / "prior" / "train_summary.json").read_text())
    assert summary["best_epoch"] == res.best_epoch and summary["uniform_bpc"] == 4.0
    # samples follow the rule: each code is its left neighbour + 1
    s = sample(res.model, 64, (8, 8), temperature=1.0, progress=False, generator=torch.Generator().manual_seed(0))
    follows = ((s[:, :, 1:] - s[:, :, :-1]) % K == 1).float().mean()
    assert follows > 0.9, follows


def test_conditional_prior_uses_labels(tmp_path):
    K = 8
    tr, lab_tr = _toy_codes(256, K, H=4, W=4)
    va, lab_va = _toy_codes(64, K, H=4, W=4, seed=1)
    cfg = PixelCNNConfig(num_codes=K, num_classes=K, hidden_channels=16, num_layers=3)
    res = train_prior(tr, va, labels_train=lab_tr, labels_val=lab_va, config=cfg, epochs=30, batch_size=32,
                      lr=3e-3, out_dir=tmp_path, seed=0, max_steps=150)
    # with the label the grid is fully determined: far below the unconditional log2(K)/16 bits per code
    assert res.best_val_bpc < 0.05
    s = sample(res.model, 2 * K, (4, 4), labels=torch.arange(K).repeat(2), temperature=0, progress=False)
    assert (s[:, 0, 0] == torch.arange(K).repeat(2)).float().mean() >= 0.9
    with pytest.raises(ValueError):
        train_prior(tr, va, config=cfg, epochs=1, out_dir=tmp_path / "x")  # labels missing


def test_save_load_bit_identical(tmp_path):
    for nc in (None, 4):
        model = _small(num_classes=nc, C=8, layers=3).eval()
        model.save_pretrained(tmp_path / str(nc))
        assert (tmp_path / str(nc) / "model.safetensors").is_file()
        cfg = json.loads((tmp_path / str(nc) / "config.json").read_text())
        assert cfg["num_classes"] == nc and cfg["model_type"] == "gated_pixelcnn"
        loaded = GatedPixelCNN.from_pretrained(tmp_path / str(nc))
        assert loaded.config == model.config
        codes = torch.randint(0, 16, (3, 8, 8))
        labels = torch.tensor([0, 1, 3]) if nc else None
        with torch.no_grad():
            assert torch.equal(model(codes, labels), loaded(codes, labels))


# ---- code extraction and cache ------------------------------------------------------------------------
class _FakeAE(nn.Module):
    """encode: nearest of K codewords to each 2x2-pooled pixel; counts its calls."""

    def __init__(self, K=8):
        super().__init__()
        self.codebook = nn.Parameter(torch.linspace(0, 1, K)[:, None])
        self.calls = 0

    def encode(self, x):
        self.calls += 1
        z = nn.functional.avg_pool2d(x.mean(1, keepdim=True), 2)  # (B, 1, h, w)
        return (z.permute(0, 2, 3, 1)[..., None, :] - self.codebook).pow(2).sum(-1).argmin(-1)


def _loader(n=10, bs=4):
    ds = torch.utils.data.TensorDataset(torch.rand(n, 3, 8, 8), torch.arange(n) % 3)
    return torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=False)


def test_extract_codes_and_cache(tmp_path):
    ae, loader = _FakeAE(), _loader()
    codes, labels = extract_codes(ae, loader)
    assert codes.shape == (10, 4, 4) and codes.dtype == torch.long and labels.tolist() == [i % 3 for i in range(10)]
    ae.calls = 0
    c1, l1 = cached_codes(ae, loader, split="train", cache_dir=tmp_path / "prior")
    assert (tmp_path / "prior" / "codes_train.pt").is_file() and ae.calls == 3
    c2, _ = cached_codes(ae, loader, split="train", cache_dir=tmp_path / "prior")
    assert ae.calls == 3 and torch.equal(c1, c2) and torch.equal(c1, codes)  # cache hit
    with torch.no_grad():  # "retrain" the model: the cache must not be reused
        ae.codebook.mul_(0.5)
    c3, _ = cached_codes(ae, loader, split="train", cache_dir=tmp_path / "prior")
    assert ae.calls == 6 and not torch.equal(c3, c1)
    # a different split is a different file; an explicit fingerprint from weights files works too
    cached_codes(ae, loader, split="val", cache_dir=tmp_path / "prior", fingerprint="abc")
    assert (tmp_path / "prior" / "codes_val.pt").is_file() and ae.calls == 9
    cached_codes(ae, loader, split="val", cache_dir=tmp_path / "prior", fingerprint="abc")
    assert ae.calls == 9
    wdir = tmp_path / "run"
    wdir.mkdir()
    (wdir / "model.safetensors").write_bytes(b"one")
    f1 = weights_fingerprint(wdir)
    assert f1 == weights_fingerprint(wdir / "model.safetensors") and len(f1) == 64
    (wdir / "model.safetensors").write_bytes(b"two")
    assert weights_fingerprint(wdir) != f1
    assert weights_fingerprint(ae) != weights_fingerprint(_FakeAE())
