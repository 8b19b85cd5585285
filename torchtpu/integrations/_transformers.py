"""transformers: nothing to patch, two things to check.

transformers (5.x) already knows a device called "tpu" through the generic
`torch.accelerator` route: `is_torch_tpu_available()` is true when the
current accelerator's type is "tpu", which is what our PrivateUse1 rename
makes it. `TrainingArguments._setup_devices` then picks `tpu:0` (n_gpu 1),
bf16 counts as supported, and `generate`'s compile defaults use the Dynamo
backend named "tpu" (ours). The Trainer's own device comes from accelerate,
which `_accelerate` teaches.

So this module only
- warns when transformers no longer has `is_torch_tpu_available`, the one
  point everything above relies on, and
- forgets the cached answers that depend on the current accelerator: they
  are `lru_cache`d, and if transformers was imported before torchtpu (with
  TORCH_DEVICE_BACKEND_AUTOLOAD=0) they describe a process without a tpu.
"""
import warnings

from . import check_version

KNOWN_VERSIONS = ("5.24.0",)

# import_utils functions whose cached answer depends on torch.accelerator.
_ACCELERATOR_CACHED = ("is_torch_tpu_available", "is_torch_bf16_gpu_available",
                       "is_torch_flex_attn_available")


def install():
    import transformers
    from transformers.utils import import_utils

    check_version("transformers", transformers, KNOWN_VERSIONS)
    if not hasattr(import_utils, "is_torch_tpu_available"):
        warnings.warn("torchtpu: transformers has no is_torch_tpu_available(); "
                      "TrainingArguments will not pick the tpu device", stacklevel=2)
    for name in _ACCELERATOR_CACHED:
        cache_clear = getattr(getattr(import_utils, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
