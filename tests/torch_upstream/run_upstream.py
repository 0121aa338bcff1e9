#!/usr/bin/python3
"""Runs torch's own distributed tests (DistributedTest._DistTestBase) over one
backend at one world size.

  run_upstream.py --backend braid --world-size 2              # every test
  run_upstream.py --backend braid --world-size 3 --list must_pass.txt
  run_upstream.py --backend gloo --world-size 2 --tests test_barrier,test_gather

Each test starts --world-size ranks (torch's MultiProcessTestCase) that
rendezvous through a file:// init method, as upstream's own runs do. With
--start spawn (the default, upstream's way) each rank is a fresh
interpreter that imports torch; --start fork forks them from this process,
which has imported torch and the backend already: the same tests, without
the 2 to 3 s that each test's interpreters take to start on a 2-core
machine. A
backend other than torch's own is opted into torch's feature groups
"plugin", "ddp" and "subgroup", and runs the few tests that torch gates to
another backend by name only (upstream_suite.OPT_IN_REASONS). One line
per test: PASS, FAIL or SKIP with the reason (a reason given inside a rank
included), then a count.

With --list, the tests are those the list names for this world size, and
the run fails unless every one of them ran and passed: a failure, a skip,
a name the suite lacks or a count of passes other than the list's all fail
it.
--report writes one TSV row per test (name, outcome, seconds, reason).

Use /usr/bin/python3: it is the interpreter that sees Debian's torch.
"""
import argparse
import atexit
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_list(path, world_size):
    """Names listed for world_size. A line is `test_name WS [WS...]`;
    `#` starts a comment."""
    names = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 2 or not all(w.isdigit() for w in line[1:]):
                sys.exit(f"{path}:{n}: expected 'test_name WS [WS...]'")
            if str(world_size) in line[1:]:
                names.append(line[0])
    return names


