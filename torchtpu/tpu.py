"""torch.tpu: the device module PyTorch and libraries look up by name
(getattr(torch, "tpu")), shaped like torch.cuda."""
import atexit
import os
import threading
from collections import namedtuple

import torch

from . import _C

_initialized = False
_init_lock = threading.Lock()
_seed = None


def is_available():
    """True when the PJRT plugin loads and reports at least one device."""
    return _C._device_count() > 0


def device_count():
    return _C._device_count()


def is_initialized():
    return _initialized and _C._is_initialized()


def _lazy_init():
    """Start the runtime; raises RuntimeError with the plugin's message."""
    global _initialized
    if _C._is_in_bad_fork():
        raise RuntimeError("Cannot re-initialize TPU in forked subprocess. To use TPU with "
                           "multiprocessing, you must use the 'spawn' start method")
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            _C._init()
            _initialized = True


def init():
    _lazy_init()


def _drain_autograd_device_threads():
    """At exit, before the interpreter finalizes: lets each tpu device's
    autograd thread drop the last backward's graph task. PyTorch's backward
    stashes a Python context in the task's thread-local state, so the
    device thread, releasing a task after backward() has returned, takes
    the GIL; during finalization that ends the thread with a forced unwind
    through a noexcept destructor, and the process aborts ("terminate
    called without an active exception", about 1 exit in 6 after a tpu
    backward). A backward of an empty view on each device, without the
    stash, runs after the last task on that device's thread, so by its end
    the thread has let go of it; its own task holds no Python object.
    Nothing executes on the device (views and empty tensors)."""
    try:
        if not is_initialized() or _C._is_in_bad_fork():
            return
        stash = torch._C._stash_obj_in_tls
        torch._C._stash_obj_in_tls = lambda *args: None
        try:
            for i in range(device_count()):
                x = torch.empty(0, device=f"tpu:{i}", requires_grad=True)
                x.view(-1).backward(torch.empty(0, device=f"tpu:{i}"))
        finally:
            torch._C._stash_obj_in_tls = stash
    except Exception:  # exiting: never turn a clean exit into an error
        pass


atexit.register(_drain_autograd_device_threads)


def _is_in_bad_fork():
    """True in a child forked after the parent started the device: its
    inherited runtime cannot be used (use the 'spawn' start method)."""
    return _C._is_in_bad_fork()


def current_device():
    _lazy_init()
    return torch._C._accelerator_hooks_get_current_device()


def _device_index(device, optional=False):
    if device is None:
        return current_device() if optional else 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"expected a device, int or str, got {type(device).__name__}")


def set_device(device):
    _lazy_init()
    index = _device_index(device)
    if not 0 <= index < device_count():
        raise IndexError(
            f"tpu device index {index} is out of range: {device_count()} "
            f"device(s) available")
    torch._C._accelerator_hooks_set_current_device(index)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.idx = _device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx != self.prev_idx:
            set_device(self.idx)

    def __exit__(self, *exc):
        if self.prev_idx != self.idx:
            set_device(self.prev_idx)
        return False


def synchronize(device=None):
    """Waits for all work queued on the device. Every host read already waits
    for the data it needs."""
    _lazy_init()
    _C._synchronize(_device_index(device, optional=True))


_DeviceProperties = namedtuple(
    "_DeviceProperties",
    ["name", "platform", "kind", "index", "total_memory", "plugin", "xla_version"],
)


def _host_memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def get_device_properties(device=None):
    _lazy_init()
    index = _device_index(device, optional=True)
    devices = _C._devices_info()
    if not 0 <= index < len(devices):
        raise IndexError(f"tpu device index {index} is out of range")
    info = _C._plugin_info()
    d = devices[index]
    platform = info["platform_name"]
    # The CPU plugin's devices share host memory; other plugins report
    # their own through PJRT memory stats (not yet wired).
    total = _host_memory_bytes() if platform == "cpu" else 0
    return _DeviceProperties(
        name=f"{d['kind']} (PJRT {platform})", platform=platform, kind=d["kind"],
        index=index, total_memory=total, plugin=info["path"],
        xla_version=info["attributes"].get("xla_version", ""))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    return {"platform": get_device_properties(device).platform}


# --- memory: our own byte accounting of live storages -------------------

def memory_stats(device=None):
    """Keys follow torch.cuda.memory_stats where they apply."""
    index = _device_index(device, optional=True)
    s = _C._memory_stats(index)
    return {
        "allocated_bytes.all.current": s["allocated_bytes"],
        "allocated_bytes.all.peak": s["peak_allocated_bytes"],
        "allocated_bytes.all.allocated": s["total_allocated_bytes"],
        "allocated_bytes.all.freed": s["total_freed_bytes"],
        "active_bytes.all.current": s["allocated_bytes"],
        "active_bytes.all.peak": s["peak_allocated_bytes"],
        "reserved_bytes.all.current": s["allocated_bytes"],
        "reserved_bytes.all.peak": s["peak_allocated_bytes"],
        "allocation.all.current": s["live_allocations"],
        "allocation.all.peak": s["peak_live_allocations"],
        "allocation.all.allocated": s["num_allocs"],
        "allocation.all.freed": s["num_frees"],
        "num_alloc_retries": 0,
        "num_ooms": s["num_ooms"],
    }


def memory_allocated(device=None):
    return _C._memory_stats(_device_index(device, optional=True))["allocated_bytes"]


def max_memory_allocated(device=None):
    return _C._memory_stats(_device_index(device, optional=True))["peak_allocated_bytes"]


def memory_reserved(device=None):
    return memory_allocated(device)  # no caching allocator: reserved == allocated


def max_memory_reserved(device=None):
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None):
    _C._reset_peak_memory_stats(_device_index(device, optional=True))


