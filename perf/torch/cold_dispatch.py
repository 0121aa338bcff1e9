#!/usr/bin/python3
"""What torch's own dispatch costs once a call has moved megabytes.

  /usr/bin/python3 perf/torch/cold_dispatch.py [--mib 0,1,4,16] [--calls 3000]

No communication and no backend: one process times three tiny in-place
ops on a 2-element tensor (add_, mul_, add_: three trips through Python
and torch's dispatcher, about what one torch.distributed call makes),
first with nothing in between, then with a pass over M MiB of another
tensor before each timed triple, as a collective's copy of M MiB leaves
the core's caches. The difference is what torch itself pays to run on
cold caches after a large call, whatever the backend: perf/torch/
bench_torch.py's "torch over C call" column at 1 MiB and up holds it.
"""
import argparse
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", default="0,1,4,16",
                    help="MiB touched between the timed ops (0: nothing)")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per size; the best is shown")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(1)
    small = torch.zeros(2)
    print("MiB touched between   3 tiny torch ops (us, best of "
          f"{args.rounds} rounds of {args.calls})")
    for mib in (int(x) for x in args.mib.split(",")):
        junk = torch.ones(max(mib, 1) << 18)
        best = None
        for _ in range(args.rounds):
            total = 0.0
            for _ in range(args.calls):
                if mib:
                    junk.add_(1.0)
                t0 = time.perf_counter()
                small.add_(1.0)
                small.mul_(1.0)
                small.add_(1.0)
                total += time.perf_counter() - t0
            us = total / args.calls * 1e6
            best = us if best is None else min(best, us)
        print(f"{mib:>19d}   {best:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
