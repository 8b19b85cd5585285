"""Custom kernels as PyTorch ops: StableHLO text, or a JAX function
(Pallas kernels included; on CPU in interpret mode), becomes
torch.ops.torchtpu_kernels.<name>, a torch.library custom op with a fake
(meta) function.

In eager the op runs the kernel on the input tensors' storages, with no
copy (a wrapper module takes the storages' flat buffers and calls the
kernel). Under torch.compile(backend="tpu") it is not a graph break: the
node is inlined into the graph's module (XLA inlines the call and fuses
across it). Autograd: a user backward (any PyTorch code on tpu tensors, e.g.
another kernel), or for JAX functions the VJP lowered by JAX.

    rms = torchtpu.kernels.stablehlo("rms", text)        # fixed shapes
    rms = torchtpu.kernels.stablehlo("rms", lambda x: text_for(x))  # per shape
    f = torchtpu.kernels.jax(jax_fn)                     # lowered per shape
    y = rms(x)                                           # tensors in, tensors out
"""
import threading

import torch

from . import _C

_NAMESPACE = "torchtpu_kernels"
_KERNELS = {}  # "torchtpu_kernels::name" -> _Definition
_lock = threading.Lock()


class KernelError(ValueError):
    """A kernel that cannot be defined or called; the message names it."""


def _spec(t):
    return (t.dtype, tuple(int(s) for s in t.shape))


class _Definition:
    """One named kernel: StableHLO text per input signature, compiled once
    per signature."""

    def __init__(self, name, text, outputs):
        self.name = name
        self.text = text
        self.outputs = outputs
        self.by_spec = {}

    def kernel(self, specs):
        """(_C._Kernel, compiled eager wrapper or None) for these inputs."""
        hit = self.by_spec.get(specs)
        if hit is not None:
            return hit
        text = self.text(*specs) if callable(self.text) else self.text
        if not isinstance(text, str):
            raise KernelError(f"kernel '{self.name}': StableHLO must be text, got "
                              f"{type(text).__name__}")
        try:
            k = _C._Kernel(self.name, text)
        except RuntimeError as e:
            raise KernelError(str(e).replace("torchtpu: ", "torchtpu: ", 1)) from None
        params = [(d, tuple(s)) for d, s in k.params]
        if params != list(specs):
            raise KernelError(f"kernel '{self.name}': called with {_fmt(specs)} but its @main "
                              f"takes {_fmt(params)}")
        results = [(d, tuple(s)) for d, s in k.results]
        if self.outputs is not None:
            declared = [(d, tuple(s)) for d, s in self.outputs(*specs)]
            if declared != results:
                raise KernelError(f"kernel '{self.name}': declared outputs {_fmt(declared)} but "
                                  f"its @main returns {_fmt(results)}")
        hit = self.by_spec[specs] = [k, None, results]
        return hit

    def compiled(self, specs):
        """The eager wrapper for these inputs, compiled (once): a kernel
        that does not compile fails here, named, in eager and compile
        alike."""
        hit = self.kernel(specs)
        if hit[1] is None:
            k, _, results = hit
            try:
                hit[1] = _C._CompiledGraph(k.flat_module(), list(specs), results, False)
            except RuntimeError as e:
                raise KernelError(f"kernel '{self.name}' does not compile: {e}") from None
        return hit

    def run(self, tensors):
        specs = tuple(_spec(t) for t in tensors)
        for i, t in enumerate(tensors):
            if t.device.type != "tpu":
                raise KernelError(f"kernel '{self.name}': input {i} is on {t.device}, not tpu")
        return list(self.compiled(specs)[1].run(list(tensors), []))


def _fmt(specs):
    return "[" + ", ".join(f"{str(d).replace('torch.', '')}{list(s)}" for d, s in specs) + "]"


class Kernel:
    """A defined kernel: call it with tensors; .op is the torch op."""

    def __init__(self, definition, op):
        self.definition = definition
        self.op = op
        self.__name__ = definition.name

    def __call__(self, *tensors):
        out = self.op(list(tensors))
        return out[0] if len(out) == 1 else tuple(out)


