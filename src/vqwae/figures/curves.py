"""Training curves from a metrics.jsonl log (one JSON object per line)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

from vqwae.figures._common import PathLike, new_figure, save_png

__all__ = ["read_metrics_jsonl", "group_metric_keys", "training_curves", "learning_curves"]

_X_KEYS = ("epoch", "step", "global_step", "iteration")


def read_metrics_jsonl(path: PathLike) -> list[dict]:
    """The JSON objects of a .jsonl file; blank, truncated or non-object lines are skipped."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # e.g. a line cut short by an interrupted run
            if isinstance(obj, dict):
                records.append(obj)
    return records


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def group_metric_keys(keys: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Panels ``[(title, keys)]``: one per loss term, then MSE, perplexity / codes used, lr, and one panel per
    remaining key (epoch seconds, images/s, ...: their units differ). Step counters are x axes, not panels."""
    losses, mse, ppl, lr, other = [], [], [], [], []
    for k in sorted(keys):
        name = k.rsplit("/", 1)[-1].lower()
        if k in _X_KEYS:
            continue
        if name in ("lr", "learning_rate") or name.startswith("lr_"):
            lr.append(k)
        elif "perplexity" in name or "codes_used" in name or "usage" in name:
            ppl.append(k)
        elif "mse" in name:
            mse.append(k)
        elif "/" in k or "loss" in name:
            losses.append(k)
        else:
            other.append(k)
    # one panel per loss term, with the train/val (or test) versions of the same term together
    by_term: dict[str, list[str]] = {}
    for k in losses:
        by_term.setdefault(k.rsplit("/", 1)[-1], []).append(k)
    terms = sorted(by_term, key=lambda t: (t != "loss", t))  # the total loss first
    panels = [("loss" if t == "loss" else f"loss term: {t}", by_term[t]) for t in terms]
    if mse:
        panels.append(("reconstruction MSE", mse))
    if ppl:
        panels.append(("codebook perplexity / usage", ppl))
    if lr:
        panels.append(("learning rate", lr))
    panels += [(_OTHER_TITLES.get(k, k), [k]) for k in other]
    return panels


_OTHER_TITLES = {"seconds": "training time per epoch (s)", "images_per_second": "throughput (images / s)"}


def training_curves(metrics_jsonl_path: PathLike, path: PathLike, *, title: str | None = None, ncols: int = 3) -> Path:
    """Plot every numeric key of a metrics.jsonl log against epoch (or step, or line number).

    Panels: one per loss term (``train/loss``, ``train/ws``, ``train/kl`` ..., with the ``val/``
    version of the same term overlaid), MSE (train and val), perplexity, learning rate (log scale),
    anything else numeric. Keys logged only on some lines (e.g. validation every few epochs) are
    drawn at the lines where they appear.
    """
    records = read_metrics_jsonl(metrics_jsonl_path)
    if not records:
        raise ValueError(f"no JSON records in {metrics_jsonl_path}")
    xkey = next((k for k in _X_KEYS if any(_is_number(r.get(k)) for r in records)), None)
    keys = {k for r in records for k, v in r.items() if _is_number(v) and k != xkey}
    panels = group_metric_keys(keys)
    if not panels:
        raise ValueError(f"no numeric metrics in {metrics_jsonl_path}")

    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(4.6 * ncols, 3.2 * nrows + (0.5 if title else 0.2))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for i, (panel_title, pkeys) in enumerate(panels):
        ax = axes[i // ncols][i % ncols]
        positive = True
        for k in pkeys:
            pts = [
                (r.get(xkey) if xkey else j, r[k])
                for j, r in enumerate(records)
                if _is_number(r.get(k)) and (xkey is None or _is_number(r.get(xkey)))
            ]
            if not pts:
                continue
            xs, ys = zip(*pts)
            positive &= all(y > 0 for y in ys)
            ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, linewidth=1.4, label=k)
        if panel_title in ("learning rate", "reconstruction MSE") and positive:
            ax.set_yscale("log")
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel(xkey or "log line")
        ax.set_ylabel({"learning rate": "lr", "reconstruction MSE": "MSE", "codebook perplexity / usage": "perplexity",
                       _OTHER_TITLES["seconds"]: "seconds", _OTHER_TITLES["images_per_second"]: "images / s"}
                      .get(panel_title, "value"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    fig.suptitle(title or f"Training curves ({Path(metrics_jsonl_path).name})", fontsize=12)
    fig.tight_layout()
    return save_png(fig, path)


def learning_curves(curves: dict[str, list[tuple[float, float, float]]], path: PathLike, *,
                    marks: dict[str, dict[str, float]] | None = None, title: str = "") -> Path:
    """Perplexity and MSE against training steps, a line per model: ``curves`` {label: [(step, mse, perplexity)]}.
    ``marks`` {label: {"mse": v, "perplexity": v}}: reference values (e.g. the paper's, the authors' logs) drawn as
    points at the right edge, in each panel where they have a value."""
    fig = new_figure(13.0, 4.2)
    ax_ppl, ax_mse = fig.subplots(1, 2)
    end = max((p[0] for points in curves.values() for p in points), default=1)
    for label, points in curves.items():
        points = [p for p in points if all(_is_number(v) for v in p)]
        if not points:
            continue
        steps, mse, ppl = zip(*points)
        line = ax_ppl.plot(steps, ppl, marker=".", label=label)[0]
        ax_mse.plot(steps, mse, marker=".", color=line.get_color(), label=label)
    for (label, values), marker in zip((marks or {}).items(), "*DXP^v"):
        for ax, key in ((ax_ppl, "perplexity"), (ax_mse, "mse")):
            if _is_number(values.get(key)):
                ax.plot([end], [values[key]], marker=marker, markersize=10, linestyle="none", color="black",
                        markerfacecolor="none", label=label)
    ax_ppl.set(xlabel="training step", ylabel="validation perplexity", title="codebook perplexity")
    ax_mse.set(xlabel="training step", ylabel="validation MSE (log)", title="reconstruction MSE", yscale="log")
    legend = {}  # every line and mark once, from both panels (a mark may sit in one of them only)
    for ax in (ax_ppl, ax_mse):
        ax.grid(alpha=0.3)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    fig.legend(list(legend.values()), list(legend), fontsize=7, loc="center right")
    return save_png(fig, path)
