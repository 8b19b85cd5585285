"""The runtime behind the device: plugin identity, devices, env registry."""
from . import _C


def init():
    """Start the runtime now (it otherwise starts on first use). Raises
    RuntimeError naming the plugin path when the plugin cannot be loaded."""
    _C._init()


def plugin_info():
    """{path, api_version, header_api_version, platform_name,
    platform_version, attributes: {xla_version, ...}}."""
    return _C._plugin_info()


def devices_info():
    """One dict per addressable device: index, id, kind, description,
    attributes (e.g. coords on TPU)."""
    return _C._devices_info()


def env_vars():
    """[(name, default, meaning, stability)] for every variable we read."""
    return _C._env_vars()


def run_stablehlo(module, *inputs):
    """Runs a StableHLO module (text, @main) on tpu tensors; returns its
    results as new tpu tensors. The module is compiled once per process and
    cached by its text. Raises RuntimeError with the compiler's message if
    it does not compile."""
    import torch

    if not isinstance(module, str):
        raise TypeError(f"module must be StableHLO text, got {type(module).__name__}")
    if not inputs:
        raise ValueError("run_stablehlo needs at least one tpu tensor input")
    return list(torch.ops.torchtpu.run_stablehlo(module, list(inputs)))
