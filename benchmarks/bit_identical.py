"""The behaviour-preserving check of a refactor (issue #38, as #13 used it): six configurations trained through
the command line, then every metric (timings aside) and every tensor of their weights compared between two
checkouts.

    .venv/bin/python benchmarks/bit_identical.py train OUT_A                      # with the code before
    PYTHONPATH=/path/to/other/src .venv/bin/python benchmarks/bit_identical.py train OUT_B
    .venv/bin/python benchmarks/bit_identical.py compare OUT_A OUT_B

The configurations (digits, 2 epochs, one thread): the default VQ-WAE, the paper's configuration on the fast
solver, a shared pi trained one epoch and resumed for the second, VQ-VAE with the field's k-means and dead-code
expiry, SQ-VAE, and VQ-WAE inside a small VQGAN network with its adversary from the first step.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMMON = ["--dataset", "digits", "--epochs", "2", "--threads", "1", "--batch-size", "64"]
CONFIGS = {
    "default": [],
    "paper-fast": ["--preset", "paper-fast", "--epochs", "2"],
    "shared-resumed": ["--shared-pi"],
    "vqvae-field": ["--model", "vqvae", "--ema", "--vq-init", "kmeans", "--dead-code-threshold", "2"],
    "sqvae": ["--model", "sqvae"],
    "vqgan": ["--arch", "vqgan", "--ch", "32", "--ch-mult", "1,2", "--num-res-blocks", "1", "--attn-resolutions", "",
              "--z-channels", "32", "--dim", "16", "--disc-start", "0", "--perceptual-weight", "0"],
}
TIMINGS = ("seconds", "images_per_second")


def train(out: Path) -> None:
    for name, extra in CONFIGS.items():
        run = out / name
        cmd = [sys.executable, "-m", "vqwae", "train", "--out", str(run), *COMMON, *extra]
        if name == "shared-resumed":
            subprocess.run([*cmd, "--epochs", "1"], check=True, capture_output=True)
            cmd = [*cmd, "--resume"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name} failed:\n{done.stderr[-2000:]}")
        print(f"{name}: trained", flush=True)


def compare(a: Path, b: Path) -> int:
    from safetensors.torch import load_file

    bad = 0
    for name in CONFIGS:
        ra, rb = a / name, b / name
        ma = [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
              for line in (ra / "metrics.jsonl").read_text().splitlines()]
        mb = [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
              for line in (rb / "metrics.jsonl").read_text().splitlines()]
        ta, tb = load_file(ra / "model.safetensors"), load_file(rb / "model.safetensors")
        tensors_equal = ta.keys() == tb.keys() and all(ta[k].equal(tb[k]) for k in ta)
        ca, cb = (json.loads((r / "config.json").read_text()) for r in (ra, rb))
        ca["run"].pop("out"), cb["run"].pop("out")  # the one option that must differ
        same = ma == mb and tensors_equal and ca == cb
        bad += not same
        print(f"{name}: metrics {'equal' if ma == mb else 'DIFFER'}, {len(ta)} tensors "
              f"{'equal' if tensors_equal else 'DIFFER'}, config {'equal' if ca == cb else 'DIFFERS'}")
    return bad


if __name__ == "__main__":
    verb, *paths = sys.argv[1:]
    if verb == "train":
        train(Path(paths[0]))
    else:
        sys.exit(1 if compare(Path(paths[0]), Path(paths[1])) else 0)
