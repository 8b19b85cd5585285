"""accelerate: pick the tpu device.

accelerate chooses its device in one place, `PartialState.default_device`,
a chain of vendor branches (mps, mlu, sdaa, musa, npu, hpu, cuda, xpu,
neuron) that ends in cpu; it has no generic PrivateUse1 branch, so a tpu
process trains on cpu, and `prepare()` moves the model back there. Every
other device decision (`Accelerator.device`, `prepare()` placement, the
autocast device of `mixed_precision="bf16"`, the Trainer's device) follows
from this one property, so it is the only point patched.

tpu takes the place of cuda and cpu in that chain and nothing else:
transformers' `TrainingArguments` puts tpu before cuda and after the other
vendors, and the two must agree (the Trainer checks that the loss is on
`args.device`). `cpu=True`, `ACCELERATE_TORCH_DEVICE` and `use_cpu` are read
before `default_device` and still win. `is_torch_xla_available()` stays
False: this is not torch_xla, and accelerate's XLA branches call `xm.*`.
"""
import torch

from . import check_version

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


def install():
    import accelerate
    from accelerate.state import PartialState

    check_version("accelerate", accelerate, KNOWN_VERSIONS)
    vendor = PartialState.default_device
    if not getattr(vendor.fget, "_torchtpu_patched", False):
        PartialState.default_device = _tpu_default_device(vendor)
