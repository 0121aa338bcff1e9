#!/usr/bin/env python3
"""braid against Open MPI and Gloo, side by side in one run, with ceilings.

Runs, for the same collectives, sizes, datatype (float32, sum) and rank count:
  braid-shm   braid over shared memory (BRAID_TRANSPORT=shm)
  braid-tcp   braid over TCP on loopback (BRAID_TRANSPORT=tcp)
  ompi-shm    Open MPI, mpirun --mca pml ob1 --mca btl self,vader
  ompi-tcp    Open MPI, mpirun --mca pml ob1 --mca btl tcp,self
  gloo-tcp    Gloo over its TCP transport on loopback
and the physical ceilings:
  mem-copy / mem-add   memcpy and c = a + b (float32) with 1 process and
                       with <nranks> processes at once (GB/s per process)
  tcp-pingpong / tcp-bidir   a loopback TCP connection between 2 processes
                       (one way, and both directions at once; GB/s per
                       direction)
Prints one table per collective (time, busbw, ratio braid/peer = peer time /
braid time, so > 1 means braid is faster), writes compare.csv and
compare.json, and draws compare.png (gnuplot) in --out.

How the calls are issued (--pattern, harness.h): warm (the default: warm-up,
barrier, timed calls in a row, nccl-tests' loop), first (each rank times its
first calls after init; each size is its own run of 100 calls, scaled by
--iters-scale), gap:G (G microseconds of computation before every call, only
the calls timed). --busy K keeps K processes spinning on the CPU for the
whole run (killed at the end, on errors and on ctrl-C). --real-use runs the
standard set of these patterns instead (realuse.py) and prints one Markdown
table for docs/PERFORMANCE.md.

braid's harness: the default warm sweep runs braid-perf (nccl-tests' loop
and options, as the published warm tables were made); every other pattern,
--real-use and --braid-harness bench run braid-bench, which shares its loop
code (harness.c) with the Open MPI and Gloo harnesses, so the three
libraries are timed by the same lines between their calls.

Python 3 standard library only. Every number keeps the command that made it
(compare.json "commands").
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

COLLS = ["allreduce", "allgather", "reduce_scatter", "broadcast"]
BRAID_NAME = {"allreduce": "all_reduce", "allgather": "all_gather",
              "reduce_scatter": "reduce_scatter", "broadcast": "broadcast"}
LIBS = ["braid-shm", "ompi-shm", "braid-tcp", "ompi-tcp", "gloo-tcp"]
PAIRS = [("braid-shm", "ompi-shm"), ("braid-tcp", "ompi-tcp"),
         ("braid-tcp", "gloo-tcp")]


def parse_size(s):
    s = str(s).strip()
    mult = 1
    if s and s[-1] in "kKmMgG":
        mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[s[-1].lower()]
        s = s[:-1]
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError("bad size %r" % s)
    if v < 0:
        raise argparse.ArgumentTypeError("negative size")
    return int(v * mult)


def human(n):
    for unit, sh in (("G", 30), ("M", 20), ("K", 10)):
        if n >= (1 << sh) and n % (1 << sh) == 0:
            return "%d%s" % (n >> sh, unit)
    return str(n)


def sizes(lo, hi):
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s = s * 2 if s else 1
    return out


# Iterations per size band: many for latency, few for bandwidth.
BANDS = [(0, 64 << 10, 1000, 100), ((64 << 10) + 1, 8 << 20, 50, 5),
         ((8 << 20) + 1, 1 << 62, 10, 2)]


POINTS = None  # --points: measure only these sizes
FIRST_CALLS = 100  # --pattern first: calls timed after init


def bands(lo, hi, scale, pattern="warm"):
    """(min, max, iters, warmup) sub-sweeps covering lo..hi (powers of 2),
    or one run per size of --points; for the first pattern one run per size
    (only then are its calls the first after init)."""
    out = []
    if pattern == "first":
        return [(p, p, max(1, int(FIRST_CALLS * scale)), 0)
                for p in (POINTS or sizes(lo, hi))]
    if POINTS:
        for p in POINTS:
            for blo, bhi, it, w in BANDS:
                if blo <= p <= bhi:
                    out.append((p, p, max(1, int(it * scale)),
                                max(0, int(w * scale))))
        return out
    for blo, bhi, it, w in BANDS:
        ss = [s for s in sizes(lo, hi) if blo <= s <= bhi]
        if ss:
            out.append((ss[0], ss[-1], max(1, int(it * scale)),
                        max(0, int(w * scale))))
    return out


class Runner:
    def __init__(self, args, log="compare.log"):
        self.args = args
        self.commands = []
        self.log = open(os.path.join(args.out, log), "w")

    def run(self, cmd, env=None, timeout=None):
        full_env = dict(os.environ)
        env_txt = ""
        if env:
            full_env.update(env)
            env_txt = " ".join("%s=%s" % kv for kv in sorted(env.items())) + " "
        text = env_txt + " ".join(cmd)
        self.commands.append(text)
        self.log.write("$ %s\n" % text)
        self.log.flush()
        if self.args.verbose:
            print("$ " + text, file=sys.stderr)
        try:
            p = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=timeout or self.args.timeout)
        except subprocess.TimeoutExpired:
            self.log.write("(timed out)\n")
            return 124, "", text
        self.log.write(p.stdout)
        self.log.flush()
        return p.returncode, p.stdout, text


def harness_rows(out):
    """(size, time_us, busbw, 6th column or None) of the harnesses' lines
    (harness.h), with or without braidrun's rank prefix; the 6th column is
    the first call alone (pattern first) or the median call (gap:G)."""
    rows = []
    for line in out.splitlines():
        f = line.split()
        if f and f[0].startswith("[") and f[0].endswith("]"):
            f = f[1:]
        if len(f) not in (5, 6) or not f[0].isdigit():
            continue
        try:
            v = [float(x) for x in f]
        except ValueError:
            continue
        rows.append((int(v[0]), v[2], v[4], v[5] if len(v) == 6 else None))
    return rows


def extra_field(pattern):
    """The name a harness line's 6th column is stored under."""
    return "first_us" if pattern == "first" else "median_us"


