r"""Trace the quantizer's state step by step while ``hosts.py`` trains (BENCHMARKS.md section 46): every 100th step,
and every third from ``--from-step`` on, one JSON line with the splits since the last line (``split_dead``'s and
``split_unused``'s), the solver's cost scale (the EMA of the quantization error), pi's largest and smallest share (x K),
the potential's range (in cost-scale units), the largest transported and nearest-code shares (x K) and the codebook's
RMS. It reads the host (a diagnostic, not a benchmark of speed). The hosts.py arguments follow ``--``:

    .venv/bin/python benchmarks/split_unused_trace.py --out benchmarks/results/split_unused_spike_seed0.jsonl \
        --from-step 1650 -- --host sequence --dataset mnist --data-root ../shared/data --steps 1850 \
        --eval-every 5000 --test-images 500 --seed 0 --threads 1 --models VQ-WAE \
        --variant "VQ-WAE:split_unused=0.1" --tag trace
"""
import argparse
import json
import runpy
import sys
from pathlib import Path

import torch

from vqwae.quantizers.transport_codebook import TransportCodebook


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--from-step", type=int, default=1650)
    args, hosts_args = ap.parse_known_args()
    hosts_args = [a for a in hosts_args if a != "--"]
    log = open(args.out, "w")
    state = {"step": 0, "which": "dead", "dead": 0, "unused": 0}
    split_pairs, split_dead, update = (TransportCodebook._split_pairs, TransportCodebook._split_dead_cells,
                                       TransportCodebook._transport_update.__wrapped__)

    def pairs(self, lo, hi, split):
        state[state["which"]] += int(split.sum())
        return split_pairs(self, lo, hi, split)

    def dead(self, live=None):
        state["which"] = "dead"
        split_dead(self, live)
        state["which"] = "unused"  # the next split of this step, if any, is split_unused's

    def largest_share(mass):  # x K: 1 is a uniform share
        return float(mass.max() / mass.sum()) * mass.shape[0]

    def traced_update(self, *a):
        with torch.no_grad():
            update(self, *a)
        state["step"] = n = state["step"] + 1
        if n % 100 and not (n >= args.from_step and n % 3 == 0):
            return
        pi, g = self.pi[0], self.solver.code_potential()[0] / self.solver.scale
        k = self.num_codes
        row = dict(step=n, dead=state["dead"], unused=state["unused"], scale=float(self.solver.scale),
                   pi_max=float(pi.max()) * k, pi_min=float(pi.min()) * k, g_min=float(g.min()), g_max=float(g.max()),
                   transported_max=largest_share(self.transport_mass),
                   nearest_max=largest_share(self.nearest_mass) if hasattr(self, "nearest_mass") else None,
                   codebook_rms=float(self.embedding.pow(2).mean().sqrt()))
        log.write(json.dumps(row) + "\n")
        log.flush()
        state["dead"] = state["unused"] = 0

    TransportCodebook._split_pairs, TransportCodebook._split_dead_cells = pairs, dead
    TransportCodebook._transport_update = traced_update  # eagerly, without the fused wrapper (a CPU diagnostic)
    sys.argv = ["hosts.py", *hosts_args]
    runpy.run_path(str(Path(__file__).with_name("hosts.py")), run_name="__main__")


if __name__ == "__main__":
    main()
