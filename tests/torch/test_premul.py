"""ReduceOp.PREMUL_SUM (torch.distributed._make_nccl_premul_sum) on the braid
backend: each rank's factor times its input, summed, checked exactly
against the sum computed locally.

  test_premul.py --world-size N [--init tcp|file]
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64,
          torch.int32, torch.int64]


def factor(rank, dt):
    """Rank `rank`'s factor: halves for floats (0.5, 1, 1.5, ...), small
    integers for integers; every product and sum below is exact."""
    return float(rank + 2) if not dt.is_floating_point else 0.5 * (rank + 1)


def values(rank, n, dt, salt=0):
    i = torch.arange(n, dtype=torch.int64)
    return (1 + (i * 5 + rank * 3 + salt) % 8).to(dt)


def expected(size, n, dt, salt=0, factors=None):
    factors = factors or [factor(r, dt) for r in range(size)]
    acc = torch.zeros(n, dtype=torch.float64)
    for r in range(size):
        acc += factors[r] * values(r, n, dt, salt).double()
    return acc.to(dt)


def same(what, got, want):
    assert got.dtype == want.dtype and torch.equal(got, want), \
        "%s: got %s, want %s" % (what, got.tolist(), want.tolist())


def ops_for(rank, dt):
    """The same factor as a double and as a one-element tensor (of the
    call's dtype, and of float64, which the backend converts)."""
    f = factor(rank, dt)
    return [
        ("double", dist._make_nccl_premul_sum(f)),
        ("tensor", dist._make_nccl_premul_sum([torch.tensor([f]).to(dt)])),
        ("float64 tensor", dist._make_nccl_premul_sum([torch.tensor(f, dtype=torch.float64)])),
    ]


def check_dtype(rank, size, dt, n):
    for how, op in ops_for(rank, dt):
        tag = "%s %s n=%d" % (dt, how, n)
        # all_reduce, in place
        t = values(rank, n, dt)
        dist.all_reduce(t, op=op)
        same("all_reduce " + tag, t, expected(size, n, dt))
        # reduce at each root: only the root's tensor changes
        for root in range(size):
            t = values(rank, n, dt, salt=root)
            dist.reduce(t, root, op=op)
            want = expected(size, n, dt, salt=root) if rank == root \
                else values(rank, n, dt, salt=root)
            same("reduce root %d %s" % (root, tag), t, want)
        # reduce_scatter (a list) and _reduce_scatter_base (a flat tensor)
        ins = [values(rank, n, dt, salt=10 + b) for b in range(size)]
        out = torch.full((n,), 99).to(dt)
        dist.reduce_scatter(out, ins, op=op)
        same("reduce_scatter " + tag, out, expected(size, n, dt, salt=10 + rank))
        out = torch.full((n,), 99).to(dt)
        dist._reduce_scatter_base(out, torch.cat(ins), op=op)
        same("_reduce_scatter_base " + tag, out, expected(size, n, dt, salt=10 + rank))
        # all_reduce_coalesced: two tensors, one op
        ts = [values(rank, n, dt, salt=20), values(rank, n + 3, dt, salt=21)]
        dist.all_reduce_coalesced(ts, op=op)
        same("all_reduce_coalesced[0] " + tag, ts[0], expected(size, n, dt, salt=20))
        same("all_reduce_coalesced[1] " + tag, ts[1], expected(size, n + 3, dt, salt=21))


def check_async(rank, size):
    """16 operations in flight, each with its own factor, waited in
    reverse: each gives its own sum."""
    works, ts = [], []
    for k in range(16):
        f = 0.25 * (rank + k + 1)
        t = values(rank, 5, torch.float32, salt=k)
        ts.append(t)
        works.append(dist.all_reduce(t, op=dist._make_nccl_premul_sum(f), async_op=True))
    for k in reversed(range(16)):
        works[k].wait()
        fs = [0.25 * (r + k + 1) for r in range(size)]
        same("async %d" % k, ts[k], expected(size, 5, torch.float32, salt=k, factors=fs))


def check_many(rank, size):
    """More calls than a communicator holds ops at once (4096): each call's
    op is destroyed once it ran."""
    op = dist._make_nccl_premul_sum([torch.tensor([2.0])])
    t = torch.zeros(1)
    for k in range(4200):
        t.fill_(k % 3)
        dist.all_reduce(t, op=op)
    assert t.item() == 2.0 * size * (4199 % 3), t.item()


def check_refusals(rank, size):
    cases = [
        ("two factor tensors",
         lambda: dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(
             [torch.tensor([1.0]), torch.tensor([2.0])])),
         "allreduce", "factor is a list of 2 tensors"),
        ("a factor of two elements",
         lambda: dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(
             [torch.tensor([1.0, 2.0])])),
         "allreduce", "factor tensor has 2 elements"),
        ("a bool tensor",
         lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool),
                                 op=dist._make_nccl_premul_sum(2.0)),
         "ReduceOp.PREMUL_SUM is not supported on Bool"),
    ]
    for what, fn, *needles in cases:
        common.expect_raises(what, fn, *needles)
        t = torch.ones(3)
        dist.all_reduce(t)  # the group still works
        assert torch.equal(t, torch.full((3,), float(size))), what


def body(rank, size):
    for dt in DTYPES:
        for n in (1, 7):
            check_dtype(rank, size, dt, n)
    check_dtype(rank, size, torch.float32, 1 << 15)
    check_dtype(rank, size, torch.bfloat16, 1 << 15)
    check_async(rank, size)
    check_many(rank, size)
    check_refusals(rank, size)
    dist.barrier()
    if rank == 0:
        print("test_premul: %d ranks, %d dtypes: ok" % (size, len(DTYPES)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--init", default="tcp", choices=["tcp", "file"])
    a = ap.parse_args()
    common.launch(body, a.world_size, init=a.init, deadline_s=170)


if __name__ == "__main__":
    main()
