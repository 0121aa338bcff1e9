#!/usr/bin/python3
"""LeNet on Fashion-MNIST, data parallel over torch.distributed.

The example of d2l.ai's chapter on training on multiple GPUs (the LeNet of
that chapter, minibatch 256 split evenly among the workers, SGD with
learning rate 0.2, 10 epochs), with DistributedDataParallel instead of
copying parameters by hand, and one process per worker instead of one GPU
per worker:

  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 \\
      --redirects 9:1 --tee 9:1 bindings/torch/examples/lenet_ddp.py --backend braid
  torchrun --standalone --nproc_per_node 2 lenet_ddp.py --backend gloo

(`torchrun` is the same launcher; use the one of /usr/bin/python3, the
interpreter that sees Debian's torch. Debian's torch 1.13 on Python 3.11
needs `--redirects 9:1 --tee 9:1`: its launcher cannot parse the default
"0" there, see docs/TORCH.md.) The package braid_torch must be
importable for --backend braid: PYTHONPATH=build/python, or installed.

Per epoch, rank 0 prints the mean training loss, the training and test
accuracy, the epoch's training time and the share of it spent in gradient
communication: a DDP comm hook starts each bucket's all_reduce and notes
when its future completes, and the union of those intervals is the
communication time (averaged over the ranks). When every rank runs on one
host, the line also splits it: the time a rank waited for the last rank
to reach the same all_reduce (the ranks' uneven progress, which no
backend can shorten), and the time after that, the all_reduce itself;
and it names each rank's wait, so that a rank slower than the others
through a whole run shows as the one that hardly waits. --bind pins each
local rank to a CPU of its own (the i-th of those the launcher allows),
to tell a slow rank from a slow CPU.

The data are the IDX files of Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist, --data to change); nothing is
downloaded.
"""
import argparse
import gzip
import os
import struct
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip-compressed or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, kind, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    shape = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: {data.size} bytes for shape {shape}")
    return data.reshape(shape)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(
        f"{stem}[.gz] not in {data_dir} (Debian package dataset-fashion-mnist, "
        "or --data DIR)")


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte"))
    y = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte"))
    # pixels to [0, 1], as d2l's ToTensor() does
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


