#!/usr/bin/python3
"""torch.distributed over braid against gloo, next to braid-perf.

  perf/torch/bench_torch.py --build build [--ranks 2] [-b 8] [-e 256M] [-f 2]
      [--collectives all_reduce,all_gather,reduce_scatter,broadcast] [--md out.md]

One run: --ranks processes each hold a gloo group (the default group) and a
braid group (dist.new_group(backend="braid")) and time, size by size and
one backend right after the other, blocking float32 calls:

  all_reduce      dist.all_reduce, in place, SUM
  all_gather      dist.all_gather_into_tensor (size: the gathered output);
                  over gloo, which lacks it in torch 1.13, dist.all_gather
                  into views of the same output
  reduce_scatter  dist.reduce_scatter_tensor, SUM (size: the input); gloo
                  has no reduce_scatter in torch 1.13: its column is the
                  all_reduce of the input, what a gloo user does instead
  broadcast       dist.broadcast from rank 0, in place

Sizes follow braid-perf's (nccl-tests') meaning of -b/-e/-f. Each size: a
few warm-up calls, the group's barrier, then N calls timed together; the
time of a call is the mean over the ranks of their average, as braid-perf's
default -a 1. braid-perf runs the same collectives and sizes with blocking
calls (`braidrun -n RANKS braid-perf COLL -b -e -f -y 1`) between the
rounds: each of --repeat rounds times every size over braid, over gloo and
as libbraid's C call made from the same processes on the same tensors
(ctypes, a communicator of its own), then braid-perf once, and the table
shows each one's best round. The script prints a markdown table per
collective: braid-perf's time, the C call's, torch's over braid and over
gloo, what torch adds to braid-perf and to the C call (microseconds and
ratio) and gloo's time over braid's.

Use /usr/bin/python3 (the interpreter that sees Debian's torch); the build
folder must hold python/braid_torch, tools/braidrun and perf/braid-perf.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

COLLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
# which braid-perf column matches torch's call: in place or out of place
PLACE = {"all_reduce": "in_place", "broadcast": "in_place",
         "all_gather": "out_of_place", "reduce_scatter": "out_of_place"}


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def human(n):
    for unit, sh in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << sh and n % (1 << sh) == 0:
            return f"{n >> sh} {unit}iB"
    return f"{n} B"


def sizes(lo, hi, factor):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def iters_for(size, budget):
    """Calls to time at one size: more for small sizes, at least 5."""
    return max(5, min(200, budget // max(size, 1)))


class CApi:
    """libbraid's C calls, through ctypes, on a communicator of their own
    over the same ranks and on the same tensors as the torch calls: what
    the same process pays without torch and the binding in between."""

    FLOAT32, SUM = 8, 0   # braid_dtype and braid_op (include/braid.h)

    def __init__(self, rank, ws, dist, torch):
        import ctypes
        # the library braid_torch's extension loaded (same soname: same copy)
        self.lib = ctypes.CDLL("libbraid.so.0")
        idt = torch.zeros(128, dtype=torch.uint8)
        if rank == 0:
            buf = ctypes.create_string_buffer(128)
            self.check(self.lib.braid_get_unique_id(buf), "braid_get_unique_id")
            idt = torch.frombuffer(bytearray(buf.raw), dtype=torch.uint8).clone()
        dist.broadcast(idt, 0)
        uid = ctypes.create_string_buffer(bytes(idt.tolist()), 128)
        self.comm = ctypes.c_void_p()
        self.check(self.lib.braid_comm_init(ctypes.byref(self.comm), ws, uid,
                                            rank, None), "braid_comm_init")
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for fn, args in (("braid_allreduce", [vp, vp, sz, ctypes.c_int, ctypes.c_int, vp, vp]),
                         ("braid_broadcast", [vp, vp, sz, ctypes.c_int, ctypes.c_int, vp, vp]),
                         ("braid_allgather", [vp, vp, sz, ctypes.c_int, vp, vp]),
                         ("braid_reduce_scatter", [vp, vp, sz, ctypes.c_int, ctypes.c_int, vp, vp]),
                         ("braid_barrier", [vp, vp]),
                         ("braid_comm_destroy", [vp])):
            getattr(self.lib, fn).argtypes = args

    @staticmethod
    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: braid_result {rc}")

    def call(self, coll, a, b):
        L, c, f = self.lib, self.comm, self.FLOAT32
        if coll == "all_reduce":
            rc = L.braid_allreduce(a.data_ptr(), a.data_ptr(), a.numel(), f,
                                   self.SUM, c, None)
        elif coll == "all_gather":
            rc = L.braid_allgather(a.data_ptr(), b.data_ptr(), a.numel(), f, c, None)
        elif coll == "reduce_scatter":
            rc = L.braid_reduce_scatter(a.data_ptr(), b.data_ptr(), b.numel(), f,
                                        self.SUM, c, None)
        else:
            rc = L.braid_broadcast(a.data_ptr(), a.data_ptr(), a.numel(), f, 0, c,
                                   None)
        self.check(rc, coll)

    def barrier(self):
        self.check(self.lib.braid_barrier(self.comm, None), "braid_barrier")

    def close(self):
        self.check(self.lib.braid_comm_destroy(self.comm), "braid_comm_destroy")


def rank_main(rank, args, tmp, out_path):
    import torch
    import torch.distributed as dist
    if "braid" in args.backends:
        import braid_torch  # noqa: F401  registers "braid"

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"),
                            rank=rank, world_size=args.ranks)
    groups = {"gloo": dist.group.WORLD}
    if "braid" in args.backends:
        groups["braid"] = dist.new_group(backend="braid")
    ws = args.ranks
    results = []
    names = args.backends
    if "braid" in args.backends:
        names += ("C",)
        capi = CApi(rank, ws, dist, torch)

    def barrier(name):
        if name == "C":
            capi.barrier()
        else:
            dist.barrier(group=groups[name])

    def op(coll, name, group, bufs):
        a, b = bufs
        if name == "C":
            capi.call(coll, a, b)
        elif coll == "all_reduce":
            dist.all_reduce(a, group=group)
        elif coll == "all_gather":
            if name == "gloo":   # gloo has no _allgather_base in torch 1.13
                dist.all_gather(list(b.chunk(ws)), a, group=group)
            else:
                dist.all_gather_into_tensor(b, a, group=group)
        elif coll == "reduce_scatter":
            if name == "gloo":   # nor reduce_scatter: all_reduce instead
                dist.all_reduce(a, group=group)
            else:
                dist.reduce_scatter_tensor(b, a, group=group)
        else:
            dist.broadcast(a, 0, group=group)

    perf = {}      # rank 0: braid-perf's times per collective and size
    perf_cmds = []
    for coll in args.colls:
        cases = []
        for size in args.sizes:
            n = size // 4
            if coll in ("all_gather", "reduce_scatter"):
                n -= n % ws
                if n == 0:
                    continue
            if coll == "all_gather":
                bufs = (torch.zeros(n // ws), torch.zeros(n))
            elif coll == "reduce_scatter":
                bufs = (torch.zeros(n), torch.zeros(n // ws))
            else:
                bufs = (torch.zeros(max(n, 1)), None)
            cases.append((size, bufs, iters_for(size, args.budget),
                          {name: [] for name in names}))
        perf[coll] = {}
        # Rounds: every size over each backend in turn, then braid-perf over
        # the same sizes (run by rank 0 while the others wait in the gloo
        # group's barrier): the three take turns, so that a slow minute of
        # this shared machine falls on all of them, and each shows its best
        # round.
        for r in range(args.repeat):
            for k, (size, bufs, iters, samples) in enumerate(cases):
                for name in names:
                    g = groups.get(name)
                    # the first size of a collective warms up longer: a
                    # group's first calls set up what later calls reuse
                    warm = args.warmup * 10 if k == 0 and r == 0 else min(args.warmup, iters)
                    for _ in range(warm):
                        op(coll, name, g, bufs)
                    barrier(name)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        op(coll, name, g, bufs)
                    dt = (time.perf_counter() - t0) / iters
                    t = torch.tensor([dt], dtype=torch.float64)
                    dist.all_reduce(t, group=groups["gloo"])
                    samples[name].append(t.item() / ws * 1e6)
            if rank == 0 and "braid" in args.backends and not args.no_braid_perf:
                times, cmd = braid_perf(args, coll, [c[0] for c in cases])
                for size, us in times.items():
                    perf[coll].setdefault(size, []).append(us)
                if r == 0:
                    perf_cmds.append(cmd)
            dist.barrier(group=groups["gloo"])
        for size, bufs, iters, samples in cases:
            row = {"coll": coll, "size": size, "iters": iters}
            for name in names:
                row[name] = min(samples[name])
            row["perf"] = min(perf[coll].get(size, [0.0])) or None
            results.append(row)
            if rank == 0:
                print(f"{coll:15s} {human(size):>9s} x{iters:<4d} " +
                      "  ".join(f"{b} {row[b]:10.2f} us" for b in names) +
                      (f"  braid-perf {row['perf']:10.2f} us" if row["perf"] else ""),
                      flush=True)
    if "braid" in args.backends:
        capi.close()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"rows": results, "perf_cmds": perf_cmds}, f)
    dist.barrier()
    dist.destroy_process_group()


def braid_perf(args, coll, sizes):
    """braid-perf's blocking-call times (us) for coll at `sizes`, and the
    command that measured them."""
    with tempfile.NamedTemporaryFile(suffix=".json") as js:
        cmd = [args.braidrun, "-n", str(args.ranks), args.braid_perf, coll,
               "-b", str(sizes[0]), "-e", str(sizes[-1]),
               "-f", str(args.factor), "-y", "1", "-w", str(args.perf_warmup),
               "-n", str(args.perf_iters)]
        subprocess.run(cmd + ["-J", js.name], check=True,
                       stdout=subprocess.DEVNULL)
        with open(js.name) as f:
            data = json.load(f)
    want = set(sizes)
    return ({r["size_bytes"]: r[PLACE[coll]]["time_us"] for r in data["results"]
             if r["size_bytes"] in want}, cmd)


def table(coll, rows):
    lines = [f"#### {coll}", "",
             "| size | braid-perf (us) | C call (us) | torch + braid (us) "
             "| torch + gloo (us) | torch over braid-perf | torch over C call "
             "| gloo / braid |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        p, c = r.get("perf"), r.get("C")
        b, g = r.get("braid"), r.get("gloo")
        cell = lambda v: f"{v:.1f}" if v else "-"  # noqa: E731
        over = lambda base: (f"{b - base:+.1f} us ({b / base:.2f}x)"  # noqa: E731
                             if base and b else "-")
        speed = f"{g / b:.1f}x" if g and b else "-"
        lines.append(f"| {human(r['size'])} | {cell(p)} | {cell(c)} | {cell(b)} | "
                     f"{cell(g)} | {over(p)} | {over(c)} | {speed} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build",
                    help="build folder (python/, tools/braidrun, perf/braid-perf)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="256M")
    ap.add_argument("-f", "--stepfactor", type=int, default=2)
    ap.add_argument("--sizes", help="comma-separated sizes instead of -b/-e/-f "
                    "(braid-perf then runs -f 2 over their range)")
    ap.add_argument("--collectives", default=",".join(COLLS))
    ap.add_argument("--warmup", type=int, default=20,
                    help="torch warm-up calls per size and backend (at most "
                    "the timed calls)")
    ap.add_argument("--repeat", type=int, default=5,
                    help="rounds (torch over each backend, then braid-perf, "
                    "taking turns); the best round is shown")
    ap.add_argument("--budget", default="256M",
                    help="bytes per size that set the timed calls (5 to 200)")
    ap.add_argument("--perf-iters", type=int, default=20)
    ap.add_argument("--perf-warmup", type=int, default=20)
    ap.add_argument("--no-braid-perf", action="store_true")
    ap.add_argument("--backends", default="braid,gloo")
    ap.add_argument("--md", help="also write the tables to this file")
    args = ap.parse_args()
    args.factor = args.stepfactor
    if args.sizes:
        args.sizes = sorted(parse_size(x) for x in args.sizes.split(","))
        args.factor = 2
    else:
        args.sizes = sizes(parse_size(args.minbytes), parse_size(args.maxbytes),
                           args.factor)
    args.budget = parse_size(args.budget)
    args.colls = [c for c in args.collectives.split(",") if c]
    for c in args.colls:
        if c not in COLLS:
            sys.exit(f"unknown collective {c}; one of {', '.join(COLLS)}")
    if args.backends not in ("braid,gloo", "gloo"):
        sys.exit("--backends: braid,gloo (or gloo alone, to try the script)")
    args.backends = tuple(args.backends.split(","))
    build = os.path.abspath(args.build)
    args.braidrun = os.path.join(build, "tools", "braidrun")
    args.braid_perf = os.path.join(build, "perf", "braid-perf")
    py = os.path.join(build, "python")
    sys.path.insert(0, py)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [py] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

    import torch
    import torch.multiprocessing as mp

    started = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "torch.json")
        mp.spawn(rank_main, nprocs=args.ranks, args=(args, tmp, out))
        with open(out) as f:
            res = json.load(f)
    rows = res["rows"]
    cmds = [" ".join(x.replace(build, args.build) for x in cmd)
            for cmd in res["perf_cmds"]]
    head = [f"{started:%Y-%m-%d %H:%M} UTC, {args.ranks} ranks on "
            f"{os.cpu_count()} cores ({platform.node()}), torch {torch.__version__}, "
            f"float32, blocking calls; best of {args.repeat} rounds, torch over "
            f"braid, torch over gloo and braid-perf taking turns; torch: "
            f"warm-up {args.warmup} ({args.warmup * 10} at the first size), "
            f"timed calls 5 to 200 per size; braid-perf: -w {args.perf_warmup} "
            f"-n {args.perf_iters}.", "",
            "    " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])]
    head += ["    " + c for c in cmds]
    body = [table(c, [r for r in rows if r["coll"] == c]) for c in args.colls]
    text = "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n"
    print()
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
