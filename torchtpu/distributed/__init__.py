"""torch.distributed on tpu: the c10d backend "tpudist" and a device mesh.

Importing torchtpu registers "tpudist" as the default backend of the tpu
device, so `init_process_group()` (or `backend="tpudist"`),
`init_device_mesh("tpu", ...)`, DDP, FSDP2, DTensor and pipelining pick it
with no change to user code. One process per device, launched by torchrun.
"""
import functools

import torch
import torch.distributed as dist

from .. import _C

BACKEND = "tpudist"


def _create_backend(store, rank, size, timeout):
    """c10d's creator: a Gloo backend on the same (prefixed) store, wrapped
    so tpu tensors are staged through host memory."""
    host = dist.ProcessGroupGloo(dist.PrefixStore("tpudist/", store), rank, size, timeout)
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


def _backend_for(device, group):
    """The name of the backend that serves `device`'s tensors in `group`
    (get_backend names the group's default, "undefined" after a plain
    init_process_group())."""
    config = str(dist.get_backend_config(group))  # "cpu:gloo,tpu:tpudist"
    return dict(part.split(":", 1) for part in config.split(",") if ":" in part).get(device.type)


def _patch_flat_all_gather():
    """all_gather_single (and all_gather_into_tensor, which calls it) into a
    flat output of world_size * input.numel() elements: NCCL takes it, and
    accelerate's gather passes it for every backend not named "gloo". Gloo,
    hence tpudist, only takes the concatenated or stacked shape; for a
    tpudist group a flat output is handed on as a view of the concatenated
    shape (same storage, same result)."""
    c10d = dist.distributed_c10d
    original = c10d.all_gather_single
    if getattr(original, "_torchtpu", False):
        return

    @functools.wraps(original)
    def all_gather_single(output_tensor, input_tensor, group=None, async_op=False):
        if (isinstance(output_tensor, torch.Tensor) and isinstance(input_tensor, torch.Tensor)
                and output_tensor.dim() == 1 and input_tensor.dim() > 1
                and output_tensor.is_contiguous()
                and not c10d._rank_not_in_group(group)
                and _backend_for(output_tensor.device, group) == BACKEND):
            world = dist.get_world_size(group)
            if output_tensor.numel() == world * input_tensor.numel():
                output_tensor = output_tensor.view(world * input_tensor.shape[0],
                                                   *input_tensor.shape[1:])
        return original(output_tensor, input_tensor, group, async_op)

    all_gather_single._torchtpu = True
    c10d.all_gather_single = all_gather_single
    dist.all_gather_single = all_gather_single


_register()
if dist.is_available():
    _patch_default_backend()
    _patch_flat_all_gather()

from .mesh import init_device_mesh, mesh_layout  # noqa: E402,F401
