"""launch_util.torchrun runs again on another port when, and only when,
torch's store could not bind the port it was given; at most `tries`
launches. The launcher is a stand-in (a script taking the place of the
interpreter) that fails as torch 1.13's store does, or otherwise, as many
times as told: no torch and no rank runs here.

  /usr/bin/python3 test_launch_util.py
"""
import os
import re
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launch_util  # noqa: E402

# Fails the first $FAILS launches with $TEXT, then prints "launched on
# <port>"; every launch appends its port to $LOG; with $HANG, prints
# "started" and sleeps instead.
FAKE = """#!/bin/sh
port=$(echo "$@" | sed 's/.*--master_port \\([0-9]*\\).*/\\1/')
echo "$port" >> "$LOG"
if [ -n "$HANG" ]; then
  echo started
  exec sleep 30
fi
n=$(wc -l < "$LOG")
if [ "$n" -le "$FAILS" ]; then
  echo "$TEXT"
  exit 1
fi
echo "launched on $port"
"""

TAKEN = ("RuntimeError: The server socket has failed to listen on any local "
         "network address. The server socket has failed to bind to "
         "[::]:52969 (errno: 98 - Address already in use).")


def run(fails, text, tries=3, hang="", timeout=None):
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "python")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, stat.S_IRWXU)
        log = os.path.join(d, "ports")
        env = dict(os.environ, LOG=log, FAILS=str(fails), TEXT=text,
                   HANG=hang)
        rc, out, cmd = launch_util.torchrun(2, "script.py", ["--x"], env=env,
                                            python=fake, tries=tries,
                                            timeout=timeout)
        with open(log) as f:
            ports = [int(p) for p in f.read().split()]
    return rc, out, cmd, ports


def main():
    failed = []

    def check(cond, what):
        print(("ok: " if cond else "FAILED: ") + what, flush=True)
        if not cond:
            failed.append(what)

    rc, out, cmd, ports = run(0, "")
    check(rc == 0 and len(ports) == 1 and out.strip() ==
          "launched on %d" % ports[0], "a launch that works runs once")
    check(cmd[1:3] == ["-m", "torch.distributed.run"] and "script.py" in cmd
          and cmd[-1] == "--x" and 20000 <= ports[0] <= 31999,
          "the command: torch's launcher, the script and its arguments, a "
          "port below the ephemeral range: %s" % cmd)

    rc, out, cmd, ports = run(2, TAKEN)
    check(rc == 0 and len(ports) == 3 and "launched on" in out,
          "the store lost its port twice: launched again, 3 launches: "
          "rc %d, ports %s" % (rc, ports))

    rc, out, cmd, ports = run(5, TAKEN)
    check(rc == 1 and len(ports) == 3 and "Address already in use" in out,
          "the store lost its port every time: 3 launches, then the "
          "failure is returned: rc %d, ports %s" % (rc, ports))

    rc, out, cmd, ports = run(1, "Traceback: ZeroDivisionError")
    check(rc == 1 and len(ports) == 1,
          "any other failure is not launched again: rc %d, ports %s"
          % (rc, ports))

    rc, out, cmd, ports = run(1, "Address already in use (a rank's own "
                              "socket, not the store's)")
    check(rc == 1 and len(ports) == 1,
          "'Address already in use' without the store's bind failure is "
          "not launched again: rc %d, ports %s" % (rc, ports))

    rc, out, cmd, ports = run(0, "", hang="1", timeout=1)
    check(rc == 124 and len(ports) == 1 and "started" in out and
          "not done within 1 s" in out,
          "a launch past its timeout is killed, its output kept: rc %d, "
          "output %r" % (rc, out))

    check(re.fullmatch(r"\d+", str(launch_util.free_port())) is not None,
          "free_port gives a port")
    if failed:
        print("%d failed" % len(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
