"""torch's distributed test base bound to one backend, for run_upstream.py.

torch ships the tests (DistributedTest._DistTestBase in
torch/testing/_internal/distributed/distributed_test.py) and the process
harness (TestDistBackend) but no class that joins them. This module makes
that class for the backend named by the BACKEND environment variable. It is
a module of its own, imported only once run_upstream.py has set the
environment, because every test spawns fresh interpreters that unpickle the
class by name: they import this module again and must define the very same
class, with the same backend and the same feature sets.

Environment (set by run_upstream.py, inherited by the spawned ranks):
  BACKEND          torch backend name ("braid", "gloo")
  WORLD_SIZE       ranks per test
  UPSTREAM_PLUGIN  module whose import registers BACKEND (braid_torch); empty
                   for backends built into torch
  UPSTREAM_SKIP_DIR  where ranks write why they skipped a test: torch's
                   harness reports a skip raised inside a rank only as
                   "skipped at subprocess level", without the reason
  UPSTREAM_START   "fork": each test's ranks are forked from the runner
                   instead of spawned (run_upstream.py --start)
"""
import importlib
import os
import re
import sys
import types
import unittest

_here = os.path.dirname(os.path.abspath(__file__))
_shim = os.path.join(_here, "shim")
try:
    import expecttest  # noqa: F401  (torch's test utilities need it)
except ImportError:
    sys.path.append(_shim)

BACKEND = os.environ["BACKEND"]
# The ranks of each test rendezvous through a file that TestDistBackend's
# setUp names (INIT_METHOD, set again in the parent before each spawn);
# this value only tells the decorators, read at import, that it is file://:
# test_barrier_timeout_global runs only then.
if not os.environ.get("INIT_METHOD", "").startswith("file://"):
    os.environ["INIT_METHOD"] = "file:///dev/null"
PLUGIN = os.environ.get("UPSTREAM_PLUGIN", "")
BUILTIN = {"gloo", "nccl", "mpi", "ucc"}

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if PLUGIN:
    importlib.import_module(PLUGIN)
if BACKEND not in BUILTIN:
    # A third-party backend takes part in the groups of tests that it opts
    # into; these sets are read by decorators when distributed_test is
    # imported, so they must be filled before that import.
    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add(BACKEND)
    # A backend that refuses recv from any source says so the way torch's
    # own backends do (UPSTREAM_NO_ANYSOURCE=1): those tests are skipped.
    if os.environ.get("UPSTREAM_NO_ANYSOURCE", "0") == "1":
        DistTestCases.skip_collective["sendrecv anysource"].add(BACKEND)

# torch's harness turns on DDP's experimental ReplicatedTensor interop in
# every rank (TestDistBackend._run). That mode imports
# torch.distributed._shard, which torch 1.13 cannot import under Python 3.11
# (a dataclass with a mutable default: "mutable default ... for field
# tensor_properties is not allowed"), so every DDP test would fail before
# reaching a collective. The ranks run DDP as users get it, mode off.
import torch.nn.parallel._replicated_tensor_ddp_utils as _rt_utils  # noqa: E402

try:
    import torch.distributed._shard  # noqa: F401
except ValueError:
    _rt_utils._set_ddp_with_replicated_tensor = lambda value: None

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)
import torch.testing._internal.distributed.distributed_test as _dt  # noqa: E402


