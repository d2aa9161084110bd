"""Stage-two commands on a tiny digits run: prior train, sample, probe, tsne, generation FID, and their errors."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from vqwae.cli.main import app
from vqwae.runs.layout import load_run_split, read_config, read_eval
from vqwae.metrics.fid import fid_against_statistics
from vqwae.runs.generation import generation_fid, real_stats_key
from vqwae.runs.prior import available_priors, find_prior
from vqwae.training import TrainConfig, train

TINY_PRIOR = ["--hidden", "8", "--layers", "3", "--epochs", "2", "--max-steps", "3", "--device", "cpu",
              "--threads", "1"]
CPU = ["--device", "cpu", "--threads", "1"]


def invoke(*args: str, ok: bool = True):
    res = CliRunner().invoke(app, [str(a) for a in args])
    if ok:
        assert res.exit_code == 0, (res.output, res.exception)
        assert "wall time:" in res.output
    return res


def error_of(*args: str) -> str:
    res = invoke(*args, ok=False)
    assert res.exit_code == 2, (res.output, res.exception)
    assert "Traceback" not in res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path_factory.mktemp("stage2") / "run"
        train(TrainConfig.resolve(dataset="digits", train_limit=128, eval_limit=64, num_codes=16, epochs=1,
                                  device="cpu", out=str(out)))
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def uncond(run_dir) -> Path:
    torch.set_num_threads(1)
    invoke("prior", "train", run_dir, *TINY_PRIOR)
    return run_dir / "prior"


@pytest.fixture(scope="module")
def cond(run_dir, uncond) -> Path:
    torch.set_num_threads(1)
    invoke("prior", "train", run_dir, "--conditional", "--out", run_dir / "prior_cond", *TINY_PRIOR)
    return run_dir / "prior_cond"


def test_commands_registered():
    out = CliRunner().invoke(app, ["--help"]).output
    for name in ("prior", "sample", "probe", "tsne"):
        assert name in out


def test_prior_train_writes_folder_metrics_and_cache(run_dir, uncond):
    names = {p.name for p in uncond.iterdir()}
    assert {"config.json", "model.safetensors", "metrics.jsonl", "train_summary.json", "codes_train.pt",
            "codes_val.pt"} <= names
    rows = [json.loads(l) for l in (uncond / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2] and rows[-1]["steps"] == 2  # 128 grids, batch 128: 1 step/epoch
    assert all(0 < r["val_bpc"] < 8 for r in rows)  # bits per code; uniform over K=16 is 4
    summary = json.loads((uncond / "train_summary.json").read_text())
    assert summary["conditional"] is False and summary["num_classes"] is None
    assert summary["grid"] == [8, 8] and summary["num_train"] == 128 and summary["num_val"] == 64  # the run's limits
    assert summary["uniform_bpc"] == 4.0 and len(summary["autoencoder_fingerprint"]) == 64
    assert json.loads((uncond / "config.json").read_text())["hidden_channels"] == 8
    assert read_eval(run_dir)["prior_val_bpc"] == pytest.approx(summary["best_val_bpc"])
    cached = torch.load(uncond / "codes_train.pt", weights_only=True)
    assert cached["codes"].shape == (128, 8, 8) and cached["labels"].shape == (128,)
    # the cache is reused by a second training (same weights): the file is not rewritten
    mtime = (uncond / "codes_train.pt").stat().st_mtime_ns
    other = run_dir / "prior_tmp"
    invoke("prior", "train", run_dir, "--out", other, *TINY_PRIOR[:-6], "--max-steps", "1", *CPU)
    assert (uncond / "codes_train.pt").stat().st_mtime_ns == mtime and not (other / "codes_train.pt").exists()
    shutil.rmtree(other)


def test_sample_writes_pngs_and_grid(run_dir, uncond, tmp_path):
    res = invoke("sample", run_dir, "--n", "5", "--out", tmp_path / "s", "--seed", "3", *CPU)
    assert "unconditional" in res.output
    files = sorted(p.name for p in (tmp_path / "s").iterdir() if not p.name.startswith("."))  # the writer's manifest aside
    assert files == ["grid.png"] + [f"sample_{i}.png" for i in range(5)]
    one = Image.open(tmp_path / "s" / "sample_0.png")
    assert one.size == (32, 32)
    grid = Image.open(tmp_path / "s" / "grid.png")  # 3 per row (ceil sqrt 5), 2 rows, 2 px padding
    assert grid.size == (3 * 34 + 2, 2 * 34 + 2)
    # same seed, same images
    invoke("sample", run_dir, "--n", "5", "--out", tmp_path / "t", "--seed", "3", *CPU)
    assert (tmp_path / "s" / "grid.png").read_bytes() == (tmp_path / "t" / "grid.png").read_bytes()


def test_conditional_prior_and_class_sampling(run_dir, cond, tmp_path):
    summary = json.loads((cond / "train_summary.json").read_text())
    assert summary["conditional"] is True and summary["num_classes"] == 10
    assert "prior_cond_val_bpc" in read_eval(run_dir)
    assert available_priors(run_dir) == {"uncond": run_dir / "prior", "cond": cond}
    assert find_prior(run_dir, True) == cond and find_prior(run_dir, False) == run_dir / "prior"
    # --class finds RUN_DIR/prior_cond by itself
    invoke("sample", run_dir, "--n", "3", "--class", "7", "--out", tmp_path / "c", *CPU)
    assert sorted(p.name for p in (tmp_path / "c").glob("sample_*")) == [f"sample_{i}_class7.png" for i in range(3)]
    # a conditional prior without --class cycles through the classes, one class per grid column
    invoke("sample", run_dir, "--n", "12", "--prior", cond, "--out", tmp_path / "d", *CPU)
    assert (tmp_path / "d" / "sample_11_class1.png").is_file()
    assert Image.open(tmp_path / "d" / "grid.png").size == (10 * 34 + 2, 2 * 34 + 2)
    assert "out of range" in error_of("sample", run_dir, "--n", "2", "--class", "10", "--out", tmp_path / "e", *CPU)
    assert "unconditional" in error_of("sample", run_dir, "--n", "2", "--class", "1", "--prior", run_dir / "prior",
                                       "--out", tmp_path / "e", *CPU)


def test_errors(run_dir, uncond, tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    assert "not found" in error_of("prior", "train", missing, *CPU)
    assert "not found" in error_of("sample", missing, "--n", "2", *CPU)
    assert "not found" in error_of("probe", missing, *CPU)
    assert "not found" in error_of("tsne", missing, *CPU)
    assert "--n must be >= 1" in error_of("sample", run_dir, "--n", "0", *CPU)
    assert "--n must be >= 3" in error_of("tsne", run_dir, "--n", "2", *CPU)
    assert "--epochs must be >= 1" in error_of("prior", "train", run_dir, "--epochs", "0", *CPU)
    # a run without a prior yet
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "model_config.json"):
        shutil.copy(run_dir / name, bare / name)
    msg = error_of("sample", bare, "--n", "2", *CPU)
    assert "no prior trained" in msg and "vqwae prior train" in msg
    with pytest.raises(FileNotFoundError, match="no class-conditional prior"):
        generation_fid(bare, n=4, conditional=True, inception=object())
    # --conditional on a dataset without labels
    import vqwae.data.registry as registry  # every split a run loads goes through registry.load_splits

    real = registry.load_splits

    def unlabelled(*a, **k):
        s = real(*a, **k)
        s.info = type(s.info)(s.info.name, s.info.channels, s.info.image_size, None)
        return s

    monkeypatch.setattr(registry, "load_splits", unlabelled)
    assert "needs class labels" in error_of("prior", "train", bare, "--conditional", *TINY_PRIOR)


def test_probe_writes_accuracies(run_dir):
    res = invoke("probe", run_dir, "--limit", "200", *CPU)
    assert "quantized" in res.output and "continuous" in res.output
    ev = read_eval(run_dir)
    assert 0.0 <= ev["probe_accuracy"] <= 1.0 and 0.0 <= ev["probe_accuracy_continuous"] <= 1.0
    assert ev["probe_num_train"] == 200 and ev["probe_num_test"] == 200
    assert ev["probe_accuracy_continuous"] > 0.5  # digits are easy even for a 1-epoch encoder


def test_tsne_writes_png_and_silhouette(run_dir, tmp_path):
    png = tmp_path / "t.png"
    res = invoke("tsne", run_dir, "--n", "60", "--out", png, *CPU)
    assert "silhouette" in res.output
    assert png.is_file() and Image.open(png).size[0] > 300
    ev = read_eval(run_dir)
    assert -1.0 <= ev["tsne_silhouette"] <= 1.0 and ev["tsne_points"] == 60 and ev["tsne_png"] == str(png)


def test_fid_against_statistics_matches_frechet_distance():
    from vqwae.metrics.fid import feature_statistics, frechet_distance

    rng = np.random.default_rng(0)
    mu, sigma = feature_statistics(rng.normal(size=(300, 24)))
    for n in (6, 40):  # fewer and more samples than dimensions
        f = rng.normal(size=(n, 24)) * 1.3 + 0.2
        assert fid_against_statistics(mu, sigma, f) == pytest.approx(frechet_distance(mu, sigma, *feature_statistics(f)),
                                                                     rel=1e-6)


def test_generation_fid_real_inception(run_dir, uncond, cond, shared_weights, tmp_path):
    from vqwae.metrics.fid import load_inception
    from vqwae.metrics.fid_cache import FIDStatsCache

    inception, why = load_inception(shared_weights / "inception", download=False, batch_size=16, num_threads=1)
    assert inception is not None, why
    cache = FIDStatsCache(tmp_path / "fid")
    u = generation_fid(run_dir, n=8, conditional=False, inception=inception, stats_cache=cache, limit=16,
                       batch_size=8)
    assert u["gfid_uncond"] > 0 and u["gfid_uncond_n"] == 8 and u["gfid_uncond_seconds"] > 0
    assert u["gfid_uncond_info"]["real_stats"] == "computed" and u["gfid_uncond_info"]["real_images"] == 16
    # the real statistics sit under the key `vqwae eval` uses for rFID (same split and limit)
    cfg = read_config(run_dir)
    root = cfg.data.data_root
    test, _ = load_run_split(run_dir, "test", limit=16)
    from vqwae.metrics.fid_cache import StatsKey, dataset_fingerprint

    key = StatsKey(dataset=cfg.data.dataset, split="test", limit=16, data_root=str(root or "."),
                   fingerprint=dataset_fingerprint(test, 16))
    assert key == real_stats_key(cfg, "test", 16, test, root)
    assert cache.lookup(key, inception.identity, 16) is not None
    c = generation_fid(run_dir, n=8, conditional=True, inception=inception, stats_cache=cache, limit=16,
                       batch_size=8)
    assert c["gfid_cond"] > 0 and c["gfid_cond_info"]["real_stats"] == "cache"
    assert sum(c["gfid_cond_info"]["label_counts"]) == 8 and c["gfid_cond_info"]["prior"] == str(cond)


def test_a_trained_prior_is_not_replaced_without_force_and_one_elsewhere_does_not_speak_for_the_run(
        run_dir, uncond, tmp_path):
    before = (uncond / "model.safetensors").read_bytes()
    assert "already holds a trained prior" in error_of("prior", "train", run_dir, *TINY_PRIOR)
    assert (uncond / "model.safetensors").read_bytes() == before
    recorded = read_eval(run_dir)["prior_val_bpc"]
    invoke("prior", "train", run_dir, "--out", tmp_path / "elsewhere", *TINY_PRIOR[:-6], "--max-steps", "1", *CPU)
    assert read_eval(run_dir)["prior_val_bpc"] == recorded  # eval.json still describes RUN_DIR/prior


def test_fewer_samples_leave_no_stale_images(run_dir, uncond, tmp_path):
    invoke("sample", run_dir, "--n", "5", "--out", tmp_path / "s", *CPU)
    invoke("sample", run_dir, "--n", "2", "--out", tmp_path / "s", *CPU)
    assert sorted(p.name for p in (tmp_path / "s").glob("sample_*.png")) == ["sample_0.png", "sample_1.png"]
