"""TorchTitan on the tpu device.

TorchTitan picks its device once, in `torchtitan.tools.utils`
(`device_type, device_module = get_device_info()`), from
`torch._utils._get_available_device_type()`, which already returns the
PrivateUse1 backend ("tpu") once torchtpu is imported: that is how
torchtitan runs on its other out-of-tree devices (npu, ...). It needs no
patch when torch, and so torchtpu (autoload), is imported before that
module, which torchtitan's own imports ensure.

Two points are patched:
- A process that imported torchtitan's modules before torchtpu (autoload
  off) has already bound `device_type = "cuda"` (its fallback) in them; the
  values are rebound to the tpu device.
- MFU: `get_peak_flops(device_name)` looks the name up in a table of GPUs
  (no TPU in 0.2.2's) and otherwise assumes an A100's 312 TFLOP/s. For the
  tpu device the peak is the dot throughput measured on the device itself,
  as bench/train_bench.py measures it (an n x n float32 matmul, median of
  several runs; the median, not the fastest run: on a CPU-quota-limited
  host a short burst can run on more cores than the quota grants), so MFU
  is model FLOP/s over what this device can do.
"""
import functools
import statistics
import sys
import time

from . import check_version

KNOWN_VERSIONS = {"0.2.2"}


def install():
    import importlib.metadata
    import types

    # torchtitan 0.2.2's package imports its submodules (and so torch, and
    # so torchtpu) before it sets __version__: this can run while it is
    # still initialising, so the version comes from its installed metadata.
    version = importlib.metadata.version("torchtitan")
    check_version("torchtitan", types.SimpleNamespace(__version__=version), KNOWN_VERSIONS)
    import torchtitan.tools.utils as utils

    _rebind_device(utils)
    original = utils.get_peak_flops

    @functools.wraps(original)
    def get_peak_flops(device_name):
        if utils.device_type == "tpu":
            return measured_dot_peak_flops()
        return original(device_name)

    utils.get_peak_flops = get_peak_flops


def _rebind_device(utils):
    """Rebinds device_type/device_module where torchtitan bound them before
    the tpu device was registered (they are copied into several modules by
    `from torchtitan.tools.utils import device_type`)."""
    device_type, device_module = utils.get_device_info()
    if device_type != "tpu" or utils.device_type == "tpu":
        return
    stale = {"device_type": utils.device_type, "device_module": utils.device_module}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "torchtitan" or name.startswith("torchtitan.")):
            continue
        for attr, old in stale.items():
            if getattr(mod, attr, None) is old:
                setattr(mod, attr, device_type if attr == "device_type" else device_module)


@functools.lru_cache(maxsize=1)
def measured_dot_peak_flops(n=2048, reps=5):
    """FLOP/s of an n x n float32 matmul on the current tpu device: median
    of `reps` timed runs after one warm-up run that compiles it."""
    import torch

    # A private generator: the measurement must not move the seeded RNG
    # streams the model's initialisation draws from.
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to("tpu")
    torch.mm(a, a).cpu()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, a)
        torch.tpu.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times)
