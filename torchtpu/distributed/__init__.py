"""torch.distributed on tpu: the c10d backend "tpudist" and a device mesh.

Importing torchtpu registers "tpudist" as the default backend of the tpu
device, so `init_process_group()` (or `backend="tpudist"`),
`init_device_mesh("tpu", ...)`, DDP, FSDP2, DTensor and pipelining pick it
with no change to user code. One process per device, launched by torchrun.
"""
import torch
import torch.distributed as dist

from .. import _C

BACKEND = "tpudist"


def _create_backend(store, rank, size, timeout):
    """c10d's creator: a Gloo backend on the same (prefixed) store, wrapped
    so tpu tensors are staged through host memory."""
    host = dist.ProcessGroupGloo(dist.PrefixStore("tpudist/", store), rank, size, timeout)
    # The device runtime starts with the group (on this process's device,
    # LOCAL_RANK's): torch's init_device_mesh("tpu", ...) otherwise calls
    # set_device(LOCAL_RANK) on a runtime not yet started, an index that
    # need not exist when each process sees its own device.
    from .. import tpu
    tpu._lazy_init()
    return _C._tpudist_backend(host, rank, size)


def _register():
    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # "cpu" too: a group made with backend="tpudist" also serves CPU tensors
    # (object collectives, barrier). The default backend for "cpu" stays Gloo.
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", "tpu"])


def _patch_default_backend():
    """init_process_group() with no backend on a tpu machine maps tpu to
    tpudist, but PyTorch (2.13) then marks Gloo as the group's default
    backend, which the group does not have: DDP's logger and anything else
    asking for the backend's name fail. Mark the custom backend instead."""
    c10d = dist.distributed_c10d
    original = c10d._new_process_group_helper
    if getattr(original, "_torchtpu", False):
        return

    def helper(*args, **kwargs):
        result = original(*args, **kwargs)
        pg = result[0] if isinstance(result, tuple) else result
        if isinstance(pg, dist.ProcessGroup):
            config = str(dist.get_backend_config(pg))
            if (BACKEND in config and "gloo" not in config
                    and pg._get_backend_name() == "gloo"):
                pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        return result

    helper._torchtpu = True
    c10d._new_process_group_helper = helper


_register()
if dist.is_available():
    _patch_default_backend()

from .mesh import init_device_mesh, mesh_layout  # noqa: E402,F401
