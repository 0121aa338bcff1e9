#!/usr/bin/python3
"""DDP over one backend against DDP over another (braid against gloo).

  test_ddp_vs_gloo.py --world-size 3 [--backends braid,gloo] [--steps 50]

WORLD_SIZE ranks train the same model (convolutions, batch norm, linear
layers) from the same seed for --steps SGD steps with momentum, each rank on
its own data, once with DistributedDataParallel over each backend in turn
(in the same processes, one default group after the other). Checks:

- within a backend, every rank ends with bit-identical parameters and
  buffers, although their data differed (so the gradients were averaged);
- across backends, parameters and buffers agree within a float tolerance
  (sums in another order round differently), and the losses do too;
- the training did something: the loss fell and the parameters moved;
- each group really was of the backend asked for, and its all_reduce ran
  (counted by a DDP comm hook that forwards to the group's all_reduce).

Exits 0 only when every check ran and held on every rank.
"""
import argparse
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

RTOL, ATOL = 1e-4, 1e-5


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))


def counting_allreduce(state, bucket):
    """DDP's default: average the bucket with the group's all_reduce."""
    state["calls"] += 1
    t = bucket.buffer()
    t.div_(dist.get_world_size(state["group"]))
    fut = dist.all_reduce(t, group=state["group"], async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def train(backend, rank, ws, steps, init_file):
    dist.init_process_group(backend, init_method="file://" + init_file,
                            rank=rank, world_size=ws)
    assert dist.get_backend() == backend, (dist.get_backend(), backend)
    torch.manual_seed(1234)                 # the same model on every rank
    model = make_model()
    start = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model)
    state = {"calls": 0, "group": dist.group.WORLD}
    ddp.register_comm_hook(state, counting_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)   # each rank its own data
    target_w = torch.Generator().manual_seed(7)
    proj = torch.randn(64, 10, generator=target_w)
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 1, 8, 8, generator=gen)
        y = (x.flatten(1) @ proj).argmax(1)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().flatten().double()
                      for p in model.parameters()])
    # Buffers (batch norm's running statistics) are broadcast from rank 0
    # before each forward and then updated by each rank on its own batch:
    # compared across backends, not across ranks.
    bufs = torch.cat([b.detach().flatten().double() for b in model.buffers()
                      if b.is_floating_point()])
    everyone = [torch.empty_like(flat) for _ in range(ws)]
    dist.all_gather(everyone, flat)
    moved = max((p.detach() - s).abs().max().item()
                for p, s in zip(model.parameters(), start))
    dist.barrier()
    dist.destroy_process_group()
    return {"flat": flat, "bufs": bufs, "everyone": everyone, "losses": losses,
            "calls": state["calls"], "moved": moved}


def rank_main(rank, ws, backends, steps, tmp, plugin_path):
    try:
        sys.path[:0] = plugin_path
        torch.set_num_threads(1)
        if "braid" in backends:
            import braid_torch  # noqa: F401  registers "braid"
        runs = [train(b, rank, ws, steps, os.path.join(tmp, f"init{i}"))
                for i, b in enumerate(backends)]
        a, b = backends
        errors = []
        for name, r in zip(backends, runs):
            for q, other in enumerate(r["everyone"]):
                if not torch.equal(other, r["flat"]):
                    d = (other - r["flat"]).abs().max().item()
                    errors.append(f"{name}: rank {q}'s parameters differ from "
                                  f"rank {rank}'s (max {d:.3g})")
            if r["calls"] != steps:
                errors.append(f"{name}: {r['calls']} all_reduce calls by the "
                              f"comm hook for {steps} steps")
            if not (r["moved"] > 1e-3):
                errors.append(f"{name}: parameters did not move ({r['moved']})")
            first = sum(r["losses"][:5]) / 5
            last = sum(r["losses"][-5:]) / 5
            if not last < first:
                errors.append(f"{name}: loss did not fall ({first:.4f} -> {last:.4f})")
        fa, fb = runs[0]["flat"], runs[1]["flat"]
        diff = (fa - fb).abs().max().item()
        if not torch.allclose(fa, fb, rtol=RTOL, atol=ATOL):
            errors.append(f"{a} and {b} disagree: max |difference| {diff:.3g}")
        if not torch.allclose(runs[0]["bufs"], runs[1]["bufs"], rtol=RTOL, atol=ATOL):
            errors.append(f"buffers of {a} and {b} disagree")
        la, lb = torch.tensor(runs[0]["losses"]), torch.tensor(runs[1]["losses"])
        if not torch.allclose(la, lb, rtol=RTOL, atol=ATOL):
            errors.append(f"losses of {a} and {b} disagree: max "
                          f"{(la - lb).abs().max().item():.3g}")
        # Ranks differed in their data: without the averaging they would
        # not have ended with the same parameters (checked above).
        print(f"rank {rank}: {steps} steps over {a} and {b}, "
              f"{fa.numel()} values, max |{a} - {b}| = {diff:.3g}, "
              f"loss {runs[0]['losses'][0]:.4f} -> {runs[0]['losses'][-1]:.4f}",
              flush=True)
        if errors:
            print(f"rank {rank}: " + f"\nrank {rank}: ".join(errors), flush=True)
            sys.exit(1)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--backends", default="braid,gloo")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--pythonpath", action="append", default=[])
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args()
    backends = args.backends.split(",")
    if len(backends) != 2:
        sys.exit("--backends takes two names")
    paths = [os.path.abspath(p) for p in args.pythonpath]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        paths + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.spawn(rank_main, nprocs=args.world_size, join=False,
                       args=(args.world_size, backends, args.steps, tmp, paths))
        deadline = time.monotonic() + args.timeout
        try:
            # join() returns False while some rank is still running
            while (not ctx.join(timeout=5)
                   and time.monotonic() < deadline):
                pass
            if any(p.is_alive() for p in ctx.processes):
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                print(f"FAILED: not done within {args.timeout} s")
                return 1
        except mp.ProcessRaisedException as e:
            print(e)
            return 1
        except mp.ProcessExitedException as e:
            print(f"FAILED: {e}")
            return 1
    print(f"PASSED: DDP over {backends[0]} and {backends[1]}, "
          f"{args.world_size} ranks, {args.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