class LeNet(nn.Module):
    """d2l's multi-GPU chapter LeNet: conv 3x3 (20) - relu - avgpool,
    conv 5x5 (50) - relu - avgpool, linear 800-128 - relu, linear 128-10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, kernel_size=3)
        self.conv2 = nn.Conv2d(20, 50, kernel_size=5)
        self.fc1 = nn.Linear(50 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class CommTimer:
    """A DDP comm hook that averages each bucket with all_reduce, as DDP
    does by default, and records when each all_reduce started and when its
    future completed."""

    def __init__(self, group):
        self.group = group
        self.lock = threading.Lock()
        self.spans = []
        self.calls = 0

    def hook(self, _state, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer()
        buf.div_(dist.get_world_size(self.group))
        fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()

        def done(f):
            t1 = time.perf_counter()
            with self.lock:
                self.spans.append((t0, t1))
                self.calls += 1
            return f.value()[0]

        return fut.then(done)

    def take(self):
        """The spans since the last call, in call order."""
        with self.lock:
            spans, self.spans = self.spans, []
        return spans


def covered(spans):
    """Seconds covered by the spans (overlapping spans counted once)."""
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def after_arrival(spans, ws):
    """The part of the spans after the last rank's call of the same
    all_reduce: every rank's start times are gathered (ranks start the
    same buckets in the same order), so the rest of a span is this rank
    waiting for a later one. Only where the ranks share a clock (one
    host); None elsewhere."""
    if int(os.environ.get("LOCAL_WORLD_SIZE", ws)) != ws:
        return None
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(ws)]
    dist.all_gather(counts, torch.tensor([len(spans)], dtype=torch.int64))
    if any(int(c) != len(spans) for c in counts):
        return None
    starts = torch.tensor([a for a, _ in spans], dtype=torch.float64)
    every = [torch.zeros_like(starts) for _ in range(ws)]
    dist.all_gather(every, starts)
    last = torch.stack(every).max(0).values.tolist() if spans else []
    return covered([(max(a, t), b) for (a, b), t in zip(spans, last) if b > t])


def evaluate(model, x, y, rank, ws, batch, max_batches):
    """Accuracy over the test set, each rank a slice, counts all-reduced."""
    model.eval()
    n = x.shape[0]
    if max_batches:
        n = min(n, max_batches * batch * ws)
    lo, hi = rank * n // ws, (rank + 1) * n // ws
    correct = 0
    with torch.no_grad():
        for i in range(lo, hi, batch):
            j = min(i + batch, hi)
            correct += (model(x[i:j]).argmax(1) == y[i:j]).sum().item()
    t = torch.tensor([correct, hi - lo], dtype=torch.float64)
    dist.all_reduce(t)
    model.train()
    return (t[0] / t[1]).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="braid", choices=["braid", "gloo"])
    ap.add_argument("--data", default=DATA, help="folder of the IDX files")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=256,
                    help="the minibatch of all workers together")
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop each epoch after this many steps (0: whole epoch)")
    ap.add_argument("--eval-batches", type=int, default=0,
                    help="evaluate on this many batches per rank (0: whole test set)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per rank (0: cores / local ranks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bind", action="store_true",
                    help="pin local rank i to the i-th allowed CPU")
    args = ap.parse_args()

    if args.backend == "braid":
        try:
            import braid_torch  # noqa: F401  registers the backend "braid"
        except ImportError as e:
            sys.exit(f"--backend braid needs the package braid_torch ({e}); "
                     "build with BRAID_TORCH and set PYTHONPATH=<build>/python")
    if "RANK" not in os.environ:
        sys.exit("run me with torchrun or /usr/bin/python3 -m torch.distributed.run")
    dist.init_process_group(args.backend)   # env:// from the launcher
    rank, ws = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", ws))
    if args.bind:
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[int(os.environ.get("LOCAL_RANK", rank)) % len(cpus)]
        os.sched_setaffinity(0, {cpu})
        print(f"rank {rank}: bound to CPU {cpu}", flush=True)
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local))
    if args.batch_size % ws:
        sys.exit(f"--batch-size {args.batch_size} does not split among {ws} workers")
    per_rank = args.batch_size // ws

    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "test")
    torch.manual_seed(args.seed)          # the same initial model everywhere
    model = DDP(LeNet())
    timer = CommTimer(dist.group.WORLD)
    model.register_comm_hook(None, timer.hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    if rank == 0:
        print(f"LeNet on Fashion-MNIST over {args.backend}: {ws} workers, "
              f"minibatch {args.batch_size} ({per_rank} per worker), "
              f"lr {args.lr}, {torch.get_num_threads()} threads per worker",
              flush=True)

    steps_per_epoch = x_train.shape[0] // args.batch_size
    if args.max_steps:
        steps_per_epoch = min(steps_per_epoch, args.max_steps)
    total_time = total_comm = 0.0
    total_after = None
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        order = torch.randperm(x_train.shape[0], generator=g)
        loss_sum = torch.zeros((), dtype=torch.float64)
        correct = seen = 0
        timer.take()
        t0 = time.perf_counter()
        for step in range(steps_per_epoch):
            base = step * args.batch_size + rank * per_rank
            idx = order[base:base + per_rank]
            xb, yb = x_train[idx], y_train[idx]
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.detach().double() * yb.numel()
            correct += (out.argmax(1) == yb).sum().item()
            seen += yb.numel()
        elapsed = time.perf_counter() - t0
        spans = timer.take()
        comm = covered(spans)
        after = after_arrival(spans, ws)
        waits = None
        if after is not None:   # each rank's wait for the last one's calls
            waits = [torch.zeros(1, dtype=torch.float64) for _ in range(ws)]
            dist.all_gather(waits, torch.tensor([comm - after],
                                                dtype=torch.float64))
        stats = torch.tensor([loss_sum.item(), correct, seen, elapsed, comm,
                              after if after is not None else 0.0],
                             dtype=torch.float64)
        dist.all_reduce(stats)
        loss_avg = stats[0] / stats[2]
        train_acc = stats[1] / stats[2]
        elapsed, comm = stats[3].item() / ws, stats[4].item() / ws
        after = stats[5].item() / ws if after is not None else None
        test_acc = evaluate(model, x_test, y_test, rank, ws, per_rank,
                            args.eval_batches)
        total_time += elapsed
        total_comm += comm
        if after is not None:
            total_after = (total_after or 0.0) + after
        split = "" if after is None else (
            f": {comm - after:.2f} s waiting for the last rank's call, "
            f"{after:.2f} s ({100 * after / elapsed:.1f}%) after it; "
            f"the ranks waited "
            f"{', '.join(f'{float(w):.2f}' for w in waits)} s")
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {loss_avg:.4f}, train acc "
                  f"{train_acc:.3f}, test acc {test_acc:.3f}, "
                  f"{elapsed:.2f} s ({steps_per_epoch} steps), "
                  f"communication {comm:.2f} s ({100 * comm / elapsed:.1f}%)"
                  f"{split}", flush=True)
    if rank == 0:
        after = "" if total_after is None else (
            f" ({100 * total_after / total_time:.1f}% after the last rank's "
            f"call)")
        print(f"{args.backend}, {ws} workers: {args.epochs} epochs, "
              f"{total_time / args.epochs:.2f} s per epoch, communication "
              f"{100 * total_comm / total_time:.1f}% of the time{after}, "
              f"{timer.calls} all_reduce calls on rank 0", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
