#!/usr/bin/python3
"""Turns full runs of run_upstream.py into the must-pass list and the
docs' table of the tests left out.

  run_upstream.py --backend braid --world-size 2 --report ws2.tsv
  run_upstream.py --backend braid --world-size 3 --report ws3.tsv
  summarize.py ws2.tsv ws3.tsv --list must_pass.txt --md excluded.md

A test goes in the list for each world size at which it passed. Every
other test is listed in the markdown with its reason per world size:
torch's skip message, or for a failure the note given by --why
NAME=TEXT (a failure without one is an error: each must be explained).
"""
import argparse
import collections
import os
import re
import sys


def read(path):
    rows = {}
    with open(path) as f:
        next(f)
        for line in f:
            name, outcome, secs, reason = (line.rstrip("\n").split("\t") + [""])[:4]
            rows[name] = (outcome, float(secs), reason)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+", help="TSV reports, file name ending wsN.tsv")
    ap.add_argument("--list", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--why", action="append", default=[],
                    help="NAME=TEXT: why a failing test is left out")
    args = ap.parse_args()
    why = dict(w.split("=", 1) for w in args.why)
    runs = {}
    for p in args.reports:
        m = re.search(r"ws(\d+)\.tsv$", os.path.basename(p))
        if not m:
            sys.exit(f"{p}: name must end in wsN.tsv")
        runs[int(m.group(1))] = read(p)
    sizes = sorted(runs)
    names = sorted(set().union(*runs.values()))
    passing = collections.defaultdict(list)
    out = collections.defaultdict(list)   # reason -> [(name, sizes)]
    missing_why = []
    for n in names:
        reasons = collections.defaultdict(list)
        for ws in sizes:
            outcome, _, reason = runs[ws].get(n, ("ABSENT", 0, "not run"))
            if outcome == "PASS":
                passing[n].append(ws)
                continue
            if outcome == "FAIL":
                if n not in why:
                    missing_why.append(f"{n} (world size {ws})")
                    continue
                reason = "fails: " + why[n]
            reasons[reason].append(ws)
        for reason, wss in reasons.items():
            out[reason].append((n, wss))
    if missing_why:
        sys.exit("failures without --why: " + ", ".join(missing_why))
    with open(args.list, "w") as f:
        f.write("# torch's distributed tests that must pass over braid, and the world\n"
                "# sizes at which they must (tests/torch_upstream/run_upstream.py --list).\n"
                "# Written by summarize.py from full runs; docs/TORCH.md says why each\n"
                "# other test is left out.\n")
        for n in sorted(passing):
            f.write(f"{n} {' '.join(map(str, passing[n]))}\n")
    counts = {ws: sum(1 for n in passing if ws in passing[n]) for ws in sizes}
    lines = ["| reason | world size | tests |", "|---|---|---|"]
    for reason in sorted(out, key=lambda r: (-len(out[r]), r)):
        by_ws = collections.defaultdict(list)
        for n, wss in out[reason]:
            by_ws[" and ".join(map(str, wss))].append(n)
        for wss, ns in sorted(by_ws.items()):
            lines.append(f"| {reason.replace('|', '/')} | {wss} | "
                         f"{', '.join('`' + x + '`' for x in ns)} |")
    with open(args.md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(", ".join(f"world size {ws}: {counts[ws]} must pass" for ws in sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
