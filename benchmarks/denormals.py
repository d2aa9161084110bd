"""What flushing subnormal floats saves on the CPU (issue #65): an Adam step on 500k parameters whose second moments
have decayed into the subnormal range (below 1.2e-38, as a long run's rarely-touched weights do), timed with
``torch.set_flush_denormal`` off and on, interleaved in one process (the two settings take turns each round).
The trainer flushes them on the CPU (``vqwae.threads.flush_denormals``).

    .venv/bin/python benchmarks/denormals.py --rounds 20 --threads 1
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def adam_on_subnormal_moments(n: int) -> torch.optim.Adam:
    p = torch.nn.Parameter(torch.randn(n))
    opt = torch.optim.Adam([p], lr=1e-3)
    p.grad = torch.full((n,), 1e-22)  # its square is subnormal
    opt.step()
    state = opt.state[p]
    state["exp_avg_sq"].fill_(1e-40)  # subnormal, as after many steps of tiny gradients
    state["exp_avg"].fill_(1e-40)
    return opt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5, help="steps per setting per round")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    times = {False: [], True: []}
    for r in range(args.rounds):
        for flush in ((False, True) if r % 2 == 0 else (True, False)):
            torch.set_flush_denormal(flush)
            opt = adam_on_subnormal_moments(args.params)
            for _ in range(args.steps):
                t0 = time.perf_counter()
                opt.step()
                times[flush].append((time.perf_counter() - t0) * 1e3)
    torch.set_flush_denormal(False)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    q = {k: statistics.quantiles(v, n=4) for k, v in times.items()}
    print(f"Adam step on {args.params:,} parameters with subnormal moments ({args.threads} thread(s), "
          f"{args.rounds} rounds x {args.steps} steps)")
    print(f"  flush off: median {off:.2f} ms (IQR {q[False][0]:.2f}-{q[False][2]:.2f})")
    print(f"  flush on:  median {on:.2f} ms (IQR {q[True][0]:.2f}-{q[True][2]:.2f})")
    print(f"  ratio off / on: {off / on:.1f}x")


if __name__ == "__main__":
    main()
