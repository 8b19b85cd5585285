"""Compiled tpu graphs that outlive their process.

Every graph torch.compile hands to torchtpu (forward, backward, inference)
is compiled into a TpuOutputCode: PyTorch's OutputCode interface (the one
Inductor's CompiledFxGraph implements), holding a *recipe* — the StableHLO
text and the runner's plain-data plan — from which the runner is rebuilt.
That is what lets PyTorch's own persistence carry our programs:

  - AOTAutograd's cache (torch._functorch._aot_autograd.autograd_cache),
    in its "bundled" form, pickles the OutputCode inside its entry: a warm
    process skips AOTAutograd's trace and partitioning.
  - Dynamo's precompile (torch._dynamo.config.caching_precompile) stores
    the traced bytecode and guards next to those entries: a warm process
    skips Dynamo's trace too.
  - torch.compile(...).aot_compile() / save_compiled_function() and
    torch.compiler.load_compiled_function() serialize one function with
    its guards and its graphs, explicitly.

The XLA executable itself comes from the program caches (memory, then
disk), keyed by the StableHLO text, so a rebuilt runner does not compile.

A recipe carries a stamp of what produced it: torchtpu's version, a digest
of the compiled extension and of torchtpu's Python sources (a rebuilt core
or changed lowering code may lower differently) and the global settings a
program depends on. A stamp that differs from this
process's raises StaleProgramError when the recipe is rebuilt: AOTAutograd's
cache counts that as a miss and compiles afresh; an explicit load fails
with the reason."""
import contextlib
import copy
import functools
import hashlib
import os

import torch
import torch.fx
from torch._inductor.output_code import OutputCode

from . import _C


class StaleProgramError(RuntimeError):
    """A serialized compiled function or graph was made by another torchtpu
    build, another torch, other settings or other code."""


@functools.lru_cache(maxsize=None)
def _build_digest():
    """The compiled extension and the Python that drives compilation: a
    change to either may lower a graph differently (or change a recipe's
    form), so entries made before it are never used."""
    from . import _C
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    files = [_C.__file__] + sorted(os.path.join(here, f) for f in os.listdir(here)
                                   if f.endswith(".py"))
    for path in files:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def stamp():
    """What a compiled graph depends on besides its own graph, shapes and
    dtypes (those are in PyTorch's keys)."""
    import torchtpu
    return (("torchtpu", torchtpu.__version__), ("build", _build_digest()),
            ("torch", torch.__version__),
            ("matmul_precision", torch.get_float32_matmul_precision()))


def check_stamp(saved, what="compiled graph"):
    now = stamp()
    if tuple(saved) != now:
        diff = [f"{k}: saved {dict(saved).get(k)!r}, now {v!r}"
                for k, v in now if dict(saved).get(k) != v]
        raise StaleProgramError(f"torchtpu: a serialized {what} does not match this process "
                                f"({'; '.join(diff) or 'different settings'}); it is not loaded")


def _to_host(recipe):
    """A recipe with its tensors (graph constants) on the host, for pickling."""
    kind = recipe[0]
    if kind == "program":
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        plan = dict(recipe[1])
        with unset_fake_temporarily():  # (AOTAutograd saves inside its fake mode)
            plan["inputs"] = [(k, v.detach().cpu() if k == "const" else v)
                              for k, v in plan["inputs"]]
        return (kind, plan)
    if kind in ("module", "symbolic"):
        return (kind, _graph_module_to(recipe[1], "cpu")) + tuple(recipe[2:])
    raise AssertionError(kind)


