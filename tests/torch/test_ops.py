"""Every operation of the braid backend with every dtype and reduce op,
checked exactly against values computed locally.

  test_ops.py --world-size N [--init tcp|file]   forks N ranks
  common.py torchrun N test_ops.py --torchrun     under torch.distributed.run
"""

import argparse
import functools
import operator
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
COMPLEX = [torch.complex64, torch.complex128]
ALL = FLOATS + INTS + [torch.bool] + COMPLEX
OPS = {
    "SUM": R.SUM, "PRODUCT": R.PRODUCT, "MIN": R.MIN, "MAX": R.MAX,
    "AVG": R.AVG, "BAND": R.BAND, "BOR": R.BOR, "BXOR": R.BXOR,
}


def valid_ops(dt):
    if dt in FLOATS:
        return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
    if dt in INTS:
        return list(OPS)
    if dt == torch.bool:
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    return ["SUM", "AVG"]


def values(op, rank, n, dt):
    """Rank `rank`'s input of n elements for `op`: small integers, so that
    every result is exact in every dtype."""
    i = torch.arange(n, dtype=torch.int64)
    if dt == torch.bool:
        v = ((i * 3 + rank) % 4) < 2
        return v
    if op == "PRODUCT":
        v = 1 + (i + rank) % 2
    elif op in ("BAND", "BOR", "BXOR"):
        v = (i * 7 + rank * 5 + 1) % 64
    else:
        v = rank + 1 + (i * 5 + rank * 3) % 7
    if dt in COMPLEX:
        return torch.complex(v.double(), -2 * v.double()).to(dt)
    return v.to(dt)


def expected(op, size, n, dt):
    xs = [values(op, r, n, dt) for r in range(size)]
    if dt == torch.bool:
        b = [x.to(torch.int64) for x in xs]
        if op in ("SUM", "MAX", "BOR"):
            out = functools.reduce(torch.maximum, b)
        elif op in ("PRODUCT", "MIN", "BAND"):
            out = functools.reduce(torch.minimum, b)
        else:
            out = functools.reduce(operator.xor, b)
        return out.to(torch.bool)
    if dt in COMPLEX:
        s = functools.reduce(operator.add, [x.to(torch.complex128) for x in xs])
        return (s / size if op == "AVG" else s).to(dt)
    wide = [x.to(torch.float64 if dt in FLOATS else torch.int64) for x in xs]
    if op == "SUM":
        out = functools.reduce(operator.add, wide)
    elif op == "AVG":
        s = functools.reduce(operator.add, wide)
        out = s / size if dt in FLOATS else torch.div(s, size, rounding_mode="trunc")
    elif op == "PRODUCT":
        out = functools.reduce(operator.mul, wide)
    elif op == "MIN":
        out = functools.reduce(torch.minimum, wide)
    elif op == "MAX":
        out = functools.reduce(torch.maximum, wide)
    elif op == "BAND":
        out = functools.reduce(operator.and_, wide)
    elif op == "BOR":
        out = functools.reduce(operator.or_, wide)
    else:
        out = functools.reduce(operator.xor, wide)
    return out.to(dt)


def same(what, got, want):
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert torch.equal(got, want), "%s:\n got %s\nwant %s" % (what, got, want)


def pattern(rank, n, dt, salt=0):
    """Distinct data per rank for operations that move data."""
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 11 + rank * 37 + salt * 101) % 120
    if dt == torch.bool:
        return v % 3 == 0
    if dt in COMPLEX:
        return torch.complex(v.double(), (v + 1).double()).to(dt)
    return v.to(dt)


