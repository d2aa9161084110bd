"""Bad codes files, and priors that did not train, are refused with one line (issue #58, items 6, 7, 10, 11).

A codes file is validated once, in ``vqwae.data.codes.check_codes``; each damaged or crafted file below is tried
against every reader (``vqwae decode``, ``vqwae prior train --codes``, ``CodesDataset``) and against the writer
(``save_codes``), and neither the file nor the run may change.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.helpers import checksums, invoke, one_line_error, train_tiny
from vqwae.data import CodesDataset
from vqwae.data.codes import CodesMeta, save_codes
from vqwae.prior import PixelCNNConfig
from vqwae.prior.train import train_prior

CPU = ["--device", "cpu", "--threads", "1"]
PRIOR = ["--hidden", "8", "--layers", "2", "--epochs", "1", "--max-steps", "2", *CPU]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = train_tiny(tmp_path_factory.mktemp("codes") / "run")
    r = invoke(["encode", out, "--split", "train", "--out", out.parent / "good.safetensors", "--limit", "6", *CPU])
    assert r.exit_code == 0, r.output
    return out


def _crafted(run: Path, tmp: Path, *, indices=None, labels="keep", **meta) -> Path:
    """The run's good codes file, with its tensors or metadata replaced."""
    good = run.parent / "good.safetensors"
    tensors = load_file(str(good))
    from safetensors import safe_open

    with safe_open(str(good), "pt") as f:
        strings = dict(f.metadata())
    if indices is not None:
        tensors["indices"] = indices
    if labels != "keep":
        tensors.pop("labels")
        if labels is not None:
            tensors["labels"] = labels
    strings.update({k: json.dumps(v) for k, v in meta.items()})
    path = tmp / "bad.safetensors"
    save_file(tensors, str(path), metadata=strings)
    return path


def _raw(tmp: Path, data: bytes) -> Path:
    (tmp / "bad.safetensors").write_bytes(data)
    return tmp / "bad.safetensors"


GRID = (8, 8)
# name: (a function of the run and a scratch folder giving the bad file, words the error must hold)
BAD = {
    "float indices": (lambda r, t: _crafted(r, t, indices=torch.full((6, *GRID), 3.7)), ["integers", "float"]),
    "bool indices": (lambda r, t: _crafted(r, t, indices=torch.ones(6, *GRID, dtype=torch.bool)), ["integers"]),
    "index >= K": (lambda r, t: _crafted(r, t, indices=torch.full((6, *GRID), 16, dtype=torch.int32)), ["[0, 16)"]),
    "negative index": (lambda r, t: _crafted(r, t, indices=torch.full((6, *GRID), -7, dtype=torch.int32)),
                       ["[0, 16)", "-7"]),
    "3 labels for 6 items": (lambda r, t: _crafted(r, t, labels=torch.zeros(3, dtype=torch.int64)),
                             ["labels", "6 items"]),
    "float labels": (lambda r, t: _crafted(r, t, labels=torch.zeros(6)), ["labels", "integers"]),
    "labels of shape (6, 1)": (lambda r, t: _crafted(r, t, labels=torch.zeros(6, 1, dtype=torch.int64)), ["labels"]),
    "labels out of range": (lambda r, t: _crafted(r, t, labels=torch.full((6,), 10, dtype=torch.int64)),
                            ["labels", "[0, 10)"]),
    "flat (N, 64) grids": (lambda r, t: _crafted(r, t, indices=torch.zeros(6, 64, dtype=torch.uint8), grid=[64]),
                           ["grid"]),
    "4x4 grids": (lambda r, t: _crafted(r, t, indices=torch.zeros(6, 4, 4, dtype=torch.uint8), grid=[4, 4]),
                  ["4x4", "8x8 grids", "32x32 images"]),
    "1x1 grids": (lambda r, t: _crafted(r, t, indices=torch.zeros(6, 1, 1, dtype=torch.uint8), grid=[1, 1]),
                  ["1x1", "8x8 grids"]),
    "null fingerprint": (lambda r, t: _crafted(r, t, fingerprint=None), ["fingerprint"]),
    "0 items": (lambda r, t: _crafted(r, t, indices=torch.zeros(0, *GRID, dtype=torch.uint8),
                                      labels=torch.zeros(0, dtype=torch.int64)), ["no codes", "0 items"]),
    "zero bytes": (lambda r, t: _raw(t, b""), ["not a readable codes file"]),
    "truncated": (lambda r, t: _raw(t, (r.parent / "good.safetensors").read_bytes()[:200]), ["codes file"]),
    "random bytes": (lambda r, t: _raw(t, bytes(range(256)) * 3), ["not a readable codes file"]),
    "header length 2^62": (lambda r, t: _raw(t, struct.pack("<Q", 2 ** 62) + b"{}"), ["not a readable codes file"]),
}
READERS = {
    "decode": lambda r, f, t: ["decode", r, f, "--out", t / "dec", *CPU],
    "prior train --codes": lambda r, f, t: ["prior", "train", r, "--codes", f, "--out", t / "p", *PRIOR],
    "prior train --conditional": lambda r, f, t: ["prior", "train", r, "--codes", f, "--conditional", "--out",
                                                  t / "p", *PRIOR],
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_codes_file_is_one_line_for_every_reader(run, tmp_path, case, reader):
    make, needles = BAD[case]
    bad = make(run, tmp_path)
    before, run_before = checksums(tmp_path), checksums(run)
    one_line_error(invoke(READERS[reader](run, bad, tmp_path)), *needles)
    assert checksums(tmp_path) == before and checksums(run) == run_before
    if case not in ("4x4 grids", "1x1 grids"):  # the grid a network makes is the run's readers' to check
        with pytest.raises(ValueError) as e:
            CodesDataset(bad)
        assert all(n in str(e.value) for n in needles), (needles, str(e.value))


def _meta(**kw) -> CodesMeta:
    return CodesMeta(**{**dict(fingerprint="0" * 64, num_codes=16, grid=(2, 2), image_size=8, channels=1,
                               model="conv32/wasserstein", source="test"), **kw})


@pytest.mark.parametrize("indices, labels, meta, needle", [
    (torch.full((2, 2, 2), 3.7), None, {}, "integers"),
    (torch.ones(2, 2, 2, dtype=torch.bool), None, {}, "integers"),
    (torch.full((2, 2, 2), 16), None, {}, "[0, 16)"),
    (torch.zeros(2, 2, 2, dtype=torch.long), torch.zeros(2), {"num_classes": 10}, "integers"),
    (torch.zeros(2, 2, 2, dtype=torch.long), torch.zeros(2, dtype=torch.long), {}, "num_classes"),
    (torch.zeros(2, 2, 2, 2, dtype=torch.long), None, {"grid": (2, 2, 2), "levels": None}, "levels"),
    (torch.full((2, 2, 2, 2), -7), None, {"grid": (2, 2, 2), "levels": 2}, "[0, 16)"),
])
def test_save_codes_refuses_what_no_reader_would_take(tmp_path, indices, labels, meta, needle):
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace(")", r"\)")):
        save_codes(tmp_path / "c.safetensors", indices, _meta(**meta), labels)
    assert not (tmp_path / "c.safetensors").exists()


