"""torch.compile's default backend ("inductor") for graphs on tpu tensors.

`torch.compile(model)` with no backend argument builds a
torch._TorchCompileInductorWrapper and hands every Dynamo graph to its
__call__. PyTorch 2.13's Inductor maps the device type "tpu" to Google's
torch_tpu Pallas code generator, which is not installed here, so a tpu
graph there fails (ModuleNotFoundError: torch_tpu).

The route: that wrapper's __call__ is the one place every default-backend
graph passes through, so it is wrapped once, at import: a graph with a tpu
tensor (an input, a parameter, or a value it creates) goes to torchtpu's
own backend, the same function as backend="tpu"; every other graph goes to
Inductor unchanged. The alternatives were worse:
  - Inductor's device registry (register_backend_for_device) is reached
    only after Inductor has lowered the graph to its loop IR and picks a
    code generator per kernel, not a compiler for a whole graph;
  - Dynamo's backend registry is not consulted for the default:
    torch.compile constructs the Inductor wrapper directly;
  - replacing torch._inductor.compile_fx.compile_fx would import Inductor
    on `import torchtpu` and catch Inductor's internal recursive calls.

mode= and options= are Inductor settings (triton, cudagraphs, autotuning):
validated by PyTorch as for cuda, then reported once per distinct setting
as not applying, because XLA compiles every tpu graph with its optimising
pipeline and one compiled graph is already one launch."""
import warnings

import torch

_reported = set()


def _has_tpu_value(v):
    if isinstance(v, torch.Tensor):
        return v.device.type == "tpu"
    if isinstance(v, (list, tuple)):
        return any(_has_tpu_value(x) for x in v)
    return False


def graph_on_tpu(gm, example_inputs):
    """Whether a Dynamo graph computes on tpu: an input (parameters are
    inputs) or any value it makes (a factory call with device="tpu")."""
    if any(_has_tpu_value(a) for a in example_inputs):
        return True
    for n in gm.graph.nodes:
        meta = n.meta.get("example_value", n.meta.get("val"))
        if _has_tpu_value(meta):
            return True
    return False


def _report_settings(mode, options):
    settings = []
    if mode not in (None, "default"):
        settings.append(f"mode={mode!r}")
    if options:
        settings.append(f"options={sorted(options)}")
    if not settings:
        return
    key = tuple(settings)
    if key in _reported:
        return
    _reported.add(key)
    warnings.warn(
        f"torchtpu: torch.compile {' and '.join(settings)} configure Inductor and do not "
        "apply to tpu graphs: they compile through XLA's optimising pipeline, one launch "
        "per graph, whatever the mode", stacklevel=3)


def install():
    cls = torch._TorchCompileInductorWrapper
    if getattr(cls, "_torchtpu_routes_tpu_graphs", False):
        return
    inductor_init, inductor_call = cls.__init__, cls.__call__

    def __init__(self, mode, options, dynamic, *args, **kwargs):
        inductor_init(self, mode, options, dynamic, *args, **kwargs)
        self._torchtpu_settings = (mode, dict(options or {}))
        # Dynamo is imported by now: give it the "tpu" device interface
        # before it traces (PyTorch's own entry is torch_tpu's).
        from . import _compile  # noqa: F401

    def __call__(self, model_, inputs_, *args, **kwargs):
        if not graph_on_tpu(model_, inputs_):
            return inductor_call(self, model_, inputs_, *args, **kwargs)
        from . import _compile
        _report_settings(*getattr(self, "_torchtpu_settings", (None, {})))
        return _compile.tpu_backend(model_, inputs_)

    __init__.__wrapped__ = inductor_init
    __call__.__wrapped__ = inductor_call
    cls.__init__ = __init__
    cls.__call__ = __call__
    cls._torchtpu_routes_tpu_graphs = True
