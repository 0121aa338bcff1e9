"""Who runs an operation: the group's worker thread, or the thread that
waits for it (bindings/torch/runner.h). What must hold either way:

  * async_op=True returns before the peers arrive, and the operation
    completes with nobody waiting for it (the worker runs it);
  * Work.wait() runs or awaits its own operation, and the ones issued
    before it, in issue order, also when several threads wait on one group
    at once;
  * Work.wait(timeout) gives up after the timeout when the peer is late,
    and the operation still completes afterwards;
  * a future's .then callback runs when the waiting thread ran the
    operation;
  * allreduce_coalesced runs its tensors as one braid group, and the same
    tensor twice (which a group cannot run at once) one after the other;
  * a .then callback may issue operations on the group and wait for them
    (blocking, through Work.wait, or through the future as DDP's PowerSGD
    hook does), also when the worker thread runs it and when the future
    it waits on was taken before it began; and DDP with the PowerSGD hook
    trains to the same parameters on every rank.

  test_wait.py --world-size N [--init tcp|file]
"""

import argparse
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def deadline_poll(pred, seconds, what):
    end = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < end, what
        time.sleep(0.001)


def async_before_peers(rank, size, side):
    """Rank 0 issues an all_reduce, then tells the others (over gloo) that
    it did; they issue theirs only after hearing it. Had the issue waited
    for the peers, rank 0 would never get to tell them."""
    t = torch.full((16,), float(rank + 1))
    flag = torch.zeros(1)
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        flag += 1
        dist.broadcast(flag, 0, group=side)
        # nobody waits: the worker completes it
        deadline_poll(w.is_completed, 30, "an all_reduce nobody waited for did not complete")
    else:
        dist.broadcast(flag, 0, group=side)
        assert flag.item() == 1.0
        w = dist.all_reduce(t, async_op=True)
        w.wait()
    assert torch.all(t == float(size * (size + 1) // 2)), t[:4]


def late_peer_timeout(rank, size, side):
    """wait(timeout) while a peer is late raises, and the operation
    completes once the peer comes."""
    t = torch.full((8,), float(rank))
    go = torch.zeros(1)
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        t0 = time.monotonic()
        try:
            w.wait(timeout=datetime.timedelta(milliseconds=200))
        except RuntimeError as e:
            assert "timed out" in str(e).lower(), str(e)
        else:
            raise AssertionError("wait(200 ms) returned while a peer had not called")
        took = time.monotonic() - t0
        assert took < 10, "wait(200 ms) took %.1f s" % took
        assert not w.is_completed()
        dist.broadcast(go, 0, group=side)
        w.wait()
    else:
        dist.broadcast(go, 0, group=side)
        dist.all_reduce(t)
    assert torch.all(t == float(size * (size - 1) // 2)), t[:4]


def then_on_waiter(rank, size):
    seen = []
    t = torch.full((4,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    f = w.get_future().then(lambda f: seen.append(threading.get_ident()) or f.value()[0] * 2)
    assert w.wait() is True
    got = f.wait()
    tri = size * (size + 1) // 2
    assert torch.all(got == 2.0 * tri), got
    assert len(seen) == 1


def many_waiters(rank, size):
    """32 operations in flight, four threads waiting on interleaved
    subsets of them in opposite orders; every result right, completion in
    issue order."""
    n = 32
    ts = [torch.full((1 + (i * 131) % 3000,), float(rank + i)) for i in range(n)]
    order = []
    lock = threading.Lock()

    def mark(i):
        def cb(f):
            with lock:
                order.append(i)
            return f.value()
        return cb

    works = []
    for i, t in enumerate(ts):
        w = dist.all_reduce(t, async_op=True)
        w.get_future().then(mark(i))
        works.append(w)
    errors = []

    def waiter(k):
        try:
            mine = works[k::4]
            for w in (mine if k % 2 == 0 else mine[::-1]):
                assert w.wait() is True
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=waiter, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
        assert not th.is_alive(), "a waiting thread hangs"
    assert not errors, errors
    deadline_poll(lambda: len(order) == n, 30, "callbacks missing: %s" % order)
    assert order == list(range(n)), "completion order %s" % order
    base = size * (size - 1) // 2
    for i, t in enumerate(ts):
        assert torch.all(t == float(base + size * i)), (i, t[:4])


def coalesced(rank, size):
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    # distinct tensors, dtypes mixed: one group
    ts = [torch.full((5,), float(rank + 1)), torch.full((1000,), rank + 2, dtype=torch.int64),
          torch.full((3,), float(rank), dtype=torch.float64)]
    pg.allreduce_coalesced(ts, opts).wait()
    tri = size * (size + 1) // 2
    assert torch.all(ts[0] == float(tri)) and torch.all(ts[1] == tri + size)
    assert torch.all(ts[2] == float(size * (size - 1) // 2))
    # disjoint views of one tensor
    base = torch.ones(20)
    pg.allreduce_coalesced([base[:10], base[10:]], opts).wait()
    assert torch.all(base == float(size)), base
    # the same tensor twice: reduced twice, one call after the other
    t = torch.ones(6)
    pg.allreduce_coalesced([t, t], opts).wait()
    assert torch.all(t == float(size * size)), t
    # overlapping views
    u = torch.ones(10)
    pg.allreduce_coalesced([u[:6], u[4:]], opts).wait()
    want = torch.full((10,), float(size))
    want[4:6] = float(size * size)
    assert torch.equal(u, want), u
    # overlapping views that are not contiguous (columns 0-1 and 1-2):
    # one after the other too, the second reading what the first wrote
    m = torch.ones(3, 3)
    pg.allreduce_coalesced([m[:, :2], m[:, 1:]], opts).wait()
    want = torch.full((3, 3), float(size))
    want[:, 1] = float(size * size)
    assert torch.equal(m, want), m


def callbacks_that_wait(rank, size, side):
    """Each callback waits on another operation of the group; rank 0 is
    late, so that on the other ranks the worker thread runs the first
    operation and its callback. Before, the callback held the group's
    runner while it waited, and nothing ran its operation: a hang."""
    want = float(size * (size + 1) // 2)

    def issue_then(cb):
        dist.barrier(group=side)
        if rank == 0:
            time.sleep(0.3)
        t = torch.full((4,), float(rank + 1))
        f = dist.all_reduce(t, async_op=True).get_future().then(cb)
        deadline_poll(f.done, 30, "a callback that waits never ended")
        return f.value()

    def through_future(fut):  # DDP's PowerSGD hook
        u = torch.full((2,), float(rank + 1))
        return dist.all_reduce(u, async_op=True).get_future().wait()[0]

    def blocking(fut):
        u = torch.full((2,), float(rank + 1))
        dist.all_reduce(u)
        return u

    def through_work(fut):
        u = torch.full((2,), float(rank + 1))
        dist.all_reduce(u, async_op=True).wait()
        return u

    for cb in (through_future, blocking, through_work):
        v = issue_then(cb)
        assert torch.all(v == want), (cb.__name__, v)

    # the future waited on was taken before the callback began: it queues
    # behind the callback, which gives way after a while
    dist.barrier(group=side)
    a, b = torch.ones(3), torch.full((3,), 2.0)
    fa = dist.all_reduce(a, async_op=True).get_future()
    fb = dist.all_reduce(b, async_op=True).get_future()
    fc = fa.then(lambda _: fb.wait()[0] + 1)
    deadline_poll(fc.done, 30, "a callback waiting on a later future hung")
    assert torch.all(fc.value() == 2 * size + 1), fc.value()

    # DDP with PowerSGD: every step past start_powerSGD_iter waits inside
    # a callback
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = powerSGD_hook.PowerSGDState(process_group=None,
                                        matrix_approximation_rank=1,
                                        start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    for _ in range(6):
        opt.zero_grad()
        ddp(torch.randn(8, 16)).square().mean().backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(every, flat, group=side)
    for r in range(size):
        assert torch.equal(every[r], flat), "rank %d's parameters differ" % r


def body(rank, size):
    side = dist.new_group(backend="gloo")
    async_before_peers(rank, size, side)
    late_peer_timeout(rank, size, side)
    then_on_waiter(rank, size)
    many_waiters(rank, size)
    coalesced(rank, size)
    callbacks_that_wait(rank, size, side)
    dist.barrier()
    if rank == 0:
        print("test_wait: %d ranks: ok" % size)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--init", default="tcp", choices=["tcp", "file"])
    a = ap.parse_args()
    common.launch(body, a.world_size, init=a.init)


if __name__ == "__main__":
    main()
