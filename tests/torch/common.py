"""Launching ranks for the torch binding's tests (tests/torch).

Two ways:
  * launch(fn, world_size, init): forks world_size ranks with
    torch.multiprocessing (the parent has imported torch once), each calls
    dist.init_process_group("braid", init_method=init) then fn(rank, size),
    and returns when all have exited; a rank that raises, exits non-zero or
    outlives the deadline fails the test (its traceback is on stderr).
  * /usr/bin/python3 common.py torchrun N script.py [args]: runs the script under
    torch.distributed.run with N processes on a free port (env://).
"""

import datetime
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

import braid_torch  # noqa: F401  (registers "braid")
import launch_util
from launch_util import free_port  # noqa: F401  (tests call common.free_port)


def init_method(kind):
    if kind == "tcp":
        return "tcp://127.0.0.1:%d" % free_port()
    if kind == "file":
        fd, path = tempfile.mkstemp(prefix="braid_torch_test_")
        os.close(fd)
        os.unlink(path)
        return "file://" + path
    raise ValueError("unknown init kind %r" % kind)


def _rank_main(rank, fn, size, init, timeout_s, kwargs):
    torch.set_num_threads(1)
    try:
        dist.init_process_group(
            "braid",
            init_method=init,
            rank=rank,
            world_size=size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        fn(rank, size, **kwargs)
        dist.destroy_process_group()
    except BaseException:
        sys.stderr.write("rank %d failed:\n%s" % (rank, traceback.format_exc()))
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def launch(fn, size, init="tcp", timeout_s=60, deadline_s=120, expect_exit=None,
           **kwargs):
    """Runs fn(rank, size, **kwargs) on `size` forked ranks (the group's
    timeout timeout_s); raises SystemExit(1) unless every rank exits 0
    (or as expect_exit {rank: code} says; -9: killed by SIGKILL) before
    deadline_s."""
    expect_exit = expect_exit or {}
    init = init_method(init)
    ctx = tmp.start_processes(
        _rank_main,
        args=(fn, size, init, timeout_s, kwargs),
        nprocs=size,
        join=False,
        start_method="fork",
    )
    procs = ctx.processes
    end = time.monotonic() + deadline_s
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    late = [i for i, p in enumerate(procs) if p.is_alive()]
    for i in late:
        procs[i].kill()
        procs[i].join()
    bad = [(i, p.exitcode) for i, p in enumerate(procs)
           if p.exitcode != expect_exit.get(i, 0)]
    if init.startswith("file://"):
        try:
            os.unlink(init[len("file://"):])
        except OSError:
            pass
    if late:
        print("FAIL: rank(s) %s still running after %d s" % (late, deadline_s))
        raise SystemExit(1)
    if bad:
        print("FAIL: rank(s) exited with %s" % bad)
        raise SystemExit(1)


def expect_raises(what, fn, *needles):
    """fn() must raise RuntimeError whose text holds every needle; returns
    the text."""
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        for n in needles:
            assert n in text, "%s: %r not in the error %r" % (what, n, text)
        return text
    raise AssertionError("%s: no exception raised" % what)


def torchrun(nproc, script, args):
    # below ctest's 180 s, so that a hang still shows the ranks' output
    rc, out, _cmd = launch_util.torchrun(nproc, script, args, timeout=150)
    print(out, flush=True)
    return rc


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "torchrun":
        sys.exit(torchrun(int(sys.argv[2]), sys.argv[3], sys.argv[4:]))
    sys.exit("usage: common.py torchrun N script.py [args]")
