"""torch.distributed on tpu: the c10d backend "tpudist" and a device mesh.

Importing torchtpu registers "tpudist" as the default backend of the tpu
device, so `init_process_group()` (or `backend="tpudist"`),
`init_device_mesh("tpu", ...)`, DDP, FSDP2, DTensor and pipelining pick it
with no change to user code. One process per device, launched by torchrun.
"""
import datetime

import torch
import torch.distributed as dist

from .. import _C

BACKEND = "tpudist"


def _create_backend(store, rank, size, timeout):
    """c10d's creator: a Gloo backend on the same (prefixed) store, wrapped
    so tpu tensors are staged through host memory."""
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    host = dist.ProcessGroupGloo(dist.PrefixStore("tpudist/", store), rank, size, timeout)
    return _C._tpudist_backend(host, rank, size)


def _register():
    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # "cpu" too: a group made with backend="tpudist" also serves CPU tensors
    # (object collectives, barrier). The default backend for "cpu" stays Gloo.
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", "tpu"])


_register()

try:
    from .mesh import init_device_mesh, mesh_layout  # noqa: F401
except ImportError:  # pragma: no cover - mesh.py arrives separately
    pass
