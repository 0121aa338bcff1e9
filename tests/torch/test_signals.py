"""Importing braid_torch leaves the process's signals as Python set them.
Debian's libfabric links the PSM providers, whose libinfinipath replaces
the handlers of SIGINT, SIGTERM, SIGSEGV and others as it loads; libbraid
opens libfabric only when a communicator spans hosts, and then puts back
what a handler of libinfinipath's replaced (transports/ofi/ofi_lib.c; its
own test: transports_ofi loaded_on_first_use_without_provider_signals).
A child that imported braid_torch must not have libfabric loaded; it
sleeps and gets SIGINT: it must raise KeyboardInterrupt (Python's handler)
and leave no backtrace file behind, and a SIGTERM must end it at once with
the default action.

  test_signals.py
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys, time
import braid_torch
maps = open("/proc/self/maps").read()
if "libfabric" in maps:
    print("libfabric loaded by the import", flush=True)
    sys.exit(4)
print("ready", flush=True)
try:
    time.sleep(30)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(3)
"""


def run(sig):
    with tempfile.TemporaryDirectory() as cwd:
        env = dict(os.environ)
        env.pop("IPATH_NO_BACKTRACE", None)  # libinfinipath's own switch
        p = subprocess.Popen([sys.executable, "-c", CHILD], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        time.sleep(0.2)
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError("signal %d did not end the child" % sig)
        left = os.listdir(cwd)
        return p.returncode, out, err, left


def main():
    rc, out, err, left = run(signal.SIGINT)
    assert rc == 3 and "KeyboardInterrupt" in out, (
        "SIGINT: exit %d, stdout %r, stderr %r" % (rc, out, err[-400:]))
    assert not left, "files left in the working directory: %s" % left
    rc, out, err, left = run(signal.SIGTERM)
    assert rc == -signal.SIGTERM, (
        "SIGTERM: exit %d (expected death by SIGTERM), stderr %r"
        % (rc, err[-400:]))
    assert not left, "files left in the working directory: %s" % left
    print("signals: SIGINT raised KeyboardInterrupt, SIGTERM killed, "
          "no file left")


if __name__ == "__main__":
    main()