def _graph_module_to(gm, device=None):
    """A GraphModule with the tensors it reads (get_attr: constants) moved:
    to `device`, keeping each one's device, in the order the graph reads
    them, in the returned module's _tpu_devices; with device=None, back to
    the devices recorded there (tpu tensors do not pickle inside
    AOTAutograd's fake mode). AOTAutograd may prepare an entry twice and
    renames constants when it pickles a module: devices go by position and
    a module moved before keeps the devices recorded then."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    back = getattr(gm, "_tpu_devices", None)
    reads = [n.target for n in gm.graph.nodes if n.op == "get_attr"]
    values = []
    for target in reads:
        v = gm
        for atom in target.split("."):
            v = getattr(v, atom)
        values.append(v)
    tensors = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    if back is not None and len(back) != len(tensors):
        raise StaleProgramError("torchtpu: a serialized graph's constants do not match it")
    devices = list(back) if back is not None else [str(values[i].device) for i in tensors]
    root = dict(zip(reads, values))
    with unset_fake_temporarily():
        for k, i in enumerate(tensors):
            root[reads[i]] = values[i].detach().to(device or devices[k])
    out = torch.fx.GraphModule(root, copy.deepcopy(gm.graph))
    out.meta = {}
    if device is not None:
        out._tpu_devices = devices
    return out


def _rebuild(recipe):
    from . import _compile
    kind = recipe[0]
    if kind == "program":
        plan = dict(recipe[1])
        plan["inputs"] = [(k, v.to("tpu") if k == "const" else v) for k, v in plan["inputs"]]
        return _compile._plan_runner(plan)
    if kind == "module":
        return _compile._eager_runner(_graph_module_to(recipe[1]), recipe[2])
    if kind == "symbolic":
        return _compile._specializing(_graph_module_to(recipe[1]), *recipe[2:])
    raise AssertionError(kind)


class TpuOutputCode(OutputCode):
    """One compiled tpu graph in PyTorch's OutputCode form (boxed call)."""

    def __init__(self, run):
        self._run = run
        self._recipe = getattr(run, "_tpu_recipe", None)
        self._stamp = stamp()
        self._boxed_call = True

    def __call__(self, inputs):
        return self._run(inputs)

    def prepare_for_serialization(self):
        # called on a shallow copy that is then pickled
        if self._recipe is None:
            raise _unserializable()
        self._recipe = _to_host(self._recipe)
        self._run = None

    def post_compile(self, example_inputs, constants, graph_kwargs):
        if self._run is None:
            check_stamp(self._stamp)
            self._run = _rebuild(self._recipe)
            _bump("compiled_graph_loads")

    def set_triton_bundle(self, triton_bundle):
        pass

    def __getstate__(self):
        state = dict(self.__dict__)
        if state.get("_run") is not None:
            if self._recipe is None:
                raise _unserializable()
            state["_recipe"] = _to_host(self._recipe)
        state["_run"] = None
        return state


def _unserializable():
    # AOTAutograd's cache treats this as "do not cache" (a bypass).
    from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
    return BypassAOTAutogradCache(
        "torchtpu: a graph split at collectives (its eager collectives) is not serializable")


def output_code(compiler):
    """An AOTAutograd compiler returning TpuOutputCode, in the form AOTAutograd
    caches (SerializableAOTDispatchCompiler)."""
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    return SerializableAOTDispatchCompiler(
        TpuOutputCode, lambda gm, example_inputs: TpuOutputCode(compiler(gm, example_inputs)))


@contextlib.contextmanager
def persistence(variant=""):
    """Around AOTAutograd's call for a tpu graph: its cache in the bundled
    form (the OutputCode pickled in the entry, as no FX graph cache holds
    ours), the backward compiled with the forward so the entry holds both,
    and our stamp in the cache key (torch.compiler.config.cache_key_tag,
    PyTorch's knob for a key component of its own), so entries of another
    torchtpu build or settings are never looked up."""
    from torch._functorch import config as functorch_config
    tag = torch.compiler.config.cache_key_tag
    # `variant` names a compile choice the graph and its inputs' guards do
    # not show (the spmd partition): part of the key, so an entry made
    # without it is never handed to a compile that wants it.
    ours = "torchtpu:" + hashlib.sha256(repr((stamp(), variant)).encode()).hexdigest()[:16]
    with functorch_config.patch(bundled_autograd_cache=True,
                                force_non_lazy_backward_lowering=True), \
            torch.compiler.config.patch(cache_key_tag=f"{tag}|{ours}" if tag else ours):
        yield


# ---------------------------------------------------------------------------
# The explicit API: torchtpu.compiler.precompile(fn, path)

