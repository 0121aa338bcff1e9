"""Ports and torch's launcher for the torch tests, without importing torch
(tests/torch/common.py and tests/torch_upstream/run_example.py use it).

  * free_port(): a port below the ephemeral range that could be bound just
    now;
  * torchrun(nproc, script, args, ...): runs a script under
    torch.distributed.run on such a port, its output captured and printed.

A port picked by binding and closing a socket can be taken by another
process before torch's store binds it: tests running side by side open
sockets all the time. torch's own --standalone picks an ephemeral port,
the range every outgoing connection and every listener on port 0 draws
from, and in a full ctest -j2 run the example's store once lost its port
that way ("The server socket has failed to bind to [::]:52969 (errno: 98
- Address already in use)"). So the launches here pick a port below the
ephemeral range, and run again on a fresh port when, and only when, the
store could not bind the one picked.
"""

import os
import random
import socket
import subprocess
import sys
import tempfile
import time

# torch's TCPStore, when the port it was given is taken (torch 1.13)
STORE_PORT_TAKEN = "Address already in use"
STORE_BIND_FAILED = "The server socket has failed to"


def free_port():
    """A TCP port in 20000..31999 that could be bound just now (below the
    ephemeral range, which outgoing connections draw from)."""
    rnd = random.Random(os.getpid() ^ int(time.time() * 1e6))
    for _ in range(200):
        port = rnd.randint(20000, 31999)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("", port))
            return port
        except OSError:
            pass
        finally:
            s.close()
    raise RuntimeError("no free port found in 200 tries")


def store_lost_port(returncode, output):
    """Whether a failed launch failed because torch's store could not bind
    the port it was given."""
    return (returncode != 0 and STORE_BIND_FAILED in output
            and STORE_PORT_TAKEN in output)


def torchrun(nproc, script, args, env=None, timeout=None, launcher_args=(),
             python=sys.executable, tries=3):
    """Runs script under torch.distributed.run with nproc workers on
    127.0.0.1 and a free port; returns (returncode, output, command). A
    launch whose store lost its port to another process is run again on
    another port, at most tries times in all. A launch still running after
    timeout seconds is killed: returncode 124, its output so far and a
    line saying so. The launcher's log directory, which torch 1.13 makes
    in the system's temporary directory and leaves there, is one of ours
    that goes when the launch is over, unless launcher_args name one."""
    if not any(str(a).startswith(("--log_dir", "--log-dir"))
               for a in launcher_args):
        with tempfile.TemporaryDirectory(prefix="braid-torchrun-") as d:
            return torchrun(nproc, script, args, env, timeout,
                            tuple(launcher_args) + ("--log_dir", d), python,
                            tries)
    for attempt in range(1, tries + 1):
        cmd = [
            python, "-m", "torch.distributed.run",
            "--nproc_per_node", str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
            # torch 1.13's launcher on Python 3.11 turns the default "0" of
            # these into None (IntFlag iteration skips zero): name a local
            # rank that does not exist instead, which leaves all at NONE.
            "--redirects", "9:1", "--tee", "9:1",
        ] + list(launcher_args) + [script] + list(args)
        print(" ".join(cmd), flush=True)
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.output or ""
            if isinstance(out, bytes):
                out = out.decode(errors="replace")
            return 124, out + "\nnot done within %s s: killed\n" % timeout, cmd
        if attempt < tries and store_lost_port(p.returncode, p.stdout):
            print(p.stdout)
            print("NOTE: torch's store could not bind its port (another "
                  "process took it after it was picked): launching again "
                  "on another port", flush=True)
            continue
        return p.returncode, p.stdout, cmd
    raise AssertionError("unreachable")
