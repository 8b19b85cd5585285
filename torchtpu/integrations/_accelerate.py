"""accelerate: pick the tpu device, and run data-parallel under torchrun.

accelerate chooses its device in one place, `PartialState.default_device`,
a chain of vendor branches (mps, mlu, sdaa, musa, npu, hpu, cuda, xpu,
neuron) that ends in cpu; it has no generic PrivateUse1 branch, so a tpu
process trains on cpu, and `prepare()` moves the model back there. Every
other device decision (`Accelerator.device`, `prepare()` placement, the
autocast device of `mixed_precision="bf16"`, the Trainer's device) follows
from this one property.

tpu takes the place of cuda and cpu in that chain and nothing else:
transformers' `TrainingArguments` puts tpu before cuda and after the other
vendors, and the two must agree (the Trainer checks that the loss is on
`args.device`). `cpu=True`, `ACCELERATE_TORCH_DEVICE` and `use_cpu` are read
before `default_device` and still win. `is_torch_xla_available()` stays
False: this is not torch_xla, and accelerate's XLA branches call `xm.*`.

Under torchrun (LOCAL_RANK set) accelerate picks the distributed type and
c10d backend in `PartialState._prepare_backend`, another vendor chain with
no tpu branch: the type stays NO and every rank would train alone, with no
gradient averaging. Two more points are patched, as accelerate does for
each of its vendors:
- `_prepare_backend`: backend "tpudist", type MULTI_GPU. MULTI_GPU is the
  plain torch.distributed type: `prepare()` wraps the model in DDP, the
  dataloader is sharded, gather/reduce/barrier are c10d calls, and no
  vendor module (torch.npu, torch.xpu, ...) is touched.
- `set_device`: MULTI_GPU would select `cuda:<local rank>`; tpu takes its
  place, `tpu:<local rank>`. Not `% device_count` as for the vendors:
  `prepare()` gives DDP `device_ids=[local rank]`, and DDP moves every
  input to that device, so a rank whose device has another index fails in
  its first forward; it is refused here with the remedy instead.
"""

import torch

from . import check_version
from .. import _C
from ..distributed import BACKEND

KNOWN_VERSIONS = ("1.15.0",)


def _tpu_default_device(vendor_default_device):
    def default_device(self):
        device = vendor_default_device.fget(self)
        if device.type in ("cpu", "cuda") and torch.tpu.is_available():
            return torch.device("tpu", torch.tpu.current_device())
        return device

    default_device.__doc__ = vendor_default_device.__doc__
    default_device._torchtpu_patched = True
    return property(default_device)


def _under_launcher():
    # accelerate's own test (LOCAL_RANK set and not -1), read through
    # torchtpu's environment registry
    rank = _C._env_get("LOCAL_RANK")
    return rank != "" and int(rank) != -1


def _tpu_prepare_backend(vendor_prepare_backend):
    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        from accelerate.utils import DistributedType

        got_backend, distributed_type = vendor_prepare_backend(self, cpu, sagemaker_dp, backend)
        # Only where accelerate found no vendor: cuda (say) still wins, as
        # in default_device, and cpu=True keeps MULTI_CPU on Gloo.
        if (distributed_type == DistributedType.NO and _under_launcher() and not cpu
                and backend in (None, BACKEND) and torch.tpu.is_available()):
            return BACKEND, DistributedType.MULTI_GPU
        return got_backend, distributed_type

    _prepare_backend.__doc__ = vendor_prepare_backend.__doc__
    _prepare_backend._torchtpu_patched = True
    return _prepare_backend


def _tpu_set_device(vendor_set_device):
    def set_device(self):
        if self.device is None and self.backend == BACKEND:
            index, count = self.local_process_index, torch.tpu.device_count()
            if index >= count:
                raise RuntimeError(
                    f"accelerate under torchrun puts local rank {index} on tpu:{index} (its "
                    f"DDP gets device_ids=[{index}]), but this process has {count} tpu "
                    f"device(s). Give every process all of the host's devices: do not narrow "
                    f"them with TORCHTPU_VISIBLE_DEVICES, and with the CPU plugin set "
                    f"TORCHTPU_NUM_DEVICES to the number of processes per host.")
            self.device = torch.device("tpu", index)
            torch.tpu.set_device(self.device)
            return
        vendor_set_device(self)

    set_device.__doc__ = vendor_set_device.__doc__
    set_device._torchtpu_patched = True
    return set_device


def _patch(cls, name, wrap, as_property=False):
    vendor = getattr(cls, name)
    if not getattr(vendor.fget if as_property else vendor, "_torchtpu_patched", False):
        setattr(cls, name, wrap(vendor))


def install():
    import accelerate
    from accelerate.state import PartialState

    check_version("accelerate", accelerate, KNOWN_VERSIONS)
    _patch(PartialState, "default_device", _tpu_default_device, as_property=True)
    _patch(PartialState, "_prepare_backend", _tpu_prepare_backend)
    _patch(PartialState, "set_device", _tpu_set_device)