_FILE_VERSION = 1


def _functional_of(optimizer):
    """The functional form a torch.optim optimizer's step() computes with
    (torch.optim.adam.adam for Adam and AdamW, sgd.sgd for SGD, ...): the
    module-level function named after the class that defines step(), in
    that class's module. None when the optimizer does not follow it."""
    import inspect
    for cls in type(optimizer).__mro__:
        if "step" in vars(cls):
            # (Optimizer re-wraps a subclass's inherited step on its class:
            # the function's own qualname names the class that wrote it)
            step = inspect.unwrap(vars(cls)["step"])
            name = step.__qualname__.split(".")[0].lower()
            fn = step.__globals__.get(name)
            return (step.__globals__, name) if inspect.isfunction(fn) else None
    return None


def _without_grad(functional):
    """The update as step() runs it: under no_grad (its _use_grad)."""
    def update(*args, **kwargs):
        with torch.no_grad():
            functional(*args, **kwargs)
    return update


class _OptimizerStep:
    """An optimizer's step() as eager bookkeeping plus a precompiled
    update. Dynamo cannot serialize a traced step() (its state dict is keyed
    by the parameters: identity guards), so step() runs eagerly with its
    functional form replaced by a recorder: _init_group fills the state as
    usual, and the recorded call — lists of tensors and the group's
    hyper-parameters — is what is compiled and saved, its tensors being
    plain inputs of the compiled function."""

    def __init__(self, optimizer, path, dynamic):
        self.optimizer = optimizer
        self.where = _functional_of(optimizer)
        if self.where is None:
            raise TypeError(f"torchtpu: {type(optimizer).__name__}.step has no functional form "
                            "to precompile (torch.optim's optimizers have one)")
        globs, name = self.where
        self.update = Precompiled(_without_grad(globs[name]), path, dynamic)

    def __call__(self, closure=None):
        if closure is not None:
            raise ValueError("torchtpu: a precompiled optimizer step takes no closure")
        globs, name = self.where
        functional, calls = globs[name], []
        globs[name] = lambda *args, **kwargs: calls.append((args, kwargs))
        try:
            self.optimizer.step()
        finally:
            globs[name] = functional
        for args, kwargs in calls:
            self.update(*args, **kwargs)


def _sources_unchanged(aot_fn):
    import importlib

    from torch._dynamo.package import _hash_sourcelines
    # The whole module, not only the traced lines: a module-level constant
    # the traced code read (and Dynamo folded) lies outside them.
    for src in aot_fn.source_info().inlined_sources:
        try:
            m = importlib.import_module(src.module)
            if _module_source(m) != src.content:
                return f"the source of {src.module} changed"
            if _hash_sourcelines(m, src.firstlineno, src.lastlineno) != src.checksum:
                return f"the source of {src.module} (lines {src.firstlineno}-{src.lastlineno}) changed"
        except Exception as e:  # a module that no longer imports
            return f"{src.module} cannot be checked ({type(e).__name__}: {e})"
    return None


def _module_source(m):
    import inspect
    import linecache
    linecache.checkcache(inspect.getsourcefile(m))
    return inspect.getsource(m)


def _serializable_guards(entries):
    """Dynamo's guards kept with a saved function: every kind that
    serializes, globals included (aot_compile's default drops guards on
    globals, so a changed module-level constant would load a program that
    folded the old one)."""
    from torch._dynamo.guards import CheckFunctionManager
    unsupported = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
    # (names Dynamo makes up, "__builtins_dict___0", "__import_torch...",
    # exist only in the tracing process's globals)
    return [g.guard_type not in unsupported and not (g.is_global and g.name.startswith("G['__"))
            for g in entries]


def _bump(name):
    from . import _C
    _C._metrics_add(name, 1)


