"""compare.py --real-use: the standard set of real-use patterns, one table.

Small calls as a training job issues them, not only nccl-tests' warm loop:

  warm                 8 B, 1000 timed calls after 100 warm-up calls
  first 100 calls      8 B, each rank times its first 100 calls after init
                       (no warm-up, no barrier); also the first call alone
  gap 1 ms             8 B, 1 ms of computation before every call (200
                       timed, 20 warm-up), only the calls timed; also the
                       median call (a few calls that meet a descheduled
                       peer move the mean)
  busy K=1, busy K=2   8 B warm (200 + 20) while K processes spin on the CPU
  4 ranks              8 B warm (200 + 20) with 4 ranks (on a 2-core machine:
                       twice as many ranks as cores); 16 B for allgather and
                       reduce_scatter, one float32 per rank
  1 MiB                allgather and broadcast, warm (50 + 5)

for allreduce, allgather, reduce_scatter and broadcast, each through the
same harness loop (harness.c): braid-bench over shm and TCP, braid-mpi-bench
over vader and TCP, braid-gloo-bench over TCP. Every cell is the best of
--repeat (default 3) repetitions, interleaved: each repetition runs the
whole set once. Writes realuse.md (the table), realuse.json (every number
with its command) and realuse.log (every command and its output) in --out.
"""
import json
import os
import shutil
import subprocess
import sys
import time

ALL = ["allreduce", "allgather", "reduce_scatter", "broadcast"]
LIBS = ["braid-shm", "ompi-shm", "braid-tcp", "ompi-tcp", "gloo-tcp"]

# (label, pattern, busy processes, ranks, bytes, collectives, iters, warmup)
SCENARIOS = [
    ("warm", "warm", 0, 2, 8, ALL, 1000, 100),
    ("first 100 calls", "first", 0, 2, 8, ALL, 100, 0),
    ("gap 1 ms", "gap:1000", 0, 2, 8, ALL, 200, 20),
    ("busy K=1", "warm", 1, 2, 8, ALL, 200, 20),
    ("busy K=2", "warm", 2, 2, 8, ALL, 200, 20),
    ("4 ranks", "warm", 0, 4, 8, ALL, 200, 20),
    ("1 MiB", "warm", 0, 2, 1 << 20, ["allgather", "broadcast"], 50, 5),
]


def source_state(build):
    """The commit of the source tree the build came from, and the files of
    the library (include/, src/, transports/, collectives/) that differ
    from it."""
    src = None
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    src = line.split("=", 1)[1].strip()
    except OSError:
        pass
    if not src:
        return "unknown", []

    def git(*a):
        p = subprocess.run(["git", "-C", src] + list(a), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return p.stdout.strip() if p.returncode == 0 else ""
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "include", "src",
                "transports", "collectives")
    return commit, [line[3:] for line in dirty.splitlines()]


def size_of(coll, size, nranks):
    """Bytes of one call: at least one float32 per rank where the size
    counts every rank's part (allgather, reduce_scatter with 4 ranks: 16)."""
    if coll in ("allgather", "reduce_scatter"):
        return max(size, 4 * nranks)
    return size


def label_of(sc):
    label, _p, _b, nranks, _s, _c, _i, _w = sc
    if label == "4 ranks":
        return "%d ranks on %d cores" % (nranks, os.cpu_count() or 0)
    return label


def run_set(args, cmp, build, r, res):
    """One repetition of every scenario, collective and library."""
    bench = cmp.find_exe(build, ["braid-bench"])
    braidrun = cmp.find_exe(build, ["braidrun"])
    mpi = cmp.find_exe(build, ["braid-mpi-bench"])
    gloo = cmp.find_exe(build, ["braid-gloo-bench"])
    launcher = ("braidrun", braidrun) if braidrun else ("mpirun", None)
    have_mpirun = shutil.which("mpirun") is not None
    skipped = set()
    for sc in SCENARIOS:
        label, pattern, busy, n, size, colls, it, w = sc
        sres = res.setdefault(label_of(sc), {c: {} for c in colls})
        with cmp.Busy(busy, r):
            for coll in colls:
                b = size_of(coll, size, n)
                sweeps = [(b, b, it, w)]
                if bench and (braidrun or have_mpirun):
                    for tp in ("shm", "tcp"):
                        cmp.run_bench_braid(r, bench, launcher, coll, tp,
                                            sweeps, n, sres, pattern)
                else:
                    skipped.add("braid (braid-bench or a launcher not found)")
                if mpi and have_mpirun:
                    for btl in ("self,vader", "tcp,self"):
                        cmp.run_ompi(r, mpi, coll, btl, sweeps, n, sres,
                                     pattern)
                else:
                    skipped.add("Open MPI (braid-mpi-bench not built)")
                if gloo:
                    cmp.run_gloo(r, gloo, coll, sweeps, n, sres, pattern)
                else:
                    skipped.add("Gloo (braid-gloo-bench not built)")
    return skipped


