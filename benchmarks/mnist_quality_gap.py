"""Where two MNIST autoencoders' reconstructions differ, by region (issue #67, goal 2).

The report's MNIST rows: the shipped VQ-WAE's SSIM and rFID trail the field's VQ far more than its MSE does. MSE
weighs every pixel alike; SSIM compares local means, variances and covariances in 11x11 windows, so a faint
texture on a flat background (variance against none) costs SSIM much more than MSE. This script splits the
difference by region on the same test images:

* **background** (the original pixel < 0.1, and no stroke pixel within 2 pixels), **edge** (the other pixels < 0.1)
  and **strokes** (>= 0.1): each region's share of pixels, its MSE, its mean SSIM (the SSIM map of
  ``vqwae.metrics.image``'s convention, uniform 11x11 window, valid region, averaged over the windows centred in the
  region), and on the background the reconstruction's mean and standard deviation (a haze or a texture);
* **blank positions**: code-grid positions whose 4x4 input patch (the network's factor) is all background; how many
  codes they get, the perplexity of those codes, the distance between them against the codebook's nearest-neighbour
  distance, the latents' spread there (mean distance to their centroid, against the norm of a typical latent), and
  what the decoder makes of the blank positions (the background's standard deviation there);
* **interventions** (inference only, no training): the decoder's raw background (before the [0, 1] clip) when it
  decodes (a) the codes as trained, (b) the encoder's continuous latents, no quantization, and (c) the codes with every
  far-blank position given one code (the one those positions use most), (d) a constant field of the far-blank
  latents' mean. If (c) cleans the background the speckle is the many blank codes each decoding to its own texture;
  if (b) keeps it, the decoder paints it from any latents; (d) shows the texture the decoder makes of no variation at
  all. And the decoder's last hidden layer (after its last ReLU) at background positions: the share of units on and
  their pre-activations' mean; a layer wholly off leaves the output at the last convolution's bias, exactly flat.

    .venv/bin/python benchmarks/mnist_quality_gap.py --data-root ../shared/data \\
        --run "VQ-WAE (shipped)=runs/long/runs/mnist/vqwae-231af14db6" --run "VQ (k-means + expiry)=runs/long/runs/mnist/vqvae-XXXX" --tag long

Writes benchmarks/results/mnist_quality_gap[_TAG].json and a PNG: the same 16 test images, each run's
reconstruction, its error map (|x_hat - x|, x 4) and its background alone (x 100).
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F
from common import blank_positions

HERE = Path(__file__).resolve().parent
STROKE = 0.1  # an MNIST pixel at or above this is ink
WINDOW = 11


def regions(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Boolean maps (B, 1, H, W): strokes, edge (background within 2 px of a stroke), background (the rest)."""
    ink = x >= STROKE
    near = F.max_pool2d(ink.float(), 5, stride=1, padding=2) > 0
    return {"strokes": ink, "edge": near & ~ink, "background": ~near}


def ssim_map(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The SSIM map of vqwae's evaluation (torchmetrics, uniform 11x11, data_range 1), full size (B, 1, H, W)."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    _, full = structural_similarity_index_measure(x_hat, x, gaussian_kernel=False, kernel_size=WINDOW,
                                                  data_range=1.0, reduction="none", return_full_image=True)
    return full


@torch.no_grad()
def analyse(model, x: torch.Tensor) -> tuple[dict, torch.Tensor]:
    x_hat = model(x)[0].clamp(0, 1)
    codes = model.encode(x)  # (B, h, w)
    valid = valid_windows(x)
    sq = (x_hat - x) ** 2
    smap = ssim_map(x_hat, x)
    out = dict(mse=float(sq.mean()), ssim=float(smap[valid].mean()))
    for name, r in regions(x).items():
        out[name] = dict(pixel_share=float(r.float().mean()), mse=float(sq[r].mean()),
                         error_share=float(sq[r].sum() / sq.sum()), ssim=float(smap[r & valid].mean()),
                         recon_mean=float(x_hat[r].mean()), recon_std=float(x_hat[r].std()))
    # blank code positions: the 4x4 input patch all background; "far": its 8 neighbours' patches too, so that the
    # encoder's receptive field holds (nearly) nothing but background and every such latent is the same input
    factor = x.shape[-1] // codes.shape[-1]
    blank, far = blank_positions(x >= STROKE, factor)  # (B, h, w) each
    book = model.quantizer.codebook.detach().double()
    d = torch.cdist(book, book)
    d.fill_diagonal_(float("inf"))
    z = model.encoder(x).permute(0, 2, 3, 1).double()  # (B, h, w, D): the latents before quantization
    patches = x_hat.squeeze(1).unfold(1, factor, factor).unfold(2, factor, factor)  # (B, h, w, f, f)
    for key, where in (("blank_positions", blank), ("far_blank_positions", far)):
        counts = torch.bincount(codes[where], minlength=model.num_codes).double()
        p = counts / counts.sum()
        used = counts > 0
        top = torch.argsort(counts, descending=True)[:min(16, int(used.sum()))]
        pair = torch.cdist(book[top], book[top])
        out[key] = dict(
            share=float(where.float().mean()), codes=int(used.sum()),
            perplexity=float(torch.exp(-(p[used] * p[used].log()).sum())),
            top1_share=float(p.max()), top16_share=float(p[top].sum()),
            top16_mean_distance=float(pair[~torch.eye(len(top), dtype=torch.bool)].mean()) if len(top) > 1 else 0.0,
            codebook_nn_distance_median=float(d.min(1).values.median()),
            decoded_mean=float(patches[where].mean()), decoded_std=float(patches[where].std()),
            latent_spread=float((z[where] - z[where].mean(0)).norm(dim=1).mean()),
            latent_rms=float(z.pow(2).mean().sqrt() * z.shape[-1] ** 0.5))
    out["interventions"] = interventions(model, x, z.float(), codes, far)
    return out, x_hat


