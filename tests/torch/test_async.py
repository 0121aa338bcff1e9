"""Asynchronous work over the braid backend: many operations in flight,
waited in order and out of order, completion in issue order, futures and
their .then chains, a DDP model whose gradients travel through them.

  test_async.py --world-size N [--init tcp|file]
"""

import argparse
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def in_flight(rank, size):
    tri = size * (size + 1) // 2
    for order in ("in order", "reversed"):
        ts = [torch.full((1 + (i * 997) % 20000,), float(rank + 1 + i)) for i in range(64)]
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        seq = works if order == "in order" else works[::-1]
        for w in seq:
            assert w.wait() is True
            assert w.is_completed()
            # (Work.exception() is not callable from Python in torch
            # 1.13: its binding cannot convert a std::exception_ptr)
        for i, t in enumerate(ts):
            want = float(tri + size * i)
            assert torch.all(t == want), "%s: tensor %d holds %s, expected %s" % (
                order, i, t[:4], want)
    # mixed operations in flight, then checked
    a = torch.full((1000,), float(rank))
    outs = [torch.zeros(1000) for _ in range(size)]
    b = torch.full((10,), float(rank)) if rank == 0 else torch.zeros(10)
    ws = [dist.all_reduce(a, async_op=True),
          dist.all_gather(outs, torch.full((1000,), float(rank * 10)), async_op=True),
          dist.broadcast(b, 0, async_op=True),
          dist.barrier(async_op=True)]
    for w in ws[::-1]:
        w.wait()
    assert torch.all(a == float(size * (size - 1) // 2))
    for r in range(size):
        assert torch.all(outs[r] == float(r * 10))
    assert torch.all(b == 0.0)


def issue_order(rank, size):
    """Futures complete in the order their operations were issued: a
    large operation first, small ones after."""
    done = []
    lock = threading.Lock()

    def mark(i):
        def cb(fut):
            with lock:
                done.append(i)
            return fut.value()
        return cb

    big = torch.ones(1 << 20)
    futs = [dist.all_reduce(big, async_op=True).get_future().then(mark(0))]
    for i in range(1, 20):
        t = torch.ones(4)
        futs.append(dist.all_reduce(t, async_op=True).get_future().then(mark(i)))
    torch.futures.wait_all(futs)
    assert done == list(range(20)), "completion order %s" % done
    assert torch.all(big == float(size))


def reads_when_run(rank, size):
    """An operation reads its inputs when it runs, after the operations
    issued before it on the group: one issued right after an asynchronous
    all_reduce of its input sees the all_reduce's result. The forms that
    stage their input (a list of tensors made one, a non-contiguous tensor
    made contiguous) copied it when issued, and read the old values."""
    n = float(size)
    # list forms, contiguous tensors: reduce_scatter, scatter, all_to_all
    t = torch.ones(size * 2)
    w1 = dist.all_reduce(t, async_op=True)
    out = torch.zeros(2)
    w2 = dist.reduce_scatter(out, list(t.chunk(size)), async_op=True)
    w1.wait()
    w2.wait()
    assert torch.all(out == n * n), "reduce_scatter read %s" % out
    t = torch.ones(size * 2)
    w1 = dist.all_reduce(t, async_op=True)
    out = torch.zeros(2)
    w2 = dist.scatter(out, list(t.chunk(size)) if rank == 0 else None, src=0,
                      async_op=True)
    w1.wait()
    w2.wait()
    assert torch.all(out == n), "scatter read %s" % out
    t = torch.ones(size)
    w1 = dist.all_reduce(t, async_op=True)
    outs = [torch.zeros(1) for _ in range(size)]
    w2 = dist.all_to_all(outs, list(t.chunk(size)), async_op=True)
    w1.wait()
    w2.wait()
    assert all(torch.all(o == n) for o in outs), "all_to_all read %s" % outs
    # non-contiguous tensors: in place (all_reduce) and as an input
    base = torch.ones(3, 4)
    w1 = dist.all_reduce(base, async_op=True)
    w2 = dist.all_reduce(base.t(), async_op=True)
    w1.wait()
    w2.wait()
    assert torch.all(base == n * n), "all_reduce(t.T) left %s" % base
    base = torch.full((2, 2), float(rank))
    w1 = dist.broadcast(base, 0, async_op=True)
    outs = [torch.full((2, 2), -1.0) for _ in range(size)]
    w2 = dist.all_gather(outs, base.t(), async_op=True)
    w1.wait()
    w2.wait()
    assert all(torch.all(o == 0.0) for o in outs), "all_gather read %s" % outs
    # all_to_all_single whose input overlaps its output (equal splits): from
    # a copy, as with explicit splits (it was refused)
    buf = torch.arange(size * 2 + 1, dtype=torch.float32) + 100 * rank
    out_view = buf[1:]
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32)
                      + 100 * src for src in range(size)])
    dist.all_to_all_single(out_view, buf[:-1])
    assert torch.equal(out_view, want), "all_to_all_single overlap: %s, expected %s" % (
        out_view, want)


