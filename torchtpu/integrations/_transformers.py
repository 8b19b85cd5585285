"""transformers: one name to correct, two things to check.

transformers (5.x) already knows a device called "tpu" through the generic
`torch.accelerator` route: `is_torch_tpu_available()` is true when the
current accelerator's type is "tpu", which is what our PrivateUse1 rename
makes it. `TrainingArguments._setup_devices` then picks `tpu:0` (n_gpu 1),
bf16 counts as supported, and `generate`'s compile defaults use the Dynamo
backend named "tpu" (ours). The Trainer's own device comes from accelerate,
which `_accelerate` teaches.

transformers maps the "tpu" device to the c10d backend "tpu_dist" (another
project's) when it starts torch.distributed itself, for a model loaded with
a tp_plan or a DistributedConfig; ours is "tpudist", so the map is
corrected. The Trainer does not use it: it starts torch.distributed
through accelerate, which `_accelerate` teaches.

So this module only
- names our backend in transformers.distributed.utils, once imported,
- warns when transformers no longer has `is_torch_tpu_available`, the one
  point everything above relies on, and
- forgets the cached answers that depend on the current accelerator: they
  are `lru_cache`d, and if transformers was imported before torchtpu (with
  TORCH_DEVICE_BACKEND_AUTOLOAD=0) they describe a process without a tpu.
"""
import sys
import warnings

from . import check_version

KNOWN_VERSIONS = ("5.24.0",)

# import_utils functions whose cached answer depends on torch.accelerator.
_ACCELERATOR_CACHED = ("is_torch_tpu_available", "is_torch_bf16_gpu_available",
                       "is_torch_flex_attn_available")


def _name_our_backend(distributed_utils):
    from ..distributed import BACKEND

    backends = getattr(distributed_utils, "DISTRIBUTED_BACKEND_MAP", None)
    if backends is None:
        warnings.warn("torchtpu: transformers has no DISTRIBUTED_BACKEND_MAP; it may start "
                      "torch.distributed on tpu without the tpudist backend", stacklevel=3)
    else:
        backends["tpu"] = BACKEND


def install():
    """Applied when transformers.utils.import_utils is imported, and again
    when transformers.distributed.utils is (which import_utils precedes)."""
    import transformers
    from transformers.utils import import_utils

    distributed_utils = sys.modules.get("transformers.distributed.utils")
    if distributed_utils is not None:
        _name_our_backend(distributed_utils)

    check_version("transformers", transformers, KNOWN_VERSIONS)
    if not hasattr(import_utils, "is_torch_tpu_available"):
        warnings.warn("torchtpu: transformers has no is_torch_tpu_available(); "
                      "TrainingArguments will not pick the tpu device", stacklevel=2)
    for name in _ACCELERATOR_CACHED:
        cache_clear = getattr(getattr(import_utils, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()