def valid_windows(x: torch.Tensor) -> torch.Tensor:
    """The pixels whose 11x11 SSIM window lies inside the image (the valid region of vqwae's SSIM)."""
    pad = (WINDOW - 1) // 2
    valid = torch.zeros_like(x, dtype=torch.bool)
    valid[..., pad:-pad, pad:-pad] = True
    return valid


@torch.no_grad()
def interventions(model, x: torch.Tensor, z: torch.Tensor, codes: torch.Tensor, far: torch.Tensor) -> dict:
    """The decoder's raw output on the background for the four inputs of the module docstring, and its last hidden
    layer there; ``z``: the encoder's latents (B, h, w, D)."""
    background = regions(x)["background"]
    valid = valid_windows(x)
    one = torch.bincount(codes[far], minlength=model.num_codes).argmax()
    z = z.permute(0, 3, 1, 2)  # the encoder's layout (B, D, h, w)
    inputs = {"codes as trained": model.quantizer.indices_to_latents(codes),
              "continuous latents (no quantization)": z,
              "one code on every far-blank position": model.quantizer.indices_to_latents(
                  torch.where(far, one, codes))}
    constant = z.permute(0, 2, 3, 1)[far].mean(0).view(1, -1, 1, 1).expand_as(z[:1]).contiguous()
    relu = [m for m in model.decoder.modules() if isinstance(m, torch.nn.ReLU)][-1]
    seen = {}  # the last ReLU's input and output, kept from the first decode (the codes as trained)

    def keep_first(_module, inp, output) -> None:
        if not seen:
            seen.update(pre=inp[0], post=output)

    hook = relu.register_forward_hook(keep_first)
    out = {}
    for name, latents in inputs.items():
        raw = model.decoder(latents)
        clipped = raw.clamp(0, 1)
        out[name] = dict(raw_std=float(raw[background].std()), raw_mean=float(raw[background].mean()),
                         mse=float(((clipped - x) ** 2).mean()),
                         background_ssim=float(ssim_map(clipped, x)[background & valid].mean()))
    raw = model.decoder(constant)[0, 0, 4:-4, 4:-4]  # one image, away from its borders
    hook.remove()
    out["a constant field of the far-blank latents' mean"] = dict(raw_std=float(raw.std()), raw_mean=float(raw.mean()))
    factor = x.shape[-1] // seen["pre"].shape[-1]
    only_background = (F.max_pool2d((~background).float(), factor) == 0).squeeze(1)  # (B, h', w')
    pre, post = (seen[k].permute(0, 2, 3, 1)[only_background] for k in ("pre", "post"))
    out["last hidden layer at background positions"] = dict(
        units_on=float((post > 0).float().mean()), pre_activation_mean=float(pre.mean()),
        pre_activation_std=float(pre.std()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", required=True, metavar="LABEL=RUN_DIR")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--images", type=int, default=1000, help="the first N test images")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    from vqwae.data import load_split
    from vqwae.models import VQAutoencoder

    torch.set_num_threads(1)
    data, _ = load_split("mnist", args.data_root, "test", limit=args.images)
    x = torch.stack([data[i][0] for i in range(len(data))])
    results, recon = {}, {}
    for spec in args.run:
        label, _, run = spec.partition("=")
        model = VQAutoencoder.from_pretrained(run).eval()
        results[label], recon[label] = analyse(model, x)
        results[label]["run"] = Path(run).name
        print(label, json.dumps(results[label]), flush=True)
    stem = "mnist_quality_gap" + (f"_{args.tag}" if args.tag else "")
    out = HERE / "results" / f"{stem}.json"
    meta = dict(date=datetime.now(timezone.utc).isoformat(), images=len(x), torch=torch.__version__,
                command="python benchmarks/mnist_quality_gap.py " + " ".join(sys.argv[1:]))
    out.write_text(json.dumps(dict(meta=meta, results=results), indent=1))
    figure(x[:16], recon, out.with_suffix(".png"))
    print(out)


def figure(x: torch.Tensor, recon: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    background = regions(x)["background"]
    rows = [("test images", x)] + [(f"{k}", v[:16]) for k, v in recon.items()] + [
        (f"{k}: |error| x 4", ((v[:16] - x).abs() * 4).clamp(0, 1)) for k, v in recon.items()] + [
        (f"{k}: the background's reconstruction x 100 (its grey, which SSIM sees and MSE barely does)",
         (v[:16] * 100 * background).clamp(0, 1)) for k, v in recon.items()]
    fig, axes = plt.subplots(len(rows), 1, figsize=(16, 1.3 * len(rows)))
    for ax, (title, imgs) in zip(axes, rows):
        strip = torch.cat(list(imgs[:, 0]), dim=1)
        ax.imshow(strip.numpy(), cmap="gray", vmin=0, vmax=1)
        ax.set_title(title, fontsize=9, loc="left")
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