def reset_accumulated_memory_stats(device=None):
    _C._reset_accumulated_memory_stats(_device_index(device, optional=True))


def mem_get_info(device=None):
    """(free, total) bytes of the device, as torch.cuda.mem_get_info: total
    is what the device may hold (the plugin's limit; the host's memory for
    the CPU plugin; TORCHTPU_MEMORY_LIMIT when lower), free what is left."""
    return _C._mem_get_info(_device_index(device, optional=True))


def empty_cache():
    """Returns freed device memory to the system. Storages free their device
    buffers when they die; on the CPU plugin, whose device memory is the
    process's heap, freed buffers stay in the heap for the next ones
    (TORCHTPU_HOST_HEAP) until this gives their pages back."""
    _C._empty_cache()


# --- random number generation ------------------------------------------
# Each device has a generator whose state (two 64-bit words) lives on the
# device and is threaded through every random op's program, so random ops
# are reproducible for a given seed in every eager mode.

def manual_seed(seed, device=None):
    """Seeds the current (or given) tpu device's generator."""
    global _seed
    _seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    if not is_available():
        return
    _C._manual_seed(_device_index(device, optional=True), _seed)


def manual_seed_all(seed):
    global _seed
    _seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    if not is_available():
        return
    for i in range(device_count()):
        _C._manual_seed(i, _seed)


def seed():
    """Seeds the current device with a random seed."""
    import random
    manual_seed(random.getrandbits(63))


def seed_all():
    import random
    manual_seed_all(random.getrandbits(63))


def initial_seed():
    return 0 if _seed is None else _seed


def get_rng_state(device=None):
    """The generator state as a uint8 CPU tensor (16 bytes)."""
    words = _C._get_rng_state(_device_index(device, optional=True))
    return torch.tensor(words, dtype=torch.int64).view(torch.uint8)


def set_rng_state(new_state, device=None):
    words = new_state.detach().cpu().contiguous().view(torch.int64).tolist()
    _C._set_rng_state(_device_index(device, optional=True), words)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---- AMP ---------------------------------------------------------------------

def get_amp_supported_dtype():
    """dtypes torch.autocast("tpu", dtype=...) accepts."""
    return [torch.bfloat16, torch.float16, torch.float32]


def is_bf16_supported(including_emulation=True):
    return True


def is_autocast_enabled():
    return torch.is_autocast_enabled("tpu")


def get_autocast_dtype():
    return torch.get_autocast_dtype("tpu")


# ---- matmul precision --------------------------------------------------------
# Float32 products (matmul, linear, bmm, einsum, conv ...) carry StableHLO's
# precision_config: PyTorch's torch.set_float32_matmul_precision picks it
# ("highest" -> HIGHEST, six bfloat16 passes on a TPU: float32-exact, as on
# CPU; "high" -> HIGH, three passes; "medium" -> DEFAULT, one bfloat16 pass,
# XLA's and JAX's TPU default). torch.tpu.precision overrides it for tpu
# only. The precision is part of every program's key: eager ops, deferred
# runs and compiled graphs compile again under another one.

_PRECISIONS = ("", "medium", "high", "highest")  # index: the C code


def get_precision():
    """The precision tpu float32 products use now: "highest", "high" or
    "medium" (torch.tpu.precision's if one is active, else PyTorch's
    float32 matmul precision)."""
    return _PRECISIONS[_C._matmul_precision()]


class precision:
    """Context manager: float32 products on tpu use `value` ("highest",
    "high", "medium") inside the block, whatever
    torch.set_float32_matmul_precision says; CPU and other devices are not
    affected. Nested blocks restore the outer one on exit."""

    def __init__(self, value):
        if value not in _PRECISIONS[1:]:
            raise ValueError(f"torch.tpu.precision: {value!r} is not one of 'highest', 'high', "
                             f"or 'medium'")
        self.value = value
        self._saved = []

    def __enter__(self):
        self._saved.append(_C._precision_override())
        _C._set_precision_override(_PRECISIONS.index(self.value))
        return self

    def __exit__(self, *exc):
        _C._set_precision_override(self._saved.pop())
        return False


# ---- streams and events ------------------------------------------------------
# The device runs work in order, so every stream names one queue: any stream
# works with stream-using code, and waiting on a stream, an event or the
# device waits for the same work.

class _TpuMeta(type):
    """isinstance(x, torch.tpu.Stream / Event) for PyTorch's own objects on
    the tpu device: PyTorch's C methods (elapsed_time, wait_stream, ...)
    accept only exact torch.Stream / torch.Event, so we hand out those."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == "tpu"


class Stream(metaclass=_TpuMeta):
    """A tpu stream: a torch.Stream on device "tpu" (wait_event,
    wait_stream, record_event, query, synchronize)."""
    _base = torch.Stream

    def __new__(cls, device=None, priority=0):
        return torch.Stream(torch.device("tpu", _device_index(device, optional=True)),
                            priority=priority)


class Event(metaclass=_TpuMeta):
    """A tpu event: a torch.Event on device "tpu" (record, wait, query,
    synchronize, elapsed_time: host time between the two records, in ms)."""
    _base = torch.Event

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event("tpu", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device=None):
    return torch.accelerator.current_stream(_device_index(device, optional=True))


def default_stream(device=None):
    d = _device_index(device, optional=True)
    return torch.Stream(stream_id=0, device_index=d,
                        device_type=current_stream(d).device_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """`with torch.tpu.stream(s):` makes `s` the current stream."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.previous = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.previous is not None:
            set_stream(self.previous)
        return False


def stream(stream):
    return StreamContext(stream)


# ---- memory summary and snapshots (torch.tpu.memory) -------------------------
from . import memory  # noqa: E402
from .memory import memory_snapshot, memory_summary  # noqa: E402,F401
