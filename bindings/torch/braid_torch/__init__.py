"""braid as a torch.distributed backend.

Importing this package registers the backend name "braid"::

    import torch.distributed as dist
    import braid_torch  # noqa: F401
    dist.init_process_group("braid")  # env://, tcp://, file://, torchrun

See docs/TORCH.md for the operations, dtypes and reduce ops it supports.
"""

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as _dist

# libbraid opens libfabric only when a group spans hosts, and then puts
# back any signal handler its PSM providers replace (Python's
# KeyboardInterrupt included): transports/ofi/ofi_lib.c.
from ._C import ProcessGroupBraid, braid_version  # noqa: E402

__all__ = ["ProcessGroupBraid", "braid_version", "BACKEND"]

BACKEND = "braid"


def _create(store, rank, world_size, timeout):
    """The creator torch.distributed calls for each group of the backend."""
    return ProcessGroupBraid(store, rank, world_size, timeout)


# Once per process, even if the package is reloaded.
if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _create)