class Precompiled:
    """A function compiled whole (fullgraph) for tpu whose compiled form —
    Dynamo's guards and bytecode, AOTAutograd's forward and backward, the
    StableHLO programs — is kept in one file. A fresh process calling it
    loads that file and runs without Dynamo or AOTAutograd tracing; the
    XLA executables come from the disk program cache.

    An entry is used only if its stamp (torchtpu version and build, torch,
    settings) matches this process, the source of every function it traced
    is unchanged, and its guards pass on the call's arguments (shapes,
    dtypes, devices, requires_grad, ...). Anything else is a miss: the call
    is compiled afresh and added to the file (never a stale program).
    Metrics: precompile_hits, precompile_misses, precompile_stale."""

    def __init__(self, fn, path, dynamic=None):
        self._fn, self._path, self._dynamic = fn, os.fspath(path), dynamic
        self._entries = None  # [(AOTCompiledFunction, serialized bytes)]
        self._plain = None  # torch.compile'd fallback for graphs that do not serialize

    def _read(self):
        import pickle

        from torch._dynamo.aot_compile import AOTCompiledFunction
        entries = []
        try:
            with open(self._path, "rb") as f:
                saved = pickle.load(f)
        except FileNotFoundError:
            return entries
        except Exception as e:
            self._stale(f"{self._path} is unreadable ({type(e).__name__}: {e})")
            return entries
        if saved.get("version") != _FILE_VERSION or tuple(saved.get("stamp", ())) != stamp():
            try:
                check_stamp(saved.get("stamp", ()), "compiled function")
            except StaleProgramError as e:
                self._stale(str(e))
            return entries
        for data in saved["entries"]:
            try:
                aot_fn = AOTCompiledFunction.deserialize(data, self._fn.__globals__)
            except Exception as e:
                self._stale(f"an entry does not load ({type(e).__name__}: {e})")
                continue
            why = _sources_unchanged(aot_fn)
            if why:
                self._stale(why)
                continue
            entries.append((aot_fn, data))
        return entries

    def _stale(self, why):
        _bump("precompile_stale")
        import warnings
        warnings.warn(f"torchtpu: precompiled {self._path}: {why}; compiling afresh", stacklevel=4)

    def _write(self):
        import pickle
        import tempfile
        saved = {"version": _FILE_VERSION, "stamp": stamp(),
                 "entries": [data for _, data in self._entries]}
        folder = os.path.dirname(os.path.abspath(self._path))
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, delete=False) as f:
            pickle.dump(saved, f)
        os.replace(f.name, self._path)

    def __call__(self, *args, **kwargs):
        if self._plain is not None:
            return self._plain(*args, **kwargs)
        if self._entries is None:
            self._entries = self._read()
        for aot_fn, _ in self._entries:
            if aot_fn.guard_check(*args, **kwargs):
                _bump("precompile_hits")
                return aot_fn(*args, **kwargs)
        _bump("precompile_misses")
        if self._entries and _C._log_enabled("recompiles"):
            import sys
            f_locals = self._entries[-1][0].prepare_f_locals(*args, **kwargs)
            why = self._entries[-1][0]._artifacts.guard_manager.check_verbose(f_locals)
            print(f"torchtpu: precompiled {self._path}: recompiling: {why}", file=sys.stderr)
        from torch._dynamo.aot_compile import AOTCompiledFunction
        compiled = torch.compile(self._fn, backend="tpu", fullgraph=True, dynamic=self._dynamic,
                                 options={"guard_filter_fn": _serializable_guards})
        try:
            aot_fn = compiled.aot_compile((args, kwargs))
            data = AOTCompiledFunction.serialize(aot_fn).serialized_data
        except (RuntimeError, StaleProgramError) as e:
            if "SerializableCallable" not in str(e) and "not serializable" not in str(e):
                raise
            import warnings
            warnings.warn(f"torchtpu: {getattr(self._fn, '__qualname__', self._fn)} does not "
                          f"serialize ({e}); it is compiled in this process only", stacklevel=2)
            self._plain = compiled
            return compiled(*args, **kwargs)
        self._entries.append((aot_fn, data))
        self._write()
        return aot_fn(*args, **kwargs)


def precompile(fn, path, dynamic=None):
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.optim.Optimizer) and getattr(fn, "__name__", "") == "step":
        return _OptimizerStep(owner, path, dynamic)
    return Precompiled(fn, path, dynamic)