def check_reductions(rank, size, dt, n):
    pg = dist.group.WORLD
    for name in valid_ops(dt):
        op = OPS[name]
        tag = "%s %s n=%d" % (dt, name, n)
        want = expected(name, size, n, dt)
        # all_reduce through the process group (torch's Python all_reduce
        # turns complex tensors into real views itself; this path does not)
        t = values(name, rank, n, dt)
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        pg.allreduce([t], opts).wait()
        same("allreduce " + tag, t, want)
        if dt not in COMPLEX:
            t = values(name, rank, n, dt)
            dist.all_reduce(t, op=op)
            same("all_reduce " + tag, t, want)
        # reduce to every root in turn; the others' tensors stay as given
        for root in range(size):
            t = values(name, rank, n, dt)
            dist.reduce(t, root, op=op)
            same("reduce root %d %s" % (root, tag), t,
                 want if rank == root else values(name, rank, n, dt))
        # reduce_scatter (lists) and _reduce_scatter_base: block r of every
        # rank's input is reduced into rank r
        ins = [values(name, rank, size * n, dt)[r * n:(r + 1) * n].clone()
               for r in range(size)]
        full = expected(name, size, size * n, dt)[rank * n:(rank + 1) * n]
        out = torch.zeros(n, dtype=dt)
        dist.reduce_scatter(out, ins, op=op)
        same("reduce_scatter " + tag, out, full)
        out = torch.zeros(n, dtype=dt)
        dist._reduce_scatter_base(out, values(name, rank, size * n, dt), op=op)
        same("_reduce_scatter_base " + tag, out, full)
        # allreduce_coalesced: several tensors of this dtype in one call
        ts = [values(name, rank, n, dt), values(name, rank, 2 * n + 1, dt)]
        copts = dist.AllreduceCoalescedOptions()
        copts.reduceOp = op
        pg.allreduce_coalesced(ts, copts).wait()
        same("allreduce_coalesced[0] " + tag, ts[0], want)
        same("allreduce_coalesced[1] " + tag, ts[1],
             expected(name, size, 2 * n + 1, dt))


