"""How fast each quantizer renews its codebook at large K (issue #67), in one host network on the same batches:

* the field's VQ, vector-quantize-pytorch's ``VectorQuantize`` with k-means start and dead-code expiry (threshold 2,
  EMA decay 0.99: ``hosts.py``'s "VQ kmeans+expiry"): the codes it re-seeds from the batch each step;
* VQ-WAE's default: the codes ``TransportCodebook`` moves each step by splitting a cell (``_split_pairs``);

and at the end each code's age (steps since it was last re-seeded or moved by a split; the start counts as step 0).

At K codes and N latents a step, a code receives N / K latents a step on average. A re-seed sets its EMA count to
the threshold; with decay 0.99 the count stays at or above it at the next step only if the code receives at least
as many latents as the threshold in that step. Below N / K = 2 most codes expire again within a few steps, and the
codebook is a rolling sample of the latest batches' latents rather than EMA centroids. This script measures it.

    .venv/bin/python benchmarks/expiry_churn.py --host paper --dataset cifar10 --num-codes 16384 --steps 300

Writes benchmarks/results/expiry_churn_<host>_<dataset>_k<K>_<steps>.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import training_batches  # noqa: E402
from host_networks import TOKENS, build_host  # noqa: E402
from hosts import HERE, build_model, cell_arguments, quantizer_factories, train_step  # noqa: E402

from vqwae.data import load_splits  # noqa: E402


class Counter:
    """Wraps ``owner.method`` (the library's own re-seed or split, run unchanged) to count the codes it moves each
    step (``moved(args, codes_before)``: a bool mask over the codes), and keeps each code's age."""

    def __init__(self, owner, method: str, codes, moved):
        self.codes, self.moved = codes, []
        self.age = torch.zeros(codes().shape[0], dtype=torch.long)
        inner = getattr(owner, method)

        def counted(*args, **kwargs):
            before = self.codes().detach().clone()
            out = inner(*args, **kwargs)
            changed = moved(args, before)
            self.moved[-1] += int(changed.sum())
            self.age[changed] = 0
            return out

        setattr(owner, method, counted)

    def new_step(self) -> None:
        self.moved.append(0)
        self.age += 1

    def summary(self, steps: int) -> dict:
        tail = self.moved[len(self.moved) // 2:]
        return dict(moved_per_step=self.moved,
                    second_half=dict(mean=statistics.mean(tail), min=min(tail), max=max(tail)),
                    age_at_end=dict(median=int(self.age.median()), p90=int(self.age.float().quantile(0.9)),
                                    max=int(self.age.max()), never_moved=int((self.age == steps).sum())))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cell_arguments(ap, host="paper", steps=200, num_codes=16384)
    args = ap.parse_args()
    torch.set_num_threads(1)
    train = load_splits(args.dataset, args.data_root, train_limit=20000, eval_limit=1).train
    channels = train[0][0].shape[0]
    factories = quantizer_factories(args.num_codes, build_host(args.host, channels).dim, TOKENS, residual=False)
    models, counters = {}, {}
    for name in ("VQ kmeans+expiry", "VQ-WAE"):
        models[name] = build_model(args.host, channels, factories[name], args.seed)  # hosts.py's model and Adam
        q = models[name][0].quantizer.q
        if name == "VQ-WAE":
            # _split_pairs(codebook, potential, scale, lo, hi, split, tracked): code lo[i] moves next to hi[i]
            counters[name] = Counter(q.transport, "_split_pairs", lambda q=q: q.embedding,
                                     lambda a, before: torch.zeros(args.num_codes, dtype=torch.bool).index_fill_(
                                         0, a[3][a[5]], True))
        else:
            book = q._codebook
            counters[name] = Counter(book, "replace", lambda b=book: b.embed[0],
                                     lambda a, before, b=book: (b.embed[0] != before).any(-1))
    for step, x in training_batches(train, args.steps, args.seed):
        for name, (model, opt) in models.items():
            counters[name].new_step()
            train_step(model, opt, x, None)
        if step % 25 == 0:
            print(f"step {step}: " + "; ".join(f"{n}: moved {c.moved[-1]} codes, median age {int(c.age.median())}"
                                               for n, c in counters.items()), flush=True)
    latents = 32 * TOKENS  # a batch's latents (training_batches: 32 images of 8 x 8 positions)
    result = dict(meta=dict(vars(args), latents_per_step=latents, latents_per_code=latents / args.num_codes),
                  **{n: c.summary(args.steps) for n, c in counters.items()})
    out = HERE / "results" / f"expiry_churn_{args.host}_{args.dataset}_k{args.num_codes}_{args.steps}.json"
    out.write_text(json.dumps(result, indent=1))
    for n in counters:
        print(n, json.dumps({k: v for k, v in result[n].items() if k != "moved_per_step"}))


if __name__ == "__main__":
    main()
