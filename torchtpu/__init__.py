"""torchtpu: a native PyTorch device backend for XLA accelerators.

`import torchtpu` (or just `import torch`, through the torch.backends entry
point) makes torch.device("tpu") an ordinary PyTorch device served by a PJRT
plugin: libtpu on TPU VMs, the CUDA plugin on NVIDIA GPUs, OpenXLA's CPU
plugin everywhere else.
"""
import os

__version__ = "0.1.0"


def _autoload():
    """Entry point for torch.backends autoloading: importing us is enough.

    Defined before `import torch` because `import torchtpu` imports torch,
    whose autoloading then looks this up on the half-imported module."""


import torch  # noqa: E402


def _installed_cpu_plugin():
    """Path of the xla-cpu-pjrt plugin installed beside us, or ""."""
    try:
        import xla_plugins.xla_cpu_pjrt as pkg
    except ImportError:
        return ""
    path = os.path.join(os.path.dirname(pkg.__file__), "xla_cpu_pjrt.so")
    return path if os.path.exists(path) else ""


from . import _C  # noqa: E402  (registers allocator, guard, hooks, kernels)

_C._set_default_plugin_path(_installed_cpu_plugin())
# Direct device kernels for every overload the lowering table covers.
_C._register_lowered_ops()
from . import _meta  # noqa: E402,F401  (PyTorch meta kernels that fail on our calls)

if torch._C._get_privateuse1_backend_name() != "tpu":
    torch.utils.rename_privateuse1_backend("tpu")

from . import tpu as _tpu_module  # noqa: E402

torch._register_device_module("tpu", _tpu_module)
from . import comm as _comm  # noqa: E402
_tpu_module.comm = _comm  # torch.tpu.comm, as torch.cuda.comm / nccl
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)

from . import _printing  # noqa: E402,F401
from . import metrics  # noqa: E402,F401
from .runtime import plugin_info, devices_info  # noqa: E402,F401
from . import debug  # noqa: E402,F401
from .modes import eager_mode, flush, get_eager_mode, set_eager_mode  # noqa: E402,F401
from . import distributed  # noqa: E402,F401  (registers the tpudist c10d backend)
from . import _default_backend  # noqa: E402

_default_backend.install()  # torch.compile(model) on tpu tensors compiles through torchtpu
from . import profiler as _profiler  # noqa: E402

_profiler.install()  # torch.profiler shows the device's work
from . import integrations as _integrations  # noqa: E402

_integrations.install()  # accelerate / transformers / torchtitan learn the device