# Tests that torch gates by backend *name* (BACKEND != "mpi", "gloo only",
# backend_feature["gpu"] for CPU tests) where nothing in the test depends on
# that name but for nccl's CUDA set-up: a third-party backend that
# implements the operation runs them too. torch's gates (sandcastle_skip_if,
# require_backend) mark the function itself as skipped; the class gets an
# unmarked copy, only where the mark's reason matches the one expected here.
# Not opted in: tests whose bodies take another path for gloo or mpi only
# (test_accumulate_gradients_no_sync*), gloo-only APIs (monitored_barrier),
# sparse tensors, CUDA.
OPT_IN_REASONS = [
    (r"Only MPI supports CPU all_to_all_single$", [
        "test_all_to_all_single_equal_split",
        "test_all_to_all_single_equal_split_complex",
        "test_all_to_all_single_equal_split_full_group",
        "test_all_to_all_single_equal_split_group",
        "test_all_to_all_single_unequal_split",
        "test_all_to_all_single_unequal_split_complex",
        "test_all_to_all_single_unequal_split_full_group",
        "test_all_to_all_single_unequal_split_group",
    ]),
    (r"Only MPI supports all_to_all$", [
        "test_all_to_all", "test_all_to_all_complex",
        "test_all_to_all_full_group", "test_all_to_all_group",
    ]),
    (r"GLOO Batch Send Recv CPU$", [
        "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    ]),
    (r"Only gloo backend supports timeouts$", [
        "test_barrier_timeout_full_group", "test_barrier_timeout_global",
        "test_barrier_timeout_group",
    ]),
    (r"get_future is only supported on mpi, nccl and gloo$", [
        "test_get_future",
    ]),
    (r"Test requires backend to be one of \{'gloo'\}$", [
        "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_product",
        "test_all_reduce_coalesced_min", "test_all_reduce_coalesced_max",
        "test_all_reduce_coalesced_group_sum",
        "test_all_reduce_coalesced_group_product",
        "test_all_reduce_coalesced_group_min",
        "test_all_reduce_coalesced_group_max",
        "test_all_reduce_coalesced_full_group_sum",
        "test_all_reduce_coalesced_full_group_product",
        "test_all_reduce_coalesced_full_group_min",
        "test_all_reduce_coalesced_full_group_max",
        "test_scatter_object_list",
    ]),
    # backend_feature["gpu"] = {"gloo", "nccl"}, in either order
    (r"Test requires backend to be one of \{'(gloo|nccl)', '(gloo|nccl)'\}$", [
        "test_all_gather_object_default_pg", "test_all_gather_object_subgroup",
        "test_gather_object", "test_gather_object_subgroup",
        "test_broadcast_object_list",
    ]),
]
OPTED_IN = []


def _unmarked(fn):
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__dict__.update({k: v for k, v in fn.__dict__.items()
                          if k not in ("__unittest_skip__",
                                       "__unittest_skip_why__")})
    copy.__qualname__ = fn.__qualname__
    return copy


def _opt_in(cls):
    if BACKEND in BUILTIN or os.environ.get("UPSTREAM_NO_OPT_IN") == "1":
        return
    for reason, names in OPT_IN_REASONS:
        for name in names:
            fn = getattr(cls, name)
            why = getattr(fn, "__unittest_skip_why__", None)
            if why is not None and re.match(reason, why):
                setattr(cls, name, _unmarked(fn))
                OPTED_IN.append(name)


def _skip_note(test_name, rank, reason):
    d = os.environ.get("UPSTREAM_SKIP_DIR")
    if not d:
        return
    try:
        with open(os.path.join(d, f"{test_name}.{rank}"), "w") as f:
            f.write(reason)
    except OSError:
        pass


def skip_reason(test_name):
    """The reason a rank gave for skipping test_name, if one wrote it."""
    d = os.environ.get("UPSTREAM_SKIP_DIR")
    if not d or not os.path.isdir(d):
        return None
    reasons = set()
    for f in sorted(os.listdir(d)):
        if f.rsplit(".", 1)[0] == test_name:
            with open(os.path.join(d, f)) as fh:
                reasons.add(fh.read().strip())
    return "; ".join(sorted(reasons)) if reasons else None


class UpstreamDistTest(TestDistBackend, DistributedTest._DistTestBase):
    """One test of torch's suite: setUp spawns WORLD_SIZE ranks that each
    init the default group over BACKEND (file:// rendezvous) and run it."""

    def setUp(self):
        super().setUp()
        if os.environ.get("UPSTREAM_START") != "fork":
            self._spawn_processes()
            return
        # Spawned ranks import distributed_test afresh and read this test's
        # INIT_METHOD (its own file, which super().setUp() just put in the
        # environment) into a module constant; forked ranks keep the
        # runner's, which test_barrier_timeout_global's second
        # init_process_group would use: give them this test's.
        _dt.INIT_METHOD = os.environ["INIT_METHOD"]
        self._start_processes(torch.multiprocessing.get_context("fork").Process)

    def run_test(self, test_name, parent_pipe):
        # In a rank: note a skip's reason before torch's harness turns it
        # into a bare exit code.
        method = getattr(self, test_name)
        rank = self.rank

        def noted():
            try:
                return method()
            except unittest.SkipTest as e:
                _skip_note(test_name, rank, str(e))
                raise

        setattr(self, test_name, noted)
        super().run_test(test_name, parent_pipe)


_opt_in(UpstreamDistTest)


def all_test_names():
    return sorted(n for n in dir(UpstreamDistTest) if n.startswith("test_"))
