#!/usr/bin/python3
"""Smoke run of bindings/torch/examples/lenet_ddp.py under torch's launcher.

  run_example.py --backend braid --nproc 2 [--pythonpath build/python] [-- ARGS]

Launches `/usr/bin/python3 -m torch.distributed.run` with
--nproc workers on a few steps of one epoch (ARGS replace the defaults
--epochs 1 --max-steps 5 --eval-batches 2 --bind) and fails unless the
launcher exits 0, every rank said which CPU it was bound to (different
CPUs where there are enough), and rank 0 printed each epoch's line (loss,
accuracies, time, communication share, each rank's wait, whose mean is
the line's wait) and the summary with a non-zero count of all_reduce
calls.

The launch is tests/torch/launch_util.py's: the rendezvous on 127.0.0.1
and a port below the ephemeral range, where the example's own usage says
--standalone (whose port, an ephemeral one, another test took once before
torch's store bound it), run again on another port only when the store
lost its port that way; and --redirects 9:1 --tee 9:1, as torch 1.13's
launcher cannot parse its default ("0") under Python 3.11 (IntFlag no
longer iterates over the zero member, so Std.from_str returns None and
the agent fails with "'NoneType' object has no attribute 'get'").
"""
import argparse
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
import launch_util  # noqa: E402
EXAMPLE = os.path.join(HERE, "..", "..", "bindings", "torch", "examples",
                       "lenet_ddp.py")
DATA = "/usr/share/datasets/fashion-mnist"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--pythonpath", action="append", default=[])
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("rest", nargs="*")
    args = ap.parse_args()
    if not os.path.isdir(DATA):
        print(f"FAILED: {DATA} missing (Debian package dataset-fashion-mnist)")
        return 1
    extra = args.rest or ["--epochs", "1", "--max-steps", "5",
                          "--eval-batches", "2", "--bind"]
    epochs = 1
    if "--epochs" in extra:
        epochs = int(extra[extra.index("--epochs") + 1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath(p) for p in args.pythonpath]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.TemporaryDirectory() as logs:
        rc, out, _cmd = launch_util.torchrun(
            args.nproc, os.path.abspath(EXAMPLE),
            ["--backend", args.backend] + extra, env=env,
            timeout=args.timeout, launcher_args=["--log_dir", logs],
            python="/usr/bin/python3")
    print(out)
    errors = []
    if rc != 0:
        errors.append(f"the launcher exited {rc}")
    # one host: the communication time is split into the wait for the
    # last rank's call and the time after it
    epoch_re = re.compile(r"epoch (\d+): loss [\d.]+, train acc [\d.]+, test acc "
                          r"[\d.]+, [\d.]+ s \(\d+ steps\), communication "
                          r"([\d.]+) s \([\d.]+%\): (-?[\d.]+) s waiting for the "
                          r"last rank's call, ([\d.]+) s \([\d.]+%\) after it; "
                          r"the ranks waited ((?:-?[\d.]+, )*-?[\d.]+) s")
    found = list(epoch_re.finditer(out))
    seen = sorted({int(m.group(1)) for m in found})
    if seen != list(range(1, epochs + 1)):
        errors.append(f"epoch lines for {seen}, expected 1..{epochs}")
    for m in found:
        comm, wait, after = (float(m.group(i)) for i in (2, 3, 4))
        if wait < -0.01 or after > comm + 0.01:
            errors.append(f"epoch {m.group(1)}: the split {wait} + {after} s "
                          f"does not fit in {comm} s")
        waits = [float(w) for w in m.group(5).split(", ")]
        # each printed to 0.01 s: their mean within 0.01 of the line's
        if len(waits) != args.nproc or min(waits) < -0.01 or \
                abs(sum(waits) / len(waits) - wait) > 0.011:
            errors.append(f"epoch {m.group(1)}: the ranks' waits {waits} "
                          f"do not fit {args.nproc} ranks waiting {wait} s "
                          f"on average")
    if "--bind" in extra:
        cpus = [int(c) for c in re.findall(r"rank \d+: bound to CPU (\d+)",
                                           out)]
        if len(cpus) != args.nproc:
            errors.append(f"{len(cpus)} ranks said which CPU they were "
                          f"bound to, expected {args.nproc}")
        elif len(set(cpus)) != min(args.nproc, len(os.sched_getaffinity(0))):
            errors.append(f"the ranks were bound to CPUs {cpus}")
    m = re.search(rf"{re.escape(args.backend)}, {args.nproc} workers: .* "
                  r"communication [\d.]+% of the time \([\d.]+% after the "
                  r"last rank's call\), (\d+) all_reduce calls",
                  out)
    if not m or int(m.group(1)) == 0:
        errors.append("no summary line with all_reduce calls")
    if errors:
        print("FAILED: " + "; ".join(errors))
        return 1
    print(f"PASSED: lenet_ddp.py over {args.backend}, {args.nproc} workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
