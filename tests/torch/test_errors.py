"""Bad arguments to the braid backend: each raises a RuntimeError that
names what was wrong, in the calling thread, before anything is sent; the
group works after each of them.

  test_errors.py --world-size N [--init tcp|file]
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import expect_raises  # noqa: E402

R = dist.ReduceOp


def still_works(size, what):
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.all(t == float(size)), "after %s: the group returned %s" % (what, t)


def body(rank, size):
    pg = dist.group.WORLD
    t = torch.ones(4)
    q = torch.quantize_per_tensor(torch.ones(4), 0.5, 0, torch.quint8)
    cases = [
        ("two tensors to allreduce",
         lambda: pg.allreduce([t, t]).wait(),
         "allreduce", "must hold 1 tensor, got 2"),
        ("all_gather output list of the wrong length",
         lambda: dist.all_gather([torch.zeros(4)] * (size + 1), t),
         "allgather", "output list must hold %d tensors, got %d" % (size, size + 1)),
        ("all_gather output of another size",
         lambda: dist.all_gather([torch.zeros(4)] * (size - 1) + [torch.zeros(5)], t),
         "allgather", "output[%d] has 5 elements, expected 4" % (size - 1)),
        ("all_gather output of another dtype",
         lambda: pg.allgather([[torch.zeros(4, dtype=torch.int32)] * size], [t]).wait(),
         "allgather", "output[0] has dtype Int, the input Float"),
        ("_all_gather_base output of the wrong size",
         lambda: dist._all_gather_base(torch.zeros(4 * size + 1), t),
         "_allgather_base", "has %d elements, expected %d" % (4 * size + 1, 4 * size)),
        ("reduce_scatter inputs of another size",
         lambda: dist.reduce_scatter(torch.zeros(4), [torch.zeros(3)] * size),
         "reduce_scatter", "input[0] has 3 elements, expected 4"),
        ("all_to_all_single splits that do not add up",
         lambda: dist.all_to_all_single(torch.zeros(size * 2), torch.zeros(size * 2),
                                        [2] * size, [1] * size),
         "alltoall_base", "split sizes add up to %d" % size),
        ("all_to_all_single equal split that does not divide",
         lambda: dist.all_to_all_single(torch.zeros(size + 1), torch.zeros(size + 1)),
         "alltoall_base", "do not split into %d equal blocks" % size),
        ("broadcast from a rank outside the group",
         lambda: pg.broadcast([t], _bopts(size + 3)).wait(),
         "broadcast", "root %d is not a rank of the group" % (size + 3)),
        # (a CUDA tensor, refused by name, cannot be made with Debian's
        # CPU-only torch; torch's dispatcher itself refuses other devices)
        ("a sparse tensor",
         lambda: pg.allreduce([torch.eye(3).to_sparse()]).wait(),
         "allreduce", "layout Sparse"),
        ("PREMUL_SUM on complex (through the backend directly)",
         lambda: pg.allreduce([torch.ones(2, dtype=torch.complex64)],
                              _aopts(dist._make_nccl_premul_sum(2.0))).wait(),
         "ReduceOp.PREMUL_SUM is not supported on ComplexFloat"),
        ("BAND on float",
         lambda: dist.all_reduce(torch.ones(2), op=R.BAND),
         "ReduceOp.BAND needs an integer or bool tensor", "Float"),
        ("BXOR on bfloat16",
         lambda: dist.reduce(torch.ones(2, dtype=torch.bfloat16), 0, op=R.BXOR),
         "reduce", "ReduceOp.BXOR needs an integer or bool tensor"),
        ("MAX on complex",
         lambda: pg.allreduce([torch.ones(2, dtype=torch.complex64)], _aopts(R.MAX)).wait(),
         "ReduceOp.MAX is not supported on complex tensors"),
        ("PRODUCT on complex (reduce_scatter)",
         lambda: dist.reduce_scatter(torch.zeros(2, dtype=torch.complex128),
                                     [torch.ones(2, dtype=torch.complex128)] * size,
                                     op=R.PRODUCT),
         "reduce_scatter", "ReduceOp.PRODUCT is not supported on complex"),
        ("AVG on bool",
         lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), op=R.AVG),
         "ReduceOp.AVG is not defined on bool"),
        ("a dtype braid cannot reduce",
         lambda: pg.allreduce([torch.zeros(2, dtype=torch.complex32)]).wait(),
         "dtype ComplexHalf is not supported in reductions"),
        ("recv from a rank outside the group",
         lambda: dist.recv(torch.zeros(2), src=size + 1),
         "recv", "source rank %d is not a rank of the group" % (size + 1)),
        ("all_to_all: the block to itself differs, refused at the call",
         lambda: dist.all_to_all([torch.zeros(3 if i == rank else 2) for i in range(size)],
                                 [torch.zeros(2)] * size, async_op=True),
         "alltoall", "output %d has 3 elements and input %d 2" % (rank, rank)),
        ("all_to_all_single: split sizes to itself differ, refused at the call",
         lambda: dist.all_to_all_single(torch.zeros(size + 1), torch.zeros(size),
                                        [2 if i == rank else 1 for i in range(size)],
                                        [1] * size, async_op=True),
         "alltoall_base", "sends itself 1 elements", "receives 2"),
        ("all_gather of a quantized tensor into a list",
         lambda: dist.all_gather([q.clone() for _ in range(size)], q, async_op=True),
         "allgather", "is quantized (QUInt8)", "all_gather_into_tensor"),
        ("all_to_all of quantized tensors",
         lambda: dist.all_to_all([q.clone() for _ in range(size)],
                                 [q.clone() for _ in range(size)], async_op=True),
         "alltoall", "is quantized", "all_to_all_single"),
        ("gather outputs on a rank that is not the root",
         lambda: pg.gather([[torch.zeros(4)] * size], [t], _gopts((rank + 1) % size)).wait(),
         "gather: only the root"),
    ]
    for case in cases:
        what, fn, needles = case[0], case[1], case[2:]
        expect_raises(what, fn, *needles)
        still_works(size, what)
    # torch itself moves a ComplexHalf tensor as bytes through broadcast
    ch = torch.full((3,), 1 + 2j, dtype=torch.complex32) if rank == 0 else torch.zeros(3, dtype=torch.complex32)
    dist.broadcast(ch, 0)
    assert torch.equal(ch.view(torch.float16), torch.tensor([1, 2] * 3, dtype=torch.float16))
    dist.barrier()
    if rank == 0:
        print("test_errors: %d ranks, %d bad calls refused by name: ok" % (size, len(cases)))


def _bopts(root):
    o = dist.BroadcastOptions()
    o.rootRank = root
    return o


def _aopts(op):
    o = dist.AllreduceOptions()
    o.reduceOp = op
    return o


def _gopts(root):
    o = dist.GatherOptions()
    o.rootRank = root
    return o


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--init", default="tcp", choices=["tcp", "file"])
    a = ap.parse_args()
    common.launch(body, a.world_size, init=a.init)


if __name__ == "__main__":
    main()
