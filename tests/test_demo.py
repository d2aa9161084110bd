"""`vqwae demo` end to end on the embedded digits (one epoch; `make demo` runs twelve): four runs, one summary."""
import json

from typer.testing import CliRunner

from vqwae.cli.main import app


def test_demo_writes_runs_pictures_and_summary(tmp_path):
    out = tmp_path / "demo"
    r = CliRunner().invoke(app, ["demo", "--out", str(out), "--epochs", "1", "--num-codes", "16", "--device", "cpu"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    rows = json.loads((out / "summary.json").read_text())
    assert [row["model"] for row in rows] == ["vqwae", "field-vq", "vqvae", "vqvae-uniform"]
    for row in rows:
        assert 1 <= row["test_perplexity"] <= 16 and row["test_mse"] > 0
    for model in ("vqwae", "field-vq", "vqvae", "vqvae-uniform"):
        for name in ("model.safetensors", "metrics.jsonl", "eval.json", "reconstructions_test.png", "code_usage_test.png"):
            assert (out / model / name).is_file(), (model, name)
    assert (out / "code_usage.png").stat().st_size > 1000
    assert "test perplexity" in r.output
    # a second demo reuses the finished runs instead of failing or overwriting them
    config = (out / "vqwae" / "config.json").read_bytes()
    r2 = CliRunner().invoke(app, ["demo", "--out", str(out), "--epochs", "1", "--num-codes", "16", "--device", "cpu"])
    assert r2.exit_code == 0, r2.output
    assert "reusing it" in r2.output and (out / "vqwae" / "config.json").read_bytes() == config
    again = json.loads((out / "summary.json").read_text())
    assert [r["train_seconds"] for r in again] == [r["train_seconds"] for r in rows]  # the runs' own clocks
