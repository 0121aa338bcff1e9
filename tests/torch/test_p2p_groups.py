"""Point to point and process groups over the braid backend:
batch_isend_irecv rings (one way and both ways, large enough that no send
can complete before its receive is posted), plain isend/irecv, subgroups
and overlapping groups, and Python threads issuing on different groups at
once.

  test_p2p_groups.py --world-size N [--init tcp|file]
"""

import argparse
import os
import sys
import threading

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def rings(rank, size):
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for n in (1, 1000, 1 << 20):
        for it in range(3):
            # one way around the ring
            send = torch.full((n,), float(rank * 100 + it))
            recv = torch.zeros(n)
            ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            assert torch.all(recv == float(prv * 100 + it)), "ring n=%d: %s" % (n, recv[:4])
            # both ways, receives listed first, and two messages to one peer
            # (they match in the order sent)
            a, b = torch.zeros(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)
            c = torch.zeros(7, dtype=torch.int64)
            ops = [dist.P2POp(dist.irecv, a, prv), dist.P2POp(dist.irecv, b, nxt),
                   dist.P2POp(dist.irecv, c, prv),
                   dist.P2POp(dist.isend, torch.full((n,), rank * 10 + 1), nxt),
                   dist.P2POp(dist.isend, torch.full((n,), rank * 10 + 2), prv),
                   dist.P2POp(dist.isend, torch.full((7,), rank * 10 + 3), nxt)]
            reqs = dist.batch_isend_irecv(ops)
            for req in reversed(reqs):
                req.wait()
            if size > 2:
                assert torch.all(a == prv * 10 + 1) and torch.all(b == nxt * 10 + 2), \
                    "both ways n=%d: %s %s" % (n, a[:3], b[:3])
            else:  # prv == nxt: its two messages come in the order sent
                assert torch.all(a == prv * 10 + 1) and torch.all(b == prv * 10 + 2), \
                    "both ways n=%d: %s %s" % (n, a[:3], b[:3])
            assert torch.all(c == prv * 10 + 3)
    # isend/irecv one at a time where no exchange depends on another
    t = torch.zeros(100)
    if rank == 0:
        reqs = [dist.isend(torch.full((100,), float(r)), r) for r in range(1, size)]
        for q in reqs:
            q.wait()
    else:
        q = dist.irecv(t, 0)
        q.wait()
        assert torch.all(t == float(rank))
        assert q.source_rank() == 0
    # tags are accepted (messages between two ranks match in the order sent)
    if rank == 0:
        dist.send(torch.ones(3), 1, tag=7)
    elif rank == 1:
        t = torch.zeros(3)
        dist.recv(t, 0, tag=7)
        assert torch.all(t == 1.0)
    # any-source receive: refused, and the group still works
    if rank == 1:
        common.expect_raises("recv_anysource", lambda: dist.recv(torch.zeros(2)), "any source",
                             "not supported")
    x = torch.ones(2)
    dist.all_reduce(x)
    assert torch.all(x == float(size))


def groups(rank, size):
    world = dist.group.WORLD
    # every pair of ranks, overlapping (each rank is in several), and a
    # second group of all ranks
    pairs = [[i, j] for i in range(size) for j in range(i + 1, size)]
    gs = [dist.new_group(p) for p in pairs]
    rev = dist.new_group(list(range(size))[::-1])
    for p, g in zip(pairs, gs):
        if rank not in p:
            assert g == dist.GroupMember.NON_GROUP_MEMBER
            continue
        assert dist.get_backend(g) == "braid"
        assert dist.get_world_size(g) == 2
        assert dist.get_rank(g) == p.index(rank)
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t, group=g)
        assert torch.all(t == float(p[0] + p[1] + 2)), "group %s: %s" % (p, t)
        # broadcast from a global rank (torch maps it to the group rank)
        b = torch.full((3,), float(rank))
        dist.broadcast(b, p[1], group=g)
        assert torch.all(b == float(p[1]))
        # p2p inside the group, global ranks
        other = p[1] if rank == p[0] else p[0]
        r = torch.zeros(4)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((4,), float(rank)), other, g),
                                       dist.P2POp(dist.irecv, r, other, g)])
        for q in reqs:
            q.wait()
        assert torch.all(r == float(other))
    # (torch 1.13's new_group sorts its ranks: group rank == global order)
    assert dist.get_rank(rev) == rank
    outs = [torch.zeros(2) for _ in range(size)]
    dist.all_gather(outs, torch.full((2,), float(rank)), group=rev)
    for r in range(size):
        assert torch.all(outs[r] == float(r)), "second world group: %s" % outs
    # a group's own operations do not disturb the world's
    a = torch.ones(3)
    w1 = dist.all_reduce(a, group=world, async_op=True)
    b = torch.ones(3) * 2
    w2 = dist.all_reduce(b, group=rev, async_op=True)
    w2.wait()
    w1.wait()
    assert torch.all(a == float(size)) and torch.all(b == float(2 * size))
    return gs, rev


def threads(rank, size, rev):
    """Two Python threads, each on its own group, at once."""
    errors = []

    def loop(group, base):
        try:
            for i in range(40):
                t = torch.full((256,), float(base + i + rank))
                dist.all_reduce(t, group=group)
                want = float(size * (base + i) + size * (size - 1) // 2)
                assert torch.all(t == want), "thread %s: %s != %s" % (base, t[0], want)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    th = [threading.Thread(target=loop, args=(dist.group.WORLD, 0)),
          threading.Thread(target=loop, args=(rev, 1000))]
    for t in th:
        t.start()
    for t in th:
        t.join(60)
    assert not any(t.is_alive() for t in th), "a thread did not finish"
    assert not errors, errors


def body(rank, size):
    rings(rank, size)
    gs, rev = groups(rank, size)
    threads(rank, size, rev)
    for g in gs:
        if g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)
    dist.barrier()
    if rank == 0:
        print("test_p2p_groups: %d ranks: ok" % size)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=3)
    ap.add_argument("--init", default="tcp", choices=["tcp", "file"])
    a = ap.parse_args()
    common.launch(body, a.world_size, init=a.init)


if __name__ == "__main__":
    main()