def future_chains(rank, size):
    t = torch.arange(8, dtype=torch.float64) * (rank + 1)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    f2 = fut.then(lambda f: f.value()[0] * 2)
    f3 = f2.then(lambda f: f.value() + 1)
    got = f3.wait()
    tri = size * (size + 1) // 2
    want = torch.arange(8, dtype=torch.float64) * tri * 2 + 1
    assert torch.equal(got, want), "chain: %s, expected %s" % (got, want)
    # the future's value is the list of output tensors (DDP's hooks read it)
    v = fut.value()
    assert isinstance(v, list) and len(v) == 1 and v[0] is not None
    assert torch.equal(v[0], t)
    assert len(w.result()) == 1 and torch.equal(w.result()[0], t)
    # a future of an all_gather holds the gathered tensors
    outs = [torch.zeros(3) for _ in range(size)]
    fut = dist.all_gather(outs, torch.full((3,), float(rank)), async_op=True).get_future()
    v = fut.wait()
    assert len(v) == size and all(torch.all(v[r] == float(r)) for r in range(size))
    # torch.futures.collect_all over several operations
    ts = [torch.full((5,), float(i + rank)) for i in range(4)]
    futs = [dist.all_reduce(x, async_op=True).get_future() for x in ts]
    allf = torch.futures.collect_all(futs).wait()
    for i, f in enumerate(allf):
        assert torch.all(f.value()[0] == float(size * i + size * (size - 1) // 2))


def unwaited(rank, size):
    # An operation nobody waits for still runs: rank 0 issues it and then
    # blocks in another backend (gloo) until the others have finished the
    # same operation synchronously. Issued while calls come often (the
    # worker naps and finds it) and after a quiet spell (the worker sleeps
    # and the issue wakes it); then found by polling is_completed().
    tri = size * (size + 1) // 2
    g = dist.new_group(backend="gloo")
    for quiet in (False, True):
        if quiet:
            time.sleep(0.1)  # longer than the runner's hot window (20 ms)
        t = torch.full((5,), float(rank + 1))
        if rank == 0:
            w = dist.all_reduce(t, async_op=True)
            dist.barrier(group=g)
            assert w.wait() is True
        else:
            dist.all_reduce(t)
            dist.barrier(group=g)
        assert torch.equal(t, torch.full((5,), float(tri))), "unwaited: %s" % t
    t = torch.full((5,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    while not w.is_completed():
        pass
    assert torch.equal(t, torch.full((5,), float(tri))), "is_completed: %s" % t
    dist.destroy_process_group(g)


def ddp(rank, size):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(5):
        x = torch.randn(4, 8, generator=g)
        loss = ddp_model(x).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    # identical parameters on every rank
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    outs = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(outs, flat)
    for r in range(size):
        assert torch.equal(outs[r], flat), "DDP: rank %d's parameters differ from rank %d's" % (r, rank)


def body(rank, size):
    in_flight(rank, size)
    issue_order(rank, size)
    reads_when_run(rank, size)
    future_chains(rank, size)
    unwaited(rank, size)
    ddp(rank, size)
    dist.barrier()
    if rank == 0:
        print("test_async: %d ranks: ok" % size)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--init", default="tcp", choices=["tcp", "file"])
    a = ap.parse_args()
    common.launch(body, a.world_size, init=a.init)


if __name__ == "__main__":
    main()
