"""The behaviour-preserving check of a refactor (issue #38, as #13 used it): six configurations trained through
the command line, then every metric (timings aside) and every tensor of their weights compared between two
checkouts.

    .venv/bin/python benchmarks/bit_identical.py train OUT_A                      # with the code before
    PYTHONPATH=/path/to/other/src .venv/bin/python benchmarks/bit_identical.py train OUT_B
    .venv/bin/python benchmarks/bit_identical.py compare OUT_A OUT_B

The configurations (digits, 2 epochs, one thread): the default VQ-WAE, the paper's configuration (exact OT, 30
steps) and on the fast solver, a shared pi trained one epoch and resumed for the second, VQ-VAE with the field's
k-means and dead-code expiry, SQ-VAE, and VQ-WAE inside a small VQGAN network with its adversary from the first
step; then, through the Python API (``api_runs``), a residual stack of VQ-WAE levels, a masked sequence with a
fixed peaked pi and the transport map, and the losses evaluated without training, each over a few steps on fixed
random latents. Weights saved by the older checkout are compared after ``vqwae.quantizers.upgrade_state_dict``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

COMMON = ["--dataset", "digits", "--epochs", "2", "--threads", "1", "--batch-size", "64"]
CONFIGS = {
    "default": [],
    "paper": ["--preset", "paper", "--epochs", "1", "--max-steps", "30"],
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
    api_runs(out / "api")


# Python-API runs: name -> (constructor options, a mask?, a residual stack?), each trained STEPS steps on fixed
# latents (an nn.Parameter under Adam, so the pull reaches them), then its losses evaluated without training.
API = {
    "residual": (dict(num_codes=32, dim=8, channel_last=True), False, True),
    "masked-fixed-pi-transport": (dict(num_codes=16, dim=8, channel_last=True, learn_pi=False, pi_init="peaked",
                                       quantize="transport", codebook_decay=0.95, pull=0.1), True, False),
    "sequence-split-unused": (dict(num_codes=32, dim=8, channel_last=True, split_unused=0.5, pull=0.3), True, False),
    "per-position": (dict(num_codes=32, dim=8, num_positions=16), False, False),
}
STEPS = 60


def _api_module(options: dict, residual: bool):
    from vqwae.quantizers import ResidualQuantizer, WassersteinQuantizer

    if residual:
        return ResidualQuantizer(lambda: WassersteinQuantizer(**options), num_levels=3)
    return WassersteinQuantizer(**options)


def api_runs(out: Path) -> None:
    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for name, (options, masked, residual) in API.items():
        torch.manual_seed(0)
        q = _api_module(options, residual)
        shape = (8, 8, 4, 4) if "num_positions" in options else (16, 12, 8)
        z = torch.nn.Parameter(torch.randn(shape))
        if name == "sequence-split-unused":  # a crowd of identical latents: the blank tokens split_unused is for
            with torch.no_grad():
                z[:, 6:] = 0.0
        mask = None
        if masked:
            mask = torch.ones(shape[:-1], dtype=torch.bool)
            mask[::3, -3:] = False
        opt = torch.optim.Adam([z, *[p for p in q.parameters() if p.requires_grad]], lr=1e-2)
        record = []
        for _ in range(STEPS):
            o = q(z, mask) if mask is not None else q(z)
            opt.zero_grad()
            (o.loss + (o.quantized - 0.5 * z.detach()).pow(2).mean()).backward()
            opt.step()
            record.append({"loss": o.loss.item(), **{k: v.item() for k, v in o.losses.items()},
                           "indices": o.indices.sum().item(), "perplexity": o.perplexity.sum().item()})
        q.eval()
        o = q(z, mask, compute_loss=True) if mask is not None else q(z, compute_loss=True)
        record.append({"eval_loss": o.loss.item(), **{k: v.item() for k, v in o.losses.items()},
                       "indices": o.indices.sum().item(), "quantized": o.quantized.sum().item()})
        (out / f"{name}.json").write_text(json.dumps(record))
        save_file({k: v.contiguous() for k, v in q.state_dict().items()}, str(out / f"{name}.safetensors"))
        print(f"api {name}: trained", flush=True)


def _state(run: Path) -> dict:
    """A run folder's weights as this checkout loads them (the documented upgrade path for older ones)."""
    from vqwae.models import VQAutoencoder

    return VQAutoencoder.from_pretrained(run).state_dict()


def _run_key(run: Path) -> str:
    from vqwae.reproduce.runner import run_key
    from vqwae.training import TrainConfig

    return run_key(TrainConfig.from_saved(json.loads((run / "config.json").read_text())))


def _equal(ta: dict, tb: dict) -> bool:
    return ta.keys() == tb.keys() and all(ta[k].equal(tb[k]) for k in ta)


def compare(a: Path, b: Path) -> int:
    """Metrics (timings aside), every tensor of the weights as this checkout loads them, and the run key (the
    reproduction's cache key) of each configuration; then the API runs' records and state dicts."""
    from safetensors.torch import load_file

    bad = 0
    for name in CONFIGS:
        ra, rb = a / name, b / name
        ma = [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
              for line in (ra / "metrics.jsonl").read_text().splitlines()]
        mb = [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
              for line in (rb / "metrics.jsonl").read_text().splitlines()]
        tensors_equal = _equal(_state(ra), _state(rb))
        keys_equal = _run_key(ra) == _run_key(rb)
        same = ma == mb and tensors_equal and keys_equal
        bad += not same
        print(f"{name}: metrics {'equal' if ma == mb else 'DIFFER'}, tensors {'equal' if tensors_equal else 'DIFFER'}, "
              f"run key {'equal' if keys_equal else 'DIFFERS'}")
    for name, (options, _, residual) in API.items():
        ra, rb = a / "api", b / "api"
        records_equal = json.loads((ra / f"{name}.json").read_text()) == json.loads((rb / f"{name}.json").read_text())
        q = _api_module(options, residual)
        q.load_state_dict(load_file(ra / f"{name}.safetensors"))  # the older checkout's, upgraded on loading
        tensors_equal = _equal(q.state_dict(), load_file(rb / f"{name}.safetensors"))
        bad += not (records_equal and tensors_equal)
        print(f"api {name}: records {'equal' if records_equal else 'DIFFER'}, tensors "
              f"{'equal' if tensors_equal else 'DIFFER'}")
    return bad


if __name__ == "__main__":
    verb, *paths = sys.argv[1:]
    if verb == "train":
        train(Path(paths[0]))
    else:
        sys.exit(1 if compare(Path(paths[0]), Path(paths[1])) else 0)
