"""A rank killed with SIGKILL in the middle of a training-like loop:
every survivor's pending operation raises a RuntimeError that names the
killed rank within the group's timeout, later operations fail at once,
and nothing hangs (the launcher's deadline would catch it). With
--mismatch: ranks that call different collectives under BRAID_CHECK=1
each raise an error naming both calls.

  test_fault.py --world-size N [--timeout S] [--mismatch]
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

KILL_AT = 20


def body(rank, size, limit_s, victim):
    x = torch.ones(1 << 16)
    last_ok = time.monotonic()
    for it in range(1000):
        if rank == victim and it == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        w = dist.all_reduce(x, async_op=True)
        try:
            w.wait()
        except RuntimeError as e:
            took = time.monotonic() - last_ok
            text = str(e)
            assert it == KILL_AT, "failed at iteration %d, rank %d was killed at %d" % (
                it, victim, KILL_AT)
            assert "rank %d" % victim in text, "the error does not name rank %d: %s" % (victim, text)
            assert took < limit_s + 5, "the error came after %.1f s (timeout %d s)" % (took, limit_s)
            assert w.is_completed()
            # its future failed with the same error
            try:
                w.get_future().wait()
                raise AssertionError("the failed operation's future completed")
            except RuntimeError as ef:
                assert "rank %d" % victim in str(ef), str(ef)
            # later operations fail at once, naming the first failure
            t0 = time.monotonic()
            try:
                dist.all_reduce(torch.ones(4))
                raise AssertionError("an operation after the failure succeeded")
            except RuntimeError as e2:
                assert time.monotonic() - t0 < 2.0, "the next operation took %.1f s" % (
                    time.monotonic() - t0)
                print("rank %d: failure seen after %.2f s: %s | next: %s" % (
                    rank, took, text, str(e2)[:200]), flush=True)
            return
        x.div_(size)
        last_ok = time.monotonic()
    raise AssertionError("no failure seen in 1000 iterations")


def mismatch(rank, size):
    t = torch.ones(4)
    call = "allreduce #1" if rank == 0 else "broadcast #1"
    try:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, 0)
    except RuntimeError as e:
        text = str(e)
        for needle in ("braid: %s failed" % call.split()[0], "rank 0 called allreduce #1",
                       "rank 1 called broadcast #1"):
            assert needle in text, "%r not in %r" % (needle, text)
        print("rank %d: %s" % (rank, text), flush=True)
        return
    raise AssertionError("rank %d: no error for mismatched collectives" % rank)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=10)
    ap.add_argument("--mismatch", action="store_true")
    a = ap.parse_args()
    if a.mismatch:
        os.environ["BRAID_CHECK"] = "1"
        common.launch(mismatch, a.world_size, timeout_s=a.timeout,
                      deadline_s=a.timeout * 3 + 30)
        return
    victim = a.world_size - 1
    common.launch(body, a.world_size, init="tcp", timeout_s=a.timeout,
                  deadline_s=a.timeout * 3 + 30,
                  expect_exit={victim: -signal.SIGKILL},
                  limit_s=a.timeout, victim=victim)


if __name__ == "__main__":
    main()