def check_movement(rank, size, dt, n):
    pg = dist.group.WORLD
    tag = "%s n=%d" % (dt, n)
    for root in range(size):
        t = pattern(rank, n, dt)
        dist.broadcast(t, root)
        same("broadcast root %d %s" % (root, tag), t, pattern(root, n, dt))
    outs = [torch.zeros(n, dtype=dt) for _ in range(size)]
    dist.all_gather(outs, pattern(rank, n, dt))
    for r in range(size):
        same("all_gather[%d] %s" % (r, tag), outs[r], pattern(r, n, dt))
    flat = torch.zeros(size * n, dtype=dt)
    dist._all_gather_base(flat, pattern(rank, n, dt))
    same("_all_gather_base " + tag, flat, torch.cat([pattern(r, n, dt) for r in range(size)]))
    # in place: the input is this rank's block of the output
    flat = torch.zeros(size * n, dtype=dt)
    flat[rank * n:(rank + 1) * n] = pattern(rank, n, dt)
    dist._all_gather_base(flat, flat[rank * n:(rank + 1) * n])
    same("_all_gather_base in place " + tag, flat,
         torch.cat([pattern(r, n, dt) for r in range(size)]))
    ins = [pattern(rank, n, dt, 1), pattern(rank, n + 3, dt, 2)]
    outl = [[torch.zeros(n, dtype=dt), torch.zeros(n + 3, dtype=dt)] for _ in range(size)]
    if dt not in COMPLEX:  # torch's all_gather_coalesced views complex as real
        pg.allgather_coalesced(outl, ins).wait()
        for r in range(size):
            same("allgather_coalesced[%d][0] %s" % (r, tag), outl[r][0], pattern(r, n, dt, 1))
            same("allgather_coalesced[%d][1] %s" % (r, tag), outl[r][1], pattern(r, n + 3, dt, 2))
    for root in range(size):
        g = [torch.zeros(n, dtype=dt) for _ in range(size)] if rank == root else None
        dist.gather(pattern(rank, n, dt), g, dst=root)
        if rank == root:
            for r in range(size):
                same("gather root %d [%d] %s" % (root, r, tag), g[r], pattern(r, n, dt))
        out = torch.zeros(n, dtype=dt)
        src = [pattern(r, n, dt, 3 + root) for r in range(size)] if rank == root else None
        dist.scatter(out, src, src=root)
        same("scatter root %d %s" % (root, tag), out, pattern(rank, n, dt, 3 + root))
    # all_to_all (lists, sizes that differ per pair) and all_to_all_single
    # with equal and uneven splits: rank r sends (r + j + 1) * k rows to j
    k = 2
    ins = [pattern(rank * size + j, (rank + j + 1) * k, dt) for j in range(size)]
    outs = [torch.zeros((j + rank + 1) * k, dtype=dt) for j in range(size)]
    dist.all_to_all(outs, ins)
    for j in range(size):
        same("all_to_all from %d %s" % (j, tag), outs[j],
             pattern(j * size + rank, (j + rank + 1) * k, dt))
    inp = torch.cat([pattern(rank * size + j, n, dt) for j in range(size)])
    out = torch.zeros(size * n, dtype=dt)
    dist.all_to_all_single(out, inp)
    same("all_to_all_single equal " + tag, out,
         torch.cat([pattern(j * size + rank, n, dt) for j in range(size)]))
    in_splits = [(rank + j + 1) for j in range(size)]
    out_splits = [(j + rank + 1) for j in range(size)]
    inp = torch.cat([pattern(rank * size + j, 3 * s, dt).view(s, 3)
                     for j, s in enumerate(in_splits)])
    out = torch.zeros(sum(out_splits), 3, dtype=dt)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    same("all_to_all_single uneven " + tag, out,
         torch.cat([pattern(j * size + rank, 3 * s, dt).view(s, 3)
                    for j, s in enumerate(out_splits)]))
    # in place with the same split sizes both ways (the input is the
    # output: braid's alltoallv has no in-place form, the binding copies)
    sp = [2 for _ in range(size)]
    t = torch.cat([pattern(rank * size + j, 2, dt) for j in range(size)])
    dist.all_to_all_single(t, t, sp, sp)
    same("all_to_all_single uneven in place " + tag, t,
         torch.cat([pattern(j * size + rank, 2, dt) for j in range(size)]))
    # one split of zero rows (rank 0 sends nothing to the last rank)
    in_splits = [0 if (rank == 0 and j == size - 1) else 1 for j in range(size)]
    out_splits = [0 if (j == 0 and rank == size - 1) else 1 for j in range(size)]
    inp = torch.cat([pattern(rank * size + j, s, dt) for j, s in enumerate(in_splits)])
    out = torch.zeros(sum(out_splits), dtype=dt)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    same("all_to_all_single zero split " + tag, out,
         torch.cat([pattern(j * size + rank, s, dt) for j, s in enumerate(out_splits)]))
    # send/recv around a ring, the even ranks first
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(n, dtype=dt)
    if rank % 2 == 0:
        dist.send(pattern(rank, n, dt, 9), nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(pattern(rank, n, dt, 9), nxt)
    same("send/recv ring " + tag, got, pattern(prv, n, dt, 9))


def check_noncontiguous(rank, size):
    # a transposed tensor: reduced and copied back in place
    base = torch.arange(12, dtype=torch.float32).view(3, 4) * (rank + 1)
    t = base.t()
    assert not t.is_contiguous()
    dist.all_reduce(t)
    same("all_reduce non-contiguous", t,
         (torch.arange(12, dtype=torch.float32).view(3, 4) * (size * (size + 1) // 2)).t())
    outs = [torch.zeros(4, 3).t() for _ in range(size)]
    dist.all_gather(outs, (torch.arange(12.0).view(4, 3) + rank).t())
    for r in range(size):
        same("all_gather non-contiguous[%d]" % r, outs[r], (torch.arange(12.0).view(4, 3) + r).t())
    dist.barrier()


def body(rank, size, sizes):
    assert dist.get_backend() == "braid"
    assert dist.group.WORLD._get_backend_name() == "braid"
    for dt in ALL:
        for n in sizes:
            check_reductions(rank, size, dt, n)
            check_movement(rank, size, dt, n)
    # a larger buffer through the pipelined paths, two dtypes
    for dt in (torch.float32, torch.int64):
        check_reductions(rank, size, dt, 1 << 16)
    check_noncontiguous(rank, size)
    dist.barrier()
    if rank == 0:
        print("test_ops: %d ranks, %d dtypes, sizes %s: ok" % (size, len(ALL), sizes))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--init", default="tcp", choices=["tcp", "file"])
    ap.add_argument("--torchrun", action="store_true",
                    help="run as one rank launched by torch.distributed.run (env://)")
    a = ap.parse_args()
    sizes = [1, 7]
    if a.torchrun:
        dist.init_process_group("braid")  # env:// from the launcher
        body(dist.get_rank(), dist.get_world_size(), sizes)
        dist.destroy_process_group()
        return
    common.launch(body, a.world_size, init=a.init, sizes=sizes)


if __name__ == "__main__":
    main()
