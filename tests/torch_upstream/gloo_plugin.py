"""A third-party-style backend "glooplug" that is gloo underneath.

For checking run_upstream.py's plugin path (feature groups, opted-in
tests) without braid: run_upstream.py --backend glooplug --plugin gloo_plugin.
"""
import torch.distributed as dist


def _create(store, rank, world_size, timeout):
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


if not hasattr(dist.Backend, "GLOOPLUG"):
    dist.Backend.register_backend("glooplug", _create)