def store_rows(res, coll, key, out, text, pattern="warm"):
    for s, t, bus, extra in harness_rows(out):
        e = {"time_us": t, "busbw": bus, "cmd": text}
        if extra is not None:
            e[extra_field(pattern)] = extra
        keep_best(res[coll].setdefault(key, {}), s, e)


def pattern_arg(pattern):
    """The harnesses' 6th argument: none for warm (their 5-argument form)."""
    return [] if pattern == "warm" else [pattern]


class Busy:
    """K processes spinning on the CPU at the benchmark's priority (nice 0)
    from entry to exit. Each also ends by itself once this driver is gone,
    so none outlives a killed run."""
    LOOP = ("import os\np = os.getppid()\nwhile os.getppid() == p:\n"
            "    for _ in range(100000):\n        pass\n")

    def __init__(self, k, runner=None):
        self.k, self.procs, self.runner = k, [], runner

    def __enter__(self):
        try:
            for _ in range(self.k):
                self.procs.append(subprocess.Popen(
                    ["nice", "-n", "0", sys.executable, "-c", self.LOOP],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        if self.k and self.runner:
            self.runner.log.write("# %d busy processes: %s\n" % (
                self.k, " ".join(str(p.pid) for p in self.procs)))
        if self.k:
            time.sleep(0.3)  # on the CPU before the first run
        return self

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []

    def __exit__(self, *exc):
        self.stop()
        return False


def on_sigterm(_sig, _frame):
    """SIGTERM and SIGHUP unwind like ctrl-C: busy processes are stopped."""
    raise KeyboardInterrupt


def parse_lines(out, ncols):
    rows = []
    for line in out.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split()
        if len(f) != ncols:
            continue
        try:
            rows.append([float(x) for x in f])
        except ValueError:
            continue
    return rows


def table_rows(out):
    """(size, time_us, busbw) of braid-perf's out-of-place table columns."""
    rows = []
    for line in out.splitlines():
        f = line.split()
        if f and f[0].startswith("[") and f[0].endswith("]"):
            f = f[1:]  # braidrun's rank prefix
        if len(f) < 9 or not f[0].isdigit():
            continue
        try:
            rows.append((int(f[0]), float(f[5]), float(f[7])))
        except ValueError:
            continue
    return rows


def find_exe(build, names):
    for n in names:
        for d in (os.path.join(build, "perf", "compare"),
                  os.path.join(build, "perf"), os.path.join(build, "tools"),
                  build):
            p = os.path.join(d, n)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        p = shutil.which(n)
        if p:
            return p
    return None


def mpirun_base(n):
    base = ["mpirun", "-np", str(n)]
    if os.geteuid() == 0:
        base += ["--allow-run-as-root"]
    base += ["--oversubscribe", "--bind-to", "none"]
    return base


def keep_best(d, s, entry):
    """Several repeats: keep the fastest (least disturbed) measurement; the
    first call alone (first_us) and the median call (median_us) are kept
    as their own best."""
    old = d.get(s)
    extra = {k: min(x[k] for x in (old, entry) if x and k in x)
             for k in ("first_us", "median_us")
             if any(x and k in x for x in (old, entry))}
    if old is None or entry["time_us"] < old["time_us"]:
        d[s] = old = dict(entry)
    old.update(extra)


def run_bench_braid(r, exe, launcher, coll, transport, sweeps, n, res,
                    pattern="warm"):
    """braid-bench (the harness loop shared with the peers) over one
    transport."""
    key = "braid-" + transport
    for blo, bhi, it, w in sweeps:
        args = [exe, coll, str(blo), str(bhi), str(it), str(w)] + \
            pattern_arg(pattern)
        if launcher[0] == "braidrun":
            cmd = [launcher[1], "-n", str(n)] + args
        else:
            cmd = mpirun_base(n) + ["-x", "BRAID_TRANSPORT"] + args
        rc, out, text = r.run(cmd, env={"BRAID_TRANSPORT": transport})
        if rc != 0:
            res.setdefault("errors", []).append(
                "%s %s: exit %d (%s)" % (key, coll, rc, text))
        store_rows(res, coll, key, out, text, pattern)


def run_braid(r, exe, launcher, coll, transport, sweeps, n, res):
    """braid-perf, out-of-place busbw, over one transport."""
    key = "braid-" + transport
    tmp = tempfile.mkdtemp(prefix="braid-compare-")
    try:
        for blo, bhi, it, w in sweeps:
            js = os.path.join(tmp, "r.json")
            perf = [exe, BRAID_NAME[coll], "-b", str(blo), "-e", str(bhi),
                    "-f", "2", "-n", str(it), "-w", str(w), "-c", "0",
                    "-y", "1", "-d", "float32", "-o", "sum",
                    "-T", str(r.args.braid_timeout), "-J", js]
            if launcher[0] == "braidrun":
                cmd = [launcher[1], "-n", str(n)] + perf
            else:
                cmd = mpirun_base(n) + ["-x", "BRAID_TRANSPORT"] + perf
            rc, out, text = r.run(cmd, env={"BRAID_TRANSPORT": transport})
            if rc != 0 or not os.path.exists(js):
                res.setdefault("errors", []).append(
                    "%s %s: exit %d (%s)" % (key, coll, rc, text))
                # Keep the rows printed before the failure.
                for row in table_rows(out):
                    keep_best(res[coll].setdefault(key, {}), row[0],
                              {"time_us": row[1], "busbw": row[2],
                               "cmd": text})
                continue
            with open(js) as f:
                data = json.load(f)
            for row in data.get("results", []):
                oop = row.get("out_of_place")
                if not oop:
                    continue
                keep_best(res[coll].setdefault(key, {}), row["size_bytes"],
                          {"time_us": oop["time_us"],
                           "busbw": oop["busbw_GBps"], "cmd": text})
            os.unlink(js)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_ompi(r, exe, coll, btl, sweeps, n, res, pattern="warm"):
    key = "ompi-shm" if "vader" in btl else "ompi-tcp"
    for blo, bhi, it, w in sweeps:
        cmd = mpirun_base(n) + ["--mca", "pml", "ob1", "--mca", "btl", btl]
        if "tcp" in btl:
            cmd += ["--mca", "btl_tcp_if_include", "lo"]
        cmd += [exe, coll, str(blo), str(bhi), str(it), str(w)] + \
            pattern_arg(pattern)
        rc, out, text = r.run(cmd)
        if rc != 0 and "vader" in btl:
            # Containers often forbid cross-memory attach: retry without it.
            rc, out, text = r.run(
                cmd, env={"OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
        if rc != 0:
            res.setdefault("errors", []).append(
                "%s %s: exit %d (%s)" % (key, coll, rc, text))
        store_rows(res, coll, key, out, text, pattern)


def run_gloo(r, exe, coll, sweeps, n, res, pattern="warm"):
    key = "gloo-tcp"
    for blo, bhi, it, w in sweeps:
        store = tempfile.mkdtemp(prefix="gloo-store-")
        args = [exe, coll, str(blo), str(bhi), str(it), str(w)] + \
            pattern_arg(pattern)
        text = "RANK=<r> SIZE=%d GLOO_STORE_DIR=%s %s" % (
            n, store, " ".join(args))
        r.commands.append(text)
        r.log.write("$ %s\n" % text)
        procs = []
        for rank in range(n):
            env = dict(os.environ, RANK=str(rank), SIZE=str(n),
                       GLOO_STORE_DIR=store)
            procs.append(subprocess.Popen(
                args, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True))
        outs, rc = [], 0
        deadline = time.time() + r.args.timeout
        for p in procs:
            try:
                o, _ = p.communicate(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                o, rc = "", 124
            outs.append(o)
            rc = rc or p.returncode
        shutil.rmtree(store, ignore_errors=True)
        r.log.write(outs[0] if outs else "")
        if rc != 0:
            res.setdefault("errors", []).append(
                "%s %s: exit %s (%s)" % (key, coll, rc, text))
        store_rows(res, coll, key, outs[0], text, pattern)


def run_ceilings(r, build, lo, hi, n, ceil):
    mem = find_exe(build, ["braid-membw"])
    tcp = find_exe(build, ["braid-tcpbw"])

    def put(k, s, t, g, text):
        keep_best(ceil.setdefault(k, {}), int(s),
                  {"time_us": t, "GBps": g, "cmd": text})
    if mem:
        for procs in sorted({1, n}):
            rc, out, text = r.run([mem, str(lo), str(hi), str(procs)])
            for s, cu, cg, au, ag in parse_lines(out, 5):
                put("mem-copy-%dp" % procs, s, cu, cg, text)
                put("mem-add-%dp" % procs, s, au, ag, text)
    if tcp:
        rc, out, text = r.run([tcp, str(lo), str(hi)])
        for s, pu, pg, bu, bg in parse_lines(out, 5):
            put("tcp-pingpong", s, pu, pg, text)
            put("tcp-bidir", s, bu, bg, text)


def fmt_t(x):
    if x is None:
        return "-"
    return "%.0f" % x if x >= 10000 else "%.1f" % x if x >= 100 else "%.2f" % x


def fmt_r(x):
    return "-" if x is None else "%.2f" % x if x >= 0.1 else "%.3f" % x


def fmt_b(x):
    return "-" if x is None else "%.3f" % x


def ratio(res, coll, a, b, s):
    ra = res[coll].get(a, {}).get(s)
    rb = res[coll].get(b, {}).get(s)
    if not ra or not rb or not ra["time_us"]:
        return None
    return rb["time_us"] / ra["time_us"]


def print_table(res, ceil, colls, szs, n, f):
    mem_key = "mem-copy-%dp" % n
    for coll in colls:
        f.write("\n# %s, float32 sum, %d ranks: time (us) and busbw (GB/s); "
                "ratio = peer time / braid time (> 1: braid faster)\n"
                % (coll, n))
        hdr = ["size"]
        for lib in LIBS:
            hdr += [lib + " us", "busbw"]
        hdr += ["shm/ompi", "tcp/ompi", "tcp/gloo", "memcpy GB/s",
                "tcp GB/s"]
        widths = [8] + [11, 7] * len(LIBS) + [8, 8, 8, 11, 8]
        f.write(" ".join(h.rjust(w) for h, w in zip(hdr, widths)) + "\n")
        for s in szs:
            cells = [human(s)]
            for lib in LIBS:
                v = res[coll].get(lib, {}).get(s)
                cells += [fmt_t(v and v["time_us"]), fmt_b(v and v["busbw"])]
            for a, b in PAIRS:
                x = ratio(res, coll, a, b, s)
                cells.append(fmt_r(x))
            m = ceil.get(mem_key, {}).get(s)
            t = ceil.get("tcp-bidir" if coll != "broadcast"
                         else "tcp-pingpong", {}).get(s)
            cells += [fmt_b(m and m["GBps"]), fmt_b(t and t["GBps"])]
            f.write(" ".join(c.rjust(w) for c, w in zip(cells, widths)) + "\n")


def write_csv(path, res, ceil, colls, szs, n):
    mem_keys = sorted(ceil.keys())
    with open(path, "w") as f:
        cols = ["collective", "nranks", "size_bytes"]
        for lib in LIBS:
            cols += [lib + "_time_us", lib + "_busbw_GBps"]
        cols += ["ratio_%s_vs_%s" % (a, b) for a, b in PAIRS]
        cols += [k + "_GBps" for k in mem_keys]
        f.write(",".join(cols) + "\n")
        for coll in colls:
            for s in szs:
                row = [coll, str(n), str(s)]
                for lib in LIBS:
                    v = res[coll].get(lib, {}).get(s)
                    row += ["%.3f" % v["time_us"] if v else "",
                            "%.4f" % v["busbw"] if v else ""]
                for a, b in PAIRS:
                    x = ratio(res, coll, a, b, s)
                    row.append("" if x is None else "%.4f" % x)
                for k in mem_keys:
                    v = ceil[k].get(s)
                    row.append("%.4f" % v["GBps"] if v else "")
                f.write(",".join(row) + "\n")


def write_markdown(path, res, ceil, colls, szs, n):
    """The table as Markdown, one section per collective."""
    with open(path, "w") as f:
        for coll in colls:
            f.write("\n**%s** (%d ranks, float32, sum): time in us, busbw "
                    "in GB/s; ratio = peer time / braid time\n\n" % (coll, n))
            head = ["size"]
            for lib in LIBS:
                head += [lib + " us", lib + " busbw"]
            head += ["shm/ompi", "tcp/ompi", "tcp/gloo",
                     "mem-copy-%dp GB/s" % n,
                     "tcp-pingpong GB/s" if coll == "broadcast"
                     else "tcp-bidir GB/s"]
            f.write("| " + " | ".join(head) + " |\n")
            f.write("|" + "---|" * len(head) + "\n")
            for s in szs:
                cells = [human(s)]
                for lib in LIBS:
                    v = res[coll].get(lib, {}).get(s)
                    cells += [fmt_t(v and v["time_us"]),
                              fmt_b(v and v["busbw"])]
                for a, b in PAIRS:
                    x = ratio(res, coll, a, b, s)
                    cells.append(fmt_r(x))
                m = ceil.get("mem-copy-%dp" % n, {}).get(s)
                t = ceil.get("tcp-pingpong" if coll == "broadcast"
                             else "tcp-bidir", {}).get(s)
                cells += [fmt_b(m and m["GBps"]), fmt_b(t and t["GBps"])]
                f.write("| " + " | ".join(cells) + " |\n")


def plot(path, res, ceil, colls, n, r):
    gp = shutil.which("gnuplot")
    if not gp:
        print("compare: gnuplot not found (Debian package gnuplot-nox); "
              "no plot", file=sys.stderr)
        return False
    tmp = tempfile.mkdtemp(prefix="compare-plot-")
    series = []
    styles = {"braid-shm": "lc rgb '#d62728' lw 3 pt 7",
              "braid-tcp": "lc rgb '#ff7f0e' lw 3 pt 7",
              "ompi-shm": "lc rgb '#1f77b4' lw 2 pt 5",
              "ompi-tcp": "lc rgb '#17becf' lw 2 pt 5",
              "gloo-tcp": "lc rgb '#2ca02c' lw 2 pt 9"}
    script = ["set terminal pngcairo size 1600,1100 font 'Sans,10' noenhanced",
              "set output '%s'" % path,
              "set multiplot layout %d,%d title 'busbw, float32 sum, %d "
              "ranks (dashed: ceilings)'" % ((len(colls) + 1) // 2,
                                              2 if len(colls) > 1 else 1, n),
              "set logscale x 2", "set logscale y 10", "set grid",
              "set format x '%.0b%B'", "set key right bottom font ',9'",
              "set xlabel 'size (bytes)'", "set ylabel 'busbw (GB/s)'"]
    for coll in colls:
        plots = []
        for lib in LIBS:
            d = res[coll].get(lib)
            if not d:
                continue
            fn = os.path.join(tmp, "%s-%s.dat" % (coll, lib))
            with open(fn, "w") as f:
                for s in sorted(d):
                    if d[s]["busbw"] > 0:
                        f.write("%d %g\n" % (s, d[s]["busbw"]))
            plots.append("'%s' using 1:2 with linespoints %s ps 0.7 "
                         "title '%s'" % (fn, styles[lib], lib))
        ck = ["mem-copy-%dp" % n,
              "tcp-pingpong" if coll == "broadcast" else "tcp-bidir"]
        for k, color in zip(ck, ["#7f7f7f", "#bcbd22"]):
            d = ceil.get(k)
            if not d:
                continue
            fn = os.path.join(tmp, "%s-%s.dat" % (coll, k))
            with open(fn, "w") as f:
                for s in sorted(d):
                    if d[s]["GBps"] > 0:
                        f.write("%d %g\n" % (s, d[s]["GBps"]))
            plots.append("'%s' using 1:2 with lines dt 2 lw 2 lc rgb '%s' "
                         "title 'ceiling %s'" % (fn, color, k))
        script.append("set title '%s'" % coll)
        if plots:
            script.append("plot " + ", ".join(plots))
        series.append(coll)
    script.append("unset multiplot")
    gpf = os.path.join(tmp, "plot.gp")
    with open(gpf, "w") as f:
        f.write("\n".join(script) + "\n")
    rc, out, text = r.run([gp, gpf])
    shutil.rmtree(tmp, ignore_errors=True)
    if rc != 0:
        print("compare: gnuplot failed:\n" + out, file=sys.stderr)
        return False
    return True


def rerender(args):
    with open(args.from_json) as f:
        d = json.load(f)
    n = d["nranks"]
    res = {c: {lib: {int(s): v for s, v in e.items()}
               for lib, e in libs.items()}
           for c, libs in d["results"].items()}
    ceil = {k: {int(s): v for s, v in e.items()}
            for k, e in d["ceilings"].items()}
    colls = [c for c in COLLS if c in res]
    szs = sorted({s for c in res.values() for e in c.values() for s in e})
    os.makedirs(args.out, exist_ok=True)
    r = Runner(args, "compare-redraw.log")
    print_table(res, ceil, colls, szs, n, sys.stdout)
    write_csv(os.path.join(args.out, "compare.csv"), res, ceil, colls, szs, n)
    write_markdown(os.path.join(args.out, "compare.md"), res, ceil, colls,
                   szs, n)
    png = os.path.join(args.out, "compare.png")
    if plot(png, res, ceil, colls, n, r):
        print("# plot: " + png)
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=None,
                    help="CMake build directory (default: the directory this "
                    "script was copied into, or ../../build)")
    ap.add_argument("--collectives", default=",".join(COLLS),
                    help="comma-separated subset of " + ",".join(COLLS))
    ap.add_argument("--min", type=parse_size, default=8,
                    help="smallest size, K/M/G suffixes (8)")
    ap.add_argument("--max", type=parse_size, default=256 << 20,
                    help="largest size (256M); sizes double in between")
    ap.add_argument("--points", default=None,
                    help="comma-separated sizes to measure instead of the "
                    "doubling sweep, e.g. 8,64K,1M,64M,256M")
    ap.add_argument("--nranks", type=int, default=2,
                    help="ranks of every library (2)")
    ap.add_argument("--only", default="braid,ompi,gloo,ceiling",
                    help="which of braid,ompi,gloo,ceiling to run")
    ap.add_argument("--iters-scale", type=float, default=1.0,
                    help="scale the iteration counts (0.1 for a quick look)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="run everything N times, interleaved, and keep the "
                    "fastest time per size (tames a busy machine; default 1 "
                    "for the warm sweep, 3 with --pattern, --busy or "
                    "--real-use)")
    ap.add_argument("--pattern", default="warm",
                    help="how the calls are issued: warm (default), first "
                    "(the first calls after init), gap:G (G us of compute "
                    "before each call); see harness.h")
    ap.add_argument("--busy", type=int, default=0, metavar="K",
                    help="keep K processes spinning on the CPU during the "
                    "runs (nice 0), stopped at the end")
    ap.add_argument("--braid-harness", choices=["perf", "bench"],
                    default=None,
                    help="braid's program: braid-perf (default for the "
                    "warm pattern) or braid-bench (the peers' loop; always "
                    "for the other patterns)")
    ap.add_argument("--real-use", action="store_true",
                    help="run the standard real-use set (realuse.py: warm, "
                    "first 100 calls, gap:1000, busy K=1 and 2, 4 ranks, "
                    "1 MiB) and print its Markdown table")
    ap.add_argument("--out", default="compare-out",
                    help="directory for compare.{csv,md,json,log,png}")
    ap.add_argument("--timeout", type=int, default=900,
                    help="seconds allowed for one command")
    ap.add_argument("--braid-timeout", type=int, default=60,
                    help="braid-perf -T: seconds before a stuck call fails")
    ap.add_argument("--from-json", default=None,
                    help="redraw the table, CSV, Markdown and plot from a "
                    "compare.json of an earlier run (runs nothing)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    colls = [c for c in args.collectives.split(",") if c]
    for c in colls:
        if c not in COLLS:
            ap.error("unknown collective %r (expected %s)" %
                     (c, ", ".join(COLLS)))
    only = set(x for x in args.only.split(",") if x)
    if only - {"braid", "ompi", "gloo", "ceiling"}:
        ap.error("--only takes braid, ompi, gloo, ceiling")
    if args.min > args.max:
        ap.error("--min is larger than --max")
    global POINTS
    if args.from_json:
        return rerender(args)
    if not re.fullmatch(r"warm|first|gap:[0-9]+", args.pattern):
        ap.error("--pattern takes warm, first or gap:<microseconds>")
    if args.busy < 0 or args.nranks < 1:
        ap.error("--busy and --nranks take counts")
    if args.repeat is None:
        plain = args.pattern == "warm" and not args.busy
        args.repeat = 1 if plain and not args.real_use else 3
    harness = args.braid_harness or (
        "perf" if args.pattern == "warm" else "bench")
    if harness == "perf" and args.pattern != "warm":
        ap.error("braid-perf has no --pattern; use --braid-harness bench")
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGHUP, on_sigterm)
    if args.points:
        try:
            POINTS = sorted(parse_size(x) for x in args.points.split(",") if x)
        except argparse.ArgumentTypeError as e:
            ap.error("--points: %s" % e)
        args.min, args.max = POINTS[0], POINTS[-1]
    build = args.build
    if not build:
        cand = os.path.dirname(os.path.dirname(here))
        build = cand if os.path.exists(os.path.join(cand, "CMakeCache.txt")) \
            else os.path.join(here, "..", "..", "build")
    os.makedirs(args.out, exist_ok=True)
    if args.real_use:
        import realuse
        return realuse.main(args, sys.modules[__name__], build)
    r = Runner(args)
    res = {c: {} for c in colls}
    ceil = {}
    n = args.nranks

    perf = find_exe(build, ["braid-perf" if harness == "perf"
                            else "braid-bench"])
    braidrun = find_exe(build, ["braidrun"])
    mpi = find_exe(build, ["braid-mpi-bench"])
    gloo = find_exe(build, ["braid-gloo-bench"])
    launcher = ("braidrun", braidrun) if braidrun else ("mpirun", None)
    skipped = []
    t0 = time.time()
    pat = args.pattern
    sweeps = bands(args.min, args.max, args.iters_scale, pat)
    with Busy(args.busy, r):
        for _rep, coll in [(k, c) for k in range(max(1, args.repeat))
                           for c in colls]:
            if "braid" in only:
                if perf and (braidrun or shutil.which("mpirun")):
                    for tp in ("shm", "tcp"):
                        if harness == "perf":
                            run_braid(r, perf, launcher, coll, tp, sweeps, n,
                                      res)
                        else:
                            run_bench_braid(r, perf, launcher, coll, tp,
                                            sweeps, n, res, pat)
                else:
                    skipped.append("braid (braid-%s or a launcher not found)"
                                   % harness)
            if "ompi" in only:
                if mpi and shutil.which("mpirun"):
                    for btl in ("self,vader", "tcp,self"):
                        run_ompi(r, mpi, coll, btl, sweeps, n, res, pat)
                else:
                    skipped.append("Open MPI (braid-mpi-bench not built)")
            if "gloo" in only:
                if gloo:
                    run_gloo(r, gloo, coll, sweeps, n, res, pat)
                else:
                    skipped.append("Gloo (braid-gloo-bench not built)")
    if "ceiling" in only:
        for _rep in range(max(1, args.repeat)):
            run_ceilings(r, build, args.min, args.max, n, ceil)

    szs = POINTS or sizes(args.min, args.max)
    print("# braid vs Open MPI vs Gloo, %d ranks, host %s, %d CPUs, "
          "%.0f s, pattern %s, %d busy processes, best of %d" % (
              n, os.uname().nodename, os.cpu_count() or 0,
              time.time() - t0, pat, args.busy, args.repeat))
    for s in sorted(set(skipped)):
        print("# skipped: " + s)
    errors = res.pop("errors", [])
    for e in errors:
        print("# error: " + e)
    print_table(res, ceil, colls, szs, n, sys.stdout)
    if pat != "warm":
        field = extra_field(pat)
        print("\n# %s, mean over ranks:" % (
            "the first call alone (first_call_us)" if pat == "first" else
            "the median call (median_us)"))
        print_table({c: {lib: {s: dict(v, time_us=v.get(field, 0))
                               for s, v in d.items()}
                         for lib, d in res[c].items()} for c in colls},
                    {}, colls, szs, n, sys.stdout)
    print("\n# ceilings (GB/s per process / per direction):")
    for k in sorted(ceil):
        pts = ", ".join("%s %.2f" % (human(s), ceil[k][s]["GBps"])
                        for s in sorted(ceil[k])
                        if s in (8, 64 << 10, 1 << 20, 64 << 20, 256 << 20))
        print("#   %-16s %s" % (k, pts))
    write_csv(os.path.join(args.out, "compare.csv"), res, ceil, colls, szs, n)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump({"nranks": n, "dtype": "float32", "op": "sum",
                   "pattern": pat, "busy": args.busy,
                   "host": os.uname().nodename, "cpus": os.cpu_count(),
                   "results": {c: {lib: {str(s): v for s, v in d.items()}
                                   for lib, d in res[c].items()}
                               for c in colls},
                   "ceilings": {k: {str(s): v for s, v in d.items()}
                                for k, d in ceil.items()},
                   "skipped": sorted(set(skipped)), "errors": errors,
                   "commands": r.commands}, f, indent=1)
    write_markdown(os.path.join(args.out, "compare.md"), res, ceil, colls,
                   szs, n)
    png = os.path.join(args.out, "compare.png")
    if plot(png, res, ceil, colls, n, r):
        print("# plot: " + png)
    print("# table: %s, %s; commands: %s" % (
        os.path.join(args.out, "compare.csv"),
        os.path.join(args.out, "compare.json"),
        os.path.join(args.out, "compare.log")))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