def cell(d, lib, size, field):
    v = d.get(lib, {}).get(size)
    return v.get(field) if v else None


def ratio(cmp, peer, braid):
    if peer is None or not braid:
        return "-"
    return cmp.fmt_r(peer / braid)


def table(cmp, res):
    """The Markdown table: time in us per library, ratio = peer / braid."""
    head = ["pattern", "collective", "size", "braid-shm us", "ompi-shm us",
            "ompi-shm / braid-shm", "braid-tcp us", "ompi-tcp us",
            "gloo-tcp us", "ompi-tcp / braid-tcp", "gloo-tcp / braid-tcp"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sc in SCENARIOS:
        label, pattern, _b, n, size, colls, _i, _w = sc
        rows = [(label_of(sc), "time_us")]
        if pattern == "first":
            rows.append(("first call alone", "first_us"))
        elif pattern.startswith("gap:"):
            rows.append((label_of(sc) + ", median call", "median_us"))
        for name, field in rows:
            for coll in colls:
                d = res.get(label_of(sc), {}).get(coll, {})
                b = size_of(coll, size, n)
                t = {lib: cell(d, lib, b, field) for lib in LIBS}
                cells = [name, coll, cmp.human(b)]
                cells += [cmp.fmt_t(t["braid-shm"]), cmp.fmt_t(t["ompi-shm"]),
                          ratio(cmp, t["ompi-shm"], t["braid-shm"]),
                          cmp.fmt_t(t["braid-tcp"]), cmp.fmt_t(t["ompi-tcp"]),
                          cmp.fmt_t(t["gloo-tcp"]),
                          ratio(cmp, t["ompi-tcp"], t["braid-tcp"]),
                          ratio(cmp, t["gloo-tcp"], t["braid-tcp"])]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def loadavg():
    try:
        return "%.2f" % os.getloadavg()[0]
    except OSError:
        return "?"


def main(args, cmp, build):
    """compare.py's --real-use; cmp is the compare module."""
    r = cmp.Runner(args, "realuse.log")
    if args.timeout == 900:
        args.timeout = 300  # one small run; a hang should not cost 15 min
    commit, dirty = source_state(build)
    load0, t0 = loadavg(), time.time()
    res = {}
    skipped = set()
    for _rep in range(max(1, args.repeat)):
        skipped |= run_set(args, cmp, build, r, res)
    errors = []
    for sres in res.values():
        errors += sres.pop("errors", [])
    md = table(cmp, res)
    head = ("Real use, float32 sum, best of %d interleaved repetitions; "
            "host %s, %d CPUs; commit %s%s; %s UTC; load average %s at the "
            "start, %s at the end; %.0f s\n" % (
                args.repeat, os.uname().nodename, os.cpu_count() or 0,
                commit, " (uncommitted changes: %s)" % ", ".join(dirty)
                if dirty else "", time.strftime("%Y-%m-%d %H:%M",
                                                 time.gmtime(t0)),
                load0, loadavg(), time.time() - t0))
    print("# " + head)
    for s in sorted(skipped):
        print("# skipped: " + s)
    for e in errors:
        print("# error: " + e)
    print(md)
    with open(os.path.join(args.out, "realuse.md"), "w") as f:
        f.write(head + "\n" + md)
    with open(os.path.join(args.out, "realuse.json"), "w") as f:
        json.dump({"header": head, "commit": commit, "dirty": dirty,
                   "scenarios": [list(sc[:5]) + [sc[5], sc[6], sc[7]]
                                 for sc in SCENARIOS],
                   "results": {lab: {c: {lib: {str(s): v
                                               for s, v in e.items()}
                                         for lib, e in libs.items()}
                                     for c, libs in sres.items()}
                               for lab, sres in res.items()},
                   "skipped": sorted(skipped), "errors": errors,
                   "commands": r.commands}, f, indent=1)
    print("# table: %s; numbers and commands: %s; log: %s" % (
        os.path.join(args.out, "realuse.md"),
        os.path.join(args.out, "realuse.json"),
        os.path.join(args.out, "realuse.log")), file=sys.stderr)
    return 1 if errors else 0