def test_a_prior_that_did_not_train_is_not_reported_as_good(run, tmp_path):
    before = checksums(run)
    one_line_error(invoke(["prior", "train", run, "--lr", "inf", "--out", tmp_path / "p", *PRIOR]), "--lr", "finite")
    one_line_error(invoke(["prior", "train", run, "--lr", "nan", "--out", tmp_path / "p", *PRIOR]), "--lr")
    cfg = PixelCNNConfig(num_codes=4, hidden_channels=4, num_layers=1)
    codes = torch.randint(0, 4, (8, 3, 3))
    with pytest.raises(ValueError, match="diverged"):
        train_prior(codes, None, config=cfg, epochs=1, lr=1e30, batch_size=1, out_dir=tmp_path / "q")
    assert not (tmp_path / "q" / "model.safetensors").exists()
    with pytest.raises(ValueError, match="0 items"):
        train_prior(codes[:0], None, config=cfg, epochs=1, out_dir=tmp_path / "q")
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        train_prior(codes, None, labels_train=torch.full((8,), 5), config=PixelCNNConfig(
            num_codes=4, num_classes=3, hidden_channels=4, num_layers=1), epochs=1, out_dir=tmp_path / "q")
    assert checksums(run) == before


def test_a_prior_code_cache_of_another_shape_is_recomputed(run, tmp_path):
    r = invoke(["prior", "train", run, "--out", tmp_path / "p", *PRIOR])
    assert r.exit_code == 0, r.output
    torch.save([1, 2, 3], run / "prior" / "codes_train.pt")  # a cache holding a list
    r = invoke(["prior", "train", run, "--out", tmp_path / "p", "--force", *PRIOR])
    assert r.exit_code == 0, r.output
    assert isinstance(torch.load(run / "prior" / "codes_train.pt", weights_only=True), dict)


# ---- residual codes: -1 marks a level a call did not use, and only that (issue #65) ---------------------------
def test_residual_codes_take_minus_one_for_unused_levels_only():
    from vqwae.quantizers import ResidualQuantizer, VectorQuantizer

    rq = ResidualQuantizer(lambda: VectorQuantizer(num_codes=8, dim=4, channel_last=True), 3).eval()
    z = torch.randn(2, 5, 4)
    two = rq(z, num_levels=2)
    assert (two.indices[..., 2] == -1).all()
    assert torch.equal(rq.indices_to_latents(two.indices), two.quantized)  # what a call wrote, it reads
    bad = {"-7": two.indices.clone().fill_(-7), "a used level after -1": two.indices.flip(-1),
           "first level unused": torch.full_like(two.indices, -1), "beyond K": two.indices.clone().fill_(8)}
    for name, indices in bad.items():
        with pytest.raises(ValueError) as e:
            rq.indices_to_latents(indices)
        assert "\n" not in str(e.value), name


def test_a_residual_codes_file_keeps_unused_levels_and_refuses_other_negatives(tmp_path):
    from vqwae.data.codes import load_codes

    meta = CodesMeta(fingerprint="0" * 64, num_codes=8, grid=(2, 2, 3), image_size=None, channels=None,
                     model="conv32/residual", source="a test", levels=3)
    codes = torch.randint(0, 8, (4, 2, 2, 3))
    codes[..., 2] = -1  # encoded with 2 of 3 levels
    save_codes(tmp_path / "ok.safetensors", codes, meta)
    assert torch.equal(load_codes(tmp_path / "ok.safetensors")[0], codes)
    codes[..., 1] = -7
    with pytest.raises(ValueError, match="be -1 for a level not used"):
        save_codes(tmp_path / "bad.safetensors", codes, meta)
