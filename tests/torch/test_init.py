"""Init methods of the braid backend: tcp://, file:// and env:// (torchrun
is test_ops --torchrun), the group's timeout handed to braid, and process
groups destroyed and made again in the same processes (each time with a
fresh store address or file: torch does not support reusing a file://).

  test_init.py --world-size N
"""

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import braid_torch  # noqa: E402


def check(size, what):
    t = torch.ones(8)
    dist.all_reduce(t)
    assert torch.all(t == float(size)), "%s: %s" % (what, t)


def rank_main(rank, size, inits):
    for round_, (what, init) in enumerate(inits):
        if what == "env://":
            addr, port = init
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(size),
                              MASTER_ADDR=addr, MASTER_PORT=str(port))
            init = "env://"
        timeout = datetime.timedelta(seconds=37 + round_)
        if what == "env://":
            dist.init_process_group("braid", init_method=init, timeout=timeout)
        else:
            dist.init_process_group("braid", init_method=init, rank=rank,
                                    world_size=size, timeout=timeout)
        pg = dist.group.WORLD
        assert isinstance(pg, braid_torch.ProcessGroupBraid), type(pg)
        assert pg.timeout_ms == (37 + round_) * 1000, pg.timeout_ms
        assert pg._get_backend_name() == "braid"
        assert dist.get_backend() == "braid"
        assert dist.get_rank() == rank and dist.get_world_size() == size
        check(size, "%s (round %d)" % (what, round_))
        sub = dist.new_group(list(range(size)))
        t = torch.ones(2)
        dist.all_reduce(t, group=sub)
        assert torch.all(t == float(size))
        dist.destroy_process_group()
    if rank == 0:
        print("test_init: %s: ok" % ", ".join(w for w, _ in inits), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    a = ap.parse_args()
    inits = []
    for _ in range(2):
        inits += [("tcp://", common.init_method("tcp")),
                  ("file://", common.init_method("file")),
                  ("env://", ("127.0.0.1", common.free_port()))]
    ctx = common.tmp.start_processes(rank_main, args=(a.world_size, inits),
                                     nprocs=a.world_size, join=False, start_method="fork")
    deadline = 120
    for p in ctx.processes:
        p.join(deadline)
    codes = [p.exitcode for p in ctx.processes]
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    if codes != [0] * a.world_size:
        print("FAIL: exit codes %s" % codes)
        sys.exit(1)


if __name__ == "__main__":
    main()