def kill_ranks(test):
    for p in getattr(test, "processes", []):
        if p.is_alive():
            test.killed = True
            print(f"watchdog: killing rank pid {p.pid}", flush=True)
            p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--plugin", default=None,
                    help="module to import to register the backend "
                    "(default: braid_torch for 'braid', none for torch's own)")
    ap.add_argument("--pythonpath", action="append", default=[],
                    help="directory to put on sys.path (build/python)")
    ap.add_argument("--list", help="must-pass list: run its tests, all must pass")
    ap.add_argument("--tests", help="comma-separated test names")
    ap.add_argument("--match", help="only tests whose name matches this regex")
    ap.add_argument("--report", help="write name, outcome, seconds, reason as TSV")
    ap.add_argument("--start", choices=("spawn", "fork"), default="spawn",
                    help="how each test's ranks start (default: spawn)")
    ap.add_argument("--timeout", type=int, default=180,
                    help="seconds one test may take (torch's harness kills it)")
    ap.add_argument("--names", action="store_true", help="print the test names")
    ap.add_argument("--anysource", choices=("yes", "no"), default=None,
                    help="whether the backend receives from any source; 'no' "
                    "skips those tests as torch does for nccl (default: no "
                    "for braid, which refuses recvAnysource, yes otherwise)")
    args = ap.parse_args()

    for p in reversed(args.pythonpath):
        sys.path.insert(0, os.path.abspath(p))
    # The spawned ranks inherit the environment (and the parent's sys.path).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath(p) for p in args.pythonpath]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    plugin = args.plugin
    if plugin is None:
        plugin = "braid_torch" if args.backend == "braid" else ""
    os.environ["BACKEND"] = args.backend
    os.environ["WORLD_SIZE"] = str(args.world_size)
    os.environ["UPSTREAM_PLUGIN"] = plugin
    anysource = args.anysource or ("no" if args.backend == "braid" else "yes")
    os.environ["UPSTREAM_NO_ANYSOURCE"] = "1" if anysource == "no" else "0"
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.timeout)
    skip_dir = tempfile.mkdtemp(prefix="upstream-skips-")
    atexit.register(shutil.rmtree, skip_dir, True)
    os.environ["UPSTREAM_SKIP_DIR"] = skip_dir
    os.environ["UPSTREAM_START"] = args.start
    # torch's test utilities parse sys.argv when imported; they get none of ours.
    sys.argv = sys.argv[:1]
    sys.path.insert(0, HERE)

    import upstream_suite as suite

    every = suite.all_test_names()
    if args.names:
        print("\n".join(every))
        return 0

    strict = args.list is not None
    if strict:
        names = parse_list(args.list, args.world_size)
    else:
        names = every
    if args.tests:
        wanted = [t.strip() for t in args.tests.split(",") if t.strip()]
        names = [n for n in names if n in wanted] if strict else wanted
    if args.match:
        names = [n for n in names if re.search(args.match, n)]
    missing = [n for n in names if n not in every]

    print(f"torch's distributed tests: backend {args.backend}, "
          f"world size {args.world_size}, {len(names)} tests", flush=True)
    if suite.OPTED_IN:
        print(f"{len(suite.OPTED_IN)} tests that torch gates to other backends "
              f"by name run for {args.backend} (upstream_suite.OPT_IN_REASONS)",
              flush=True)
    rows = []
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    start = time.time()
    suite.UpstreamDistTest.setUpClass()
    try:
        for name in names:
            if name in missing:
                rows.append((name, "FAIL", 0.0, "no such test in torch's suite"))
                counts["FAIL"] += 1
                print(f"FAIL {name}: no such test in torch's suite", flush=True)
                continue
            result = unittest.TestResult()
            t0 = time.time()
            test = suite.UpstreamDistTest(name)
            # torch's harness gives up on a test after --timeout s, but it
            # then waits for ranks it only SIGTERMed: a rank stuck in a
            # crash handler would hold it for ever. Past --timeout + 30 s,
            # its ranks are SIGKILLed.
            watchdog = threading.Timer(args.timeout + 30, kill_ranks, (test,))
            watchdog.daemon = True
            watchdog.start()
            try:
                test.run(result)
            except Exception:  # the harness itself broke
                result.errors.append((name, traceback.format_exc()))
            finally:
                watchdog.cancel()
            # A rank that outlives its test (torch's harness SIGTERMs the
            # others when one fails, and does not wait for them) would hold
            # this process at exit, which joins its children.
            left = [p for p in getattr(test, "processes", []) if p.is_alive()]
            for p in left:
                p.join(5)
                if p.is_alive():
                    print(f"{name}: rank pid {p.pid} still running after "
                          "the test; killed", flush=True)
                    p.kill()
                    p.join(5)
            if getattr(test, "killed", False):
                result.errors.append((name, f"ranks killed after {args.timeout + 30} s"))
            dt = time.time() - t0
            if result.failures or result.errors or result.unexpectedSuccesses:
                text = "".join(t for _, t in result.failures + result.errors)
                outcome, reason = "FAIL", text.strip().splitlines()[-1:] or [""]
                reason = reason[0]
                print(f"FAIL {name} ({dt:.1f} s)\n{text}", flush=True)
            elif result.skipped:
                reason = result.skipped[0][1]
                if "subprocess level" in reason or reason.startswith("Test skipped"):
                    reason = suite.skip_reason(name) or reason
                outcome = "SKIP"
                print(f"SKIP {name} ({dt:.1f} s): {reason}", flush=True)
            elif result.testsRun == 1:
                outcome, reason = "PASS", ""
                print(f"PASS {name} ({dt:.1f} s)", flush=True)
            else:
                outcome, reason = "FAIL", "did not run"
                print(f"FAIL {name}: did not run", flush=True)
            counts[outcome] += 1
            rows.append((name, outcome, dt, reason.replace("\t", " ")))
    finally:
        suite.UpstreamDistTest.tearDownClass()

    if args.report:
        with open(args.report, "w") as f:
            f.write("test\toutcome\tseconds\treason\n")
            for r in rows:
                f.write(f"{r[0]}\t{r[1]}\t{r[2]:.1f}\t{r[3]}\n")
    total = time.time() - start
    print(f"backend {args.backend}, world size {args.world_size}: "
          f"{len(names)} tests in {total:.0f} s")
    skipped = [r for r in rows if r[1] == "SKIP"]
    if skipped:
        print(f"SKIPPED ({len(skipped)}):")
        for r in skipped:
            print(f"  {r[0]}: {r[3]}")
    failed = [r[0] for r in rows if r[1] == "FAIL"]
    if failed:
        print(f"FAILED ({len(failed)}): {' '.join(failed)}")
    print(f"{counts['PASS']} passed, {counts['FAIL']} failed, "
          f"{counts['SKIP']} skipped")
    if failed:
        return 1
    if strict:
        if skipped:
            print("error: tests of the must-pass list were skipped")
            return 1
        if counts["PASS"] != len(names):
            print(f"error: {counts['PASS']} passed where the list "
                  f"expects {len(names)}")
            return 1
        if not names:
            print("error: the list names no test for this world size")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