def stablehlo(name, text, *, outputs=None, backward=None):
    """Defines a kernel from StableHLO text (or a function of the inputs'
    (dtype, shape) specs returning text). `outputs(*specs)` may declare the
    result (dtype, shape) list; it is checked against the module.
    `backward(inputs, outputs, grads) -> grads of inputs` enables autograd."""
    if not name.isidentifier():
        raise KernelError(f"kernel name {name!r} must be a Python identifier")
    qualname = f"{_NAMESPACE}::{name}"
    with _lock:
        if qualname in _KERNELS:
            raise KernelError(f"kernel '{name}' is already defined")
        definition = _Definition(name, text, outputs)

        def impl(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            return definition.run(inputs)

        op = torch.library.custom_op(qualname, mutates_args=())(impl)

        @op.register_fake
        def _(inputs):
            _, _, results = definition.kernel(tuple(_spec(t) for t in inputs))
            device = inputs[0].device if inputs else torch.device("tpu")
            return [torch.empty(s, dtype=d, device=device) for d, s in results]

        if backward is not None:
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(*inputs[0], *output)
                ctx.num_inputs = len(inputs[0])

            def bwd(ctx, grads):
                saved = ctx.saved_tensors
                ins, outs = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
                grads = [g if g is not None else torch.zeros_like(o) for g, o in zip(grads, outs)]
                got = backward(list(ins), list(outs), grads)
                if isinstance(got, torch.Tensor):
                    got = [got]
                return list(got)

            op.register_autograd(bwd, setup_context=setup_context)
        _KERNELS[qualname] = definition
    return Kernel(definition, op)


_JAX_DTYPES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float64: "float64", torch.int32: "int32", torch.int64: "int64", torch.int8: "int8",
    torch.uint8: "uint8", torch.bool: "bool", torch.int16: "int16",
}


class _StaticKernels:
    """A JAX kernel with static arguments: like jax.jit(fn,
    static_argnames=...), each new set of static values is its own kernel
    (lowered with those values baked in); tensors are the other arguments."""

    def __init__(self, fn, name, backward, static_argnames):
        self.fn, self.name, self.backward = fn, name, backward
        self.static_argnames = tuple(static_argnames)
        self.by_static = {}

    def __call__(self, *tensors, **static):
        unknown = set(static) - set(self.static_argnames)
        if unknown:
            raise KernelError(f"kernel '{self.name}': {sorted(unknown)} are not static arguments "
                              f"(static_argnames={list(self.static_argnames)})")
        key = tuple(sorted(static.items()))
        try:
            hash(key)
        except TypeError:
            raise KernelError(f"kernel '{self.name}': static arguments must be hashable, got "
                              f"{static}") from None
        k = self.by_static.get(key)
        if k is None:
            import functools
            k = jax(functools.partial(self.fn, **static),
                    name=f"{self.name}__static{len(self.by_static)}", backward=self.backward)
            self.by_static[key] = k
        return k(*tensors)


def jax(fn, *, name=None, backward=None, static_argnames=()):
    """Defines a kernel from a JAX function of arrays (jnp code, or a
    pallas_call; on CPU use interpret=True): lowered with
    jax.jit(fn).lower(...) for each new set of input shapes, like jax.jit;
    `static_argnames` are keyword arguments baked into the lowering, one
    kernel per set of values (jax.jit's static arguments). Its backward is
    JAX's VJP, lowered the same way, unless `backward` is given (as for
    stablehlo)."""
    if static_argnames:
        kname = name or getattr(fn, "__name__", "jax_kernel")
        return _StaticKernels(fn, kname if kname != "<lambda>" else "jax_lambda", backward,
                              static_argnames)
    try:
        import jax as jax_module
    except ImportError as e:
        raise KernelError("torchtpu.kernels.jax needs jax installed (pip install jax)") from e
    import jax.numpy as jnp
    kname = name or getattr(fn, "__name__", "jax_kernel")
    if kname == "<lambda>":
        kname = "jax_lambda"

    def structs(specs):
        out = []
        for i, (d, s) in enumerate(specs):
            if d not in _JAX_DTYPES:
                raise KernelError(f"kernel '{kname}': input {i} has dtype {d}, which JAX kernels "
                                  "do not take")
            out.append(jax_module.ShapeDtypeStruct(s, jnp.dtype(_JAX_DTYPES[d])))
        return out

    def lower(f, specs, what):
        try:
            # keep_unused: every tensor stays a parameter, used or not
            return jax_module.jit(f, keep_unused=True).lower(*structs(specs)).as_text()
        except KernelError:
            raise
        except Exception as e:  # JAX's own error: say which kernel
            raise KernelError(f"kernel '{what}': JAX could not lower it for inputs "
                              f"{_fmt(specs)}: {type(e).__name__}: {e}") from None

    def text(*specs):
        return lower(fn, specs, kname)

    if backward is None:
        vjp_kernels = {}  # number of inputs -> the VJP kernel

        def vjp_of(n):
            def vjp_fn(*args):
                primals, cts = args[:n], args[n:]
                out, pullback = jax_module.vjp(fn, *primals)
                return pullback(tuple(cts) if isinstance(out, (tuple, list)) else cts[0])
            return vjp_fn

        def backward(inputs, outputs, grads):
            n = len(inputs)
            if n not in vjp_kernels:
                vname = f"{kname}_vjp" if n == 1 else f"{kname}_vjp{n}"
                vjp_kernels[n] = stablehlo(
                    vname, lambda *specs: lower(vjp_of(n), specs, vname))
            got = vjp_kernels[n](*inputs, *grads)
            return [got] if isinstance(got, torch.Tensor) else list(got)

    return stablehlo(kname, text, backward=backward)


def _definition_for(op_name):
    """The kernel behind a graph node's op ("torchtpu_kernels::name"), or None."""
    return _KERNELS.get(op_name)
