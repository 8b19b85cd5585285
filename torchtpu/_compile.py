"""torch.compile(backend="tpu"): Dynamo -> AOTAutograd (functional ATen,
core decompositions) -> one StableHLO module per FX graph, every node lowered
by the C lowering table that the eager modes use (torchtpu._C._Graph) ->
PJRT compile (the program caches) -> a callable on the input storages'
buffers.

This file only walks the FX graph and lines each node's arguments up with
its schema; the eager boxed kernel's converter (csrc/torch/args.h) reads
them, and the lowering, the module and its execution are C. A graph the
table cannot lower whole (an op without a row, a row that declines) runs
eagerly instead, op by op, with a warning naming the op: a graph break in
effect, never an error.

Modes: "default", "reduce-overhead" and "max-autotune" are accepted and
mean the same thing here: XLA always compiles with its optimising pipeline,
and one compiled graph is already one launch. Dynamic shapes
(dynamic=True, mark_dynamic, or Dynamo's automatic dynamic after a shape
change) run one program per size bucket, the padding masked
(torchtpu._buckets); a graph that analysis declines is specialised: each
new set of concrete shapes is retraced into a static graph and compiled
once (metric compile_specializations)."""
import operator
import re
import sys
import warnings

import torch
import torch.fx

from . import _C
from . import spmd as _spmd

# An FX node's value id among _C._Graph.add_node's arguments.
_GraphValue = _C._GraphValue


class _Number:
    """A graph node whose value is a Python int (an op's SymInt result in
    a static graph): arguments that read it get the number."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

_warned = set()


def _bump(name, delta=1):
    _C._metrics_add(name, delta)


def _log_enabled(what):
    return _C._log_enabled(what)


# Ops indexing self along a dim with an index tensor (self, dim, index, ...):
# the exception CPU raises for an index out of range, and whether it wraps
# negative indices.
_DIM_INDEXED = {
    "aten::gather": (RuntimeError, False), "aten::scatter": (RuntimeError, False),
    "aten::scatter_": (RuntimeError, False), "aten::scatter_add": (RuntimeError, False),
    "aten::scatter_add_": (RuntimeError, False), "aten::scatter_reduce": (RuntimeError, False),
    "aten::scatter_reduce_": (RuntimeError, False), "aten::index_add": (RuntimeError, False),
    "aten::index_add_": (RuntimeError, False), "aten::index_copy": (IndexError, False),
    "aten::index_copy_": (IndexError, False), "aten::index_fill": (IndexError, True),
    "aten::index_fill_": (IndexError, True), "aten::index_reduce": (IndexError, False),
    "aten::index_reduce_": (IndexError, False),
}


class _Unsupported(Exception):
    """The graph cannot become one program; it runs eagerly instead."""


def _spec(t, allow_cpu_scalar=False, allow_cpu=False):
    if not isinstance(t, torch.Tensor):
        raise _Unsupported(f"a {type(t).__name__} value where a tensor was expected")
    cpu_ok = allow_cpu or (allow_cpu_scalar and t.dim() == 0)
    if t.device.type != "tpu" and not (t.device.type == "cpu" and cpu_ok):
        raise _Unsupported(f"a tensor on {t.device}")
    for s in t.shape:
        if not isinstance(s, int):
            raise _Unsupported("a symbolic shape")
    return (t.dtype, list(t.shape))


def _kernel_definition(target):
    schema_name = target._schema.name
    if not schema_name.startswith("torchtpu_kernels::"):
        return None
    from . import kernels
    return kernels._definition_for(schema_name)


def _op_name(target):
    schema = target._schema
    overload = schema.overload_name
    return schema.name + ("." + overload if overload else "")


class _Builder:
    """One FX graph -> a _C._Graph, node by node."""

    def __init__(self, gm, input_alias_outputs=None, layout_outputs=frozenset()):
        self.gm = gm
        # graph output indices to return with their traced layout
        # (_storage_layouts); None: all
        self.layout_outputs = layout_outputs
        # graph output index -> the input AOTAutograd rebuilds it from (its
        # output is an alias of that input); None: not known (a backward
        # graph, a part of a split graph)
        self.input_alias_outputs = input_alias_outputs
        self.ids = {}        # fx node -> value id, or a list of ids (multi-output)
        self.inputs = []     # ("arg", placeholder index) or ("const", tensor)
        self.input_specs = []
        self.with_rng = False
        # Run-time checks CPU's kernels make (_check_divisor,
        # _check_indices): (value id of a "the check fails" flag, the
        # exception class, its message). Then the errors CPU raises for a
        # literal argument (a divisor that reads as 0, an integer to a
        # negative power): raised when the graph runs.
        self.flags, self.literal_errors = [], []
        self.checks = []  # (output index of a flag, exception class, message)

    def _value(self, a):
        if isinstance(a, torch.fx.Node):
            v = self.ids.get(a)
            if v is None or isinstance(v, list):
                raise _Unsupported(f"argument {a.name} is not a single tensor value")
            return v
        raise _Unsupported(f"a constant {type(a).__name__} where a tensor was expected")

    def _args(self, node):
        """The node's value for each argument of its schema, FX nodes as
        graph values: the C++ builder classifies them by the schema."""
        def ref(a):
            if isinstance(a, torch.fx.Node) and isinstance(self.ids.get(a), _Number):
                return self.ids[a].value
            return _GraphValue(self._value(a)) if isinstance(a, torch.fx.Node) else a

        out = []
        for i, sa in enumerate(node.target._schema.arguments):
            if i < len(node.args) and not sa.kwarg_only:
                a = node.args[i]
            elif sa.name in node.kwargs:
                a = node.kwargs[sa.name]
            elif sa.has_default_value():
                a = sa.default_value
            else:
                a = None
            out.append([ref(e) for e in a] if isinstance(a, (list, tuple)) else ref(a))
        return out

    def build(self):
        nodes = list(self.gm.graph.nodes)
        # Inputs first: placeholders, then tensor constants (get_attr).
        placeholders = [n for n in nodes if n.op == "placeholder"]
        for i, n in enumerate(placeholders):
            val = n.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise _Unsupported(f"input {n.name} is not a tensor")
            self.input_specs.append(_spec(val, allow_cpu_scalar=True))
            # A 0-dim CPU tensor (an optimizer's step count, a scalar the
            # user passes) is uploaded at each call, as eager passes it as a
            # run-time scalar.
            self.inputs.append(("cpu" if val.device.type == "cpu" else "arg", i))
        for n in nodes:
            if n.op == "get_attr":
                t = getattr(self.gm, n.target)
                if not isinstance(t, torch.Tensor):
                    raise _Unsupported(f"attribute {n.target} is not a tensor")
                self.input_specs.append((t.dtype, list(t.shape)))
                # Compilers may run under AOTAutograd's fake mode: the
                # constant is real data, uploaded once, outside it.
                from torch._subclasses.fake_tensor import unset_fake_temporarily
                with unset_fake_temporarily():
                    self.inputs.append(("const", t.detach().to("tpu")))
            elif n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
                if _C._graph_op_needs_rng(_op_name(n.target)):
                    self.with_rng = True
        graph = _C._Graph(self.input_specs, self.with_rng)
        placeholder_index = {n: i for i, n in enumerate(placeholders)}
        self.writes = {}  # placeholder index -> value written into it
        self.write_srcs = {}  # placeholder index -> that value's traced tensor
        k = 0
        for n in placeholders:
            self.ids[n] = k
            k += 1
        for n in nodes:
            if n.op == "get_attr":
                self.ids[n] = k
                k += 1
        outputs = None
        for n in nodes:
            if n.op in ("placeholder", "get_attr"):
                continue
            if n.op == "output":
                outputs = n.args[0]
                continue
            if n.op != "call_function":
                raise _Unsupported(f"node {n.name} ({n.op})")
            if n.target is operator.getitem:
                src, idx = n.args
                ids = self.ids.get(src)
                if isinstance(ids, list) and ids[idx] is None and not n.users:
                    # an output the op does not compute (a mask left it
                    # out), taken and dropped by a retraced graph
                    continue
                if not isinstance(ids, list) or ids[idx] is None:
                    raise _Unsupported(f"getitem of {src.name}")
                self.ids[n] = ids[idx]
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                raise _Unsupported(f"call to {n.target}")
            if n.target is torch.ops.aten.copy_.default and n.args[0] in placeholder_index:
                # An input mutation AOTAutograd kept in the graph: the
                # value becomes that input's next contents (the runner
                # installs it in the input's storage).
                dst, src = n.args[0], n.args[1]
                if _spec(dst.meta["val"], True) != _spec(src.meta["val"], True):
                    raise _Unsupported("copy_ into an input with another dtype or shape")
                self.writes[placeholder_index[dst]] = self._value(src)
                self.write_srcs[placeholder_index[dst]] = src.meta["val"]
                self.ids[n] = self._value(src)
                continue
            name = _op_name(n.target)
            kernel = _kernel_definition(n.target)
            if kernel is not None:
                # A custom kernel (torchtpu.kernels): its module is inlined.
                ins = list(n.args[0]) if n.args else list(n.kwargs.get("inputs", []))
                specs = tuple((a.meta["val"].dtype, tuple(a.meta["val"].shape)) for a in ins)
                # A kernel that is wrong (does not parse or compile, wrong
                # declared shapes) raises KernelError naming it, as in eager.
                k = kernel.compiled(specs)[0]
                try:
                    self.ids[n] = list(graph.add_kernel(k, [self._value(a) for a in ins]))
                except (RuntimeError, ValueError) as e:
                    raise _Unsupported(str(e)) from None
                continue
            if not _C._graph_op_supported(name):
                raise _Unsupported(f"{name} has no lowering")
            if any(a.alias_info is not None and a.alias_info.is_write
                   for a in n.target._schema.arguments):
                raise _Unsupported(f"{name} mutates its input")
            val = n.meta.get("val")
            multi = isinstance(val, (tuple, list))
            vals = list(val) if multi else [val]
            # A node whose value PyTorch keeps on the CPU (a lifted constant,
            # a mask built from Python numbers) is computed on the device
            # like the rest: eager would have used it as a run-time value.
            # Only a graph output must come back on the CPU (below).
            # A number among the results (the fused attention's max_q,
            # max_k) is a constant of this static graph, as in eager.
            specs = [_spec(v, allow_cpu=True) for v in vals
                     if v is not None and not isinstance(v, int)]
            args = self._args(n)
            try:
                ids = graph.add_node(name, args, specs)
            except (RuntimeError, TypeError, ValueError) as e:
                raise _Unsupported(str(e)) from None
            it = iter(ids)
            full = [_Number(v) if isinstance(v, int) else next(it) if v is not None else None
                    for v in vals]
            self.ids[n] = full if multi else full[0]
            self._check_divisor(graph, n, name)
            self._check_pow_exponent(n, name)
            self._check_literal_scalars(n)
            self._check_indices(graph, n, name)
            self._check_targets(graph, n, name)
        # A Python number output (a size the graph returns: under dynamic
        # shapes it is a constant of the specialised graph) is returned
        # as it is, beside the program's tensors.
        self.out_consts = {}
        for k, o in enumerate(outputs):
            if isinstance(o, torch.fx.Node) and isinstance(self.ids.get(o), _Number):
                self.out_consts[k] = self.ids[o].value
            elif isinstance(o, (bool, int, float)):
                self.out_consts[k] = o
            elif o is not None and not isinstance(o, torch.fx.Node):
                raise _Unsupported(f"a non-tensor output ({type(o).__name__})")
            elif o is not None:
                v = self.ids.get(o)
                if v is None or isinstance(v, list):
                    raise _Unsupported(f"output {o.name} is not a tensor value")
        # outputs PyTorch expects on the CPU (by output slot)
        self.out_cpu = {k for k, o in enumerate(outputs) if isinstance(o, torch.fx.Node)
                        and o.meta["val"].device.type == "cpu"}
        # An FX value returned twice (`v4 = v1.copy_(x); return v1, v4`) is
        # one tensor object in eager: the runner returns it twice, so a
        # later graph does not see two aliasing inputs where eager has one.
        first, self.out_same = {}, {}
        for k, o in enumerate(outputs):
            if isinstance(o, torch.fx.Node):
                if o in first:
                    self.out_same[k] = first[o]
                else:
                    first[o] = k
        self.out_aliases = self._input_aliases(placeholders, outputs)
        # Outputs: tensors from the graph; None stays None. An output laid
        # out in a storage of an intermediate (see _storage_layouts) reads
        # the program result holding that storage.
        layouts, storage_values = self._storage_layouts(graph, nodes, placeholders, outputs)
        self.out_slots = []
        self.out_views = {}  # output slot -> (size, stride, offset) in its storage's result
        out_ids, out_specs = [], []
        storage_slot = {}
        for k, o in enumerate(outputs):
            if o is None or k in self.out_consts:
                self.out_slots.append(None)
            elif k in layouts:
                g, geometry = layouts[k]
                if g not in storage_slot:
                    storage_slot[g] = len(out_ids)
                    out_ids.append(storage_values[g][0])
                    out_specs.append(storage_values[g][1])
                self.out_slots.append(storage_slot[g])
                self.out_views[k] = geometry
            else:
                self.out_slots.append(len(out_ids))
                out_ids.append(self.ids[o])
                out_specs.append(_spec(o.meta["val"], allow_cpu=True))
        # Program outputs that return an input unchanged (a forward graph
        # saving an input for its backward): a partitioned run hands back
        # the input itself, whose sharding the backward then reads.
        self.out_inputs = {self.out_slots[k]: placeholder_index[o]
                           for k, o in enumerate(outputs)
                           if isinstance(o, torch.fx.Node) and o.op == "placeholder"
                           and k not in layouts and self.out_slots[k] is not None
                           and self.inputs[placeholder_index[o]][0] == "arg"}
        # Then one output per mutated input, written back by the runner.
        self.out_writes = [-1] * len(out_ids)
        for i, v in sorted(self.writes.items()):
            if self.inputs[i][0] != "arg":
                raise _Unsupported("a mutated CPU input")
            out_ids.append(v)
            out_specs.append(self.input_specs[i])
            self.out_writes.append(i)
        # One flag output per (exception, message): the checks of one kind
        # are or-ed together.
        kinds = {}
        for f, exc, msg in self.flags:
            kinds.setdefault((exc, msg), []).append(f)
        for (exc, msg), fs in kinds.items():
            flag = fs[0]
            try:
                for f in fs[1:]:
                    flag = graph.add_node("aten::logical_or", [_GraphValue(flag), _GraphValue(f)],
                                          [(torch.bool, [])])[0]
            except (RuntimeError, TypeError, ValueError) as e:
                raise _Unsupported(str(e)) from None
            self.checks.append((len(out_ids), exc, msg))
            out_ids.append(flag)
            out_specs.append((torch.bool, []))
            self.out_writes.append(-1)
        text = graph.finish(out_ids)
        return text, out_specs

    def _check_divisor(self, graph, n, name):
        """An integer division (//, %, fmod, div with a rounding mode) by
        zero raises on the CPU, so it does here: the program also computes
        whether a divisor is 0, and the runner raises after reading it (a
        literal 0 raises before the program runs)."""
        base = name.split(".")[0]
        if base not in ("aten::div", "aten::floor_divide", "aten::remainder", "aten::fmod"):
            return
        if base == "aten::div" and (len(n.args) < 3 or n.args[2] is None) and \
                n.kwargs.get("rounding_mode") is None:
            return  # true division
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.numel() == 0 or \
                val.dtype.is_floating_point or val.dtype.is_complex or val.dtype == torch.bool:
            return
        # CPU's kernel reads the divisor as the result dtype, wrapping: a
        # uint8 tensor // 256 divides by 0.
        y = n.args[1] if len(n.args) > 1 else n.kwargs.get("other")
        if isinstance(y, (int, float, bool)):
            from torch._subclasses.fake_tensor import unset_fake_temporarily
            try:
                with unset_fake_temporarily():  # (the graph is built under fake mode)
                    zero = torch.tensor(y).to(val.dtype).item() == 0
            except (RuntimeError, OverflowError):
                zero = y == 0
            if zero:
                self.literal_errors.append(f"ZeroDivisionError (in {name} of a compiled graph)")
            return
        if not isinstance(y, torch.fx.Node) or not isinstance(y.meta.get("val"), torch.Tensor):
            return
        yv = y.meta["val"]
        try:
            yid = self._value(y)
            if yv.dtype != val.dtype:
                yid = graph.add_node("aten::_to_copy", [_GraphValue(yid), val.dtype],
                                     [(val.dtype, list(yv.shape))])[0]
            eq = graph.add_node("aten::eq.Scalar", [_GraphValue(yid), 0],
                                [(torch.bool, list(yv.shape))])[0]
            flag = graph.add_node("aten::any", [_GraphValue(eq)], [(torch.bool, [])])[0]
        except (RuntimeError, TypeError, ValueError) as e:
            raise _Unsupported(str(e)) from None
        self.flags.append((flag, RuntimeError,
                           "ZeroDivisionError (an integer division of a compiled graph)"))

    def _check_literal_scalars(self, n):
        """A literal number its op cannot convert to the dtype it computes in
        (`uint8.masked_fill_(m, -1.25)`, `clamp(min=300)` of uint8, a fill
        into an empty slice, `linspace(0, 300, dtype=uint8)`) raises CPU's
        overflow error, as in eager: the meta kernels traced do not check,
        so the node is checked by eager's own rule (the C++ dispatcher's)."""
        target = n.target
        if not isinstance(target, torch._ops.OpOverload):
            return

        def val(a):
            if isinstance(a, torch.fx.Node):
                # a lifted constant (`masked_fill_(m, torch.tensor(300))`):
                # its value is known, and checked as eager checks it
                if (a.target is torch.ops.aten.lift_fresh_copy.default
                        and a.args[0].op == "get_attr"):
                    return getattr(self.gm, a.args[0].target)
                return a.meta.get("val")
            if isinstance(a, (list, tuple)):
                return type(a)(val(x) for x in a)
            return a

        from torch._subclasses.fake_tensor import unset_fake_temporarily
        schema = target._schema
        with unset_fake_temporarily():  # (a constant's item() is a real read)
            err = _C._literal_scalar_error(schema.name, schema.overload_name,
                                           *[val(a) for a in n.args],
                                           **{k: val(v) for k, v in n.kwargs.items()})
        if err is not None:
            self.literal_errors.append(err.split("\n")[0])

    def _check_pow_exponent(self, n, name):
        """CPU's pow refuses an integer self to a negative integer literal
        power (its meta check, which the traced decomposition skips)."""
        if name not in ("aten::pow.Tensor_Scalar", "aten::pow_.Scalar"):
            return
        x, e = (list(n.args) + [None, None])[:2]
        xv = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if (isinstance(xv, torch.Tensor) and not xv.dtype.is_floating_point
                and not xv.dtype.is_complex and isinstance(e, (int, bool)) and e < 0):
            self.literal_errors.append("Integers to negative integer powers are not allowed.")

    def _out_of_range_flag(self, graph, idx, size, ignore=None, lo=0):
        """A 0-d bool value: whether an element of the index node idx lies
        outside [lo, size) (an element equal to ignore aside)."""
        vid, shape = self._value(idx), list(idx.meta["val"].shape)

        def node(op, args, out_shape=shape):
            return graph.add_node(op, args, [(torch.bool, out_shape)])[0]

        v = _GraphValue
        try:
            low = node("aten::lt.Scalar", [v(vid), lo])
            high = node("aten::ge.Scalar", [v(vid), size])
            bad = node("aten::logical_or", [v(low), v(high)])
            if ignore is not None:
                kept = node("aten::ne.Scalar", [v(vid), ignore])
                bad = node("aten::logical_and", [v(bad), v(kept)])
            return node("aten::any", [v(bad)], [])
        except (RuntimeError, TypeError, ValueError) as e:
            raise _Unsupported(str(e)) from None

    def _check_targets(self, graph, n, name):
        """nll_loss with a target outside [0, classes) (other than
        ignore_index) raises IndexError on the CPU, as in the eager modes."""
        if name not in ("aten::nll_loss_forward", "aten::nll_loss2d_forward"):
            return
        x, t = n.args[0], n.args[1]
        ignore = n.args[4] if len(n.args) > 4 else n.kwargs.get("ignore_index", -100)
        if not isinstance(x, torch.fx.Node) or not isinstance(t, torch.fx.Node) or \
                not isinstance(ignore, int):
            return
        xv, tv = x.meta.get("val"), t.meta.get("val")
        if not isinstance(xv, torch.Tensor) or not isinstance(tv, torch.Tensor) or \
                not tv.numel() or xv.dim() < 1:
            return
        classes = xv.shape[0 if xv.dim() == 1 else 1]
        flag = self._out_of_range_flag(graph, t, int(classes), ignore)
        self.flags.append((flag, IndexError, "Target is out of bounds (nll_loss of a compiled graph)"))

    def _check_indices(self, graph, n, name):
        """index_select and embedding with an index outside [0, size) raise
        on the CPU (the eager modes raise likewise): the program also
        computes whether one is, and the runner raises CPU's error."""
        base = name.split(".")[0]
        if base in _DIM_INDEXED:
            # gather / scatter* / index_add / copy / fill / reduce (self, dim, index, ...)
            src, dim, idx = (list(n.args) + [None] * 3)[:3]
            exc, negative_ok = _DIM_INDEXED[base]
            self._range_flag(graph, src, idx, dim, exc, negative_ok, base)
            return
        if base in ("aten::masked_scatter", "aten::masked_scatter_"):
            # a source with fewer elements than the mask has ones: CPU's
            # RuntimeError (XLA would reuse the source's last element)
            _, mask, source = (list(n.args) + [None] * 3)[:3]
            mv = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
            sv = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
            if isinstance(mv, torch.Tensor) and isinstance(sv, torch.Tensor) and mv.numel():
                try:
                    ones = graph.add_node("aten::sum", [_GraphValue(self._value(mask))],
                                          [(torch.int64, [])])[0]
                    flag = graph.add_node("aten::gt.Scalar", [_GraphValue(ones), sv.numel()],
                                          [(torch.bool, [])])[0]
                except (RuntimeError, TypeError, ValueError) as e:
                    raise _Unsupported(str(e)) from None
                self.flags.append((flag, RuntimeError,
                                   "Number of elements of source < number of ones in mask "
                                   "(masked_scatter of a compiled graph)"))
            return
        if base in ("aten::take", "aten::put", "aten::put_"):
            src, idx = (list(n.args) + [None] * 2)[:2]
            self._range_flag(graph, src, idx, None, IndexError, True, base)
            return
        if base in ("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
                    "aten::_unsafe_index"):
            src, indices = (list(n.args) + [None] * 2)[:2]
            for k, idx in enumerate(indices or []):
                self._range_flag(graph, src, idx, k, IndexError, True, base)
            return
        if name == "aten::index_select":
            src, dim, idx = (list(n.args) + [None] * 3)[:3]
        elif name == "aten::embedding":
            src, idx, dim = n.args[0], n.args[1], 0
        else:
            return
        if not isinstance(src, torch.fx.Node) or not isinstance(idx, torch.fx.Node) or \
                not isinstance(dim, int):
            return
        sv, iv = src.meta.get("val"), idx.meta.get("val")
        if not isinstance(sv, torch.Tensor) or not isinstance(iv, torch.Tensor) or not iv.numel():
            return
        d = dim % max(sv.dim(), 1)
        size = sv.shape[d] if sv.dim() else 1
        flag = self._out_of_range_flag(graph, idx, int(size))
        # CPU's errors: a RuntimeError for dim 1 of an n-d source and for an
        # empty n-d source, else IndexError (embedding too)
        if name == "aten::embedding" or sv.dim() <= 1 or (d != 1 and sv.numel()):
            self.flags.append((flag, IndexError, "index out of range in self"))
        else:
            self.flags.append((flag, RuntimeError,
                               "INDICES element is out of DATA bounds (index_select of a "
                               "compiled graph)"))

    def _range_flag(self, graph, src, idx, dim, exc, negative_ok, base):
        """An index node idx into dim of src (None: src flattened) outside
        [0, size) ([-size, size) where CPU wraps negatives) raises exc, as
        the eager modes raise CPU's error."""
        if not isinstance(src, torch.fx.Node) or not isinstance(idx, torch.fx.Node):
            return
        sv, iv = src.meta.get("val"), idx.meta.get("val")
        if not isinstance(sv, torch.Tensor) or not isinstance(iv, torch.Tensor) or not iv.numel() or \
                iv.dtype.is_floating_point or iv.dtype == torch.bool:
            return
        if dim is None:
            size = sv.numel()
        elif isinstance(dim, int):
            size = sv.shape[dim % sv.dim()] if sv.dim() else 1
        else:
            return
        flag = self._out_of_range_flag(graph, idx, int(size), lo=-int(size) if negative_ok else 0)
        self.flags.append((flag, exc, f"index out of bounds ({base[6:]} of a compiled graph)"))

    def _storage_layouts(self, graph, nodes, placeholders, outputs):
        """The outputs eager would return with a layout of their own: views
        of an intermediate (v = a @ b; return v, v.t(), v[1:]) and results
        whose traced strides are not contiguous (the sum of a transposed
        tensor keeps its layout).

        The program's results are fresh contiguous buffers; AOTAutograd
        rebuilds only the aliases that need grad (see its Note [AOT
        Autograd: outputs aliasing inputs or intermediates!]), the rest is
        the compiler's to lay out, as Inductor does. So the intermediate
        owning each such storage is returned once, permuted to its
        physical order, and each output is that buffer viewed with its
        traced (size, stride, offset): outputs share storage exactly where
        eager's do, with eager's strides.

        Returns ({output slot: (storage, (size, stride, offset))},
        {storage: (value id of the physical buffer, its spec)})."""
        from torch.multiprocessing.reductions import StorageWeakRef

        def key(v):
            return StorageWeakRef(v.untyped_storage())

        # storages of inputs (and of values written into them) are not
        # intermediates: _input_aliases handles those outputs
        taken = set()
        for n in placeholders:
            if isinstance(n.meta.get("val"), torch.Tensor):
                taken.add(key(n.meta["val"]))
        for v in self.write_srcs.values():
            taken.add(key(v))
        # storage -> the first node computing a value in it: its owner
        owners = {}
        for n in nodes:
            if n.op != "call_function" or n.target is operator.getitem:
                continue
            val = n.meta.get("val")
            ids = self.ids.get(n)
            vals, ids = (list(val), ids) if isinstance(val, (tuple, list)) else ([val], [ids])
            if not isinstance(ids, list) or len(ids) != len(vals):
                continue
            for v, vid in zip(vals, ids):
                if (isinstance(v, torch.Tensor) and vid is not None and v.device.type == "tpu"
                        and v.untyped_storage().nbytes()):
                    owners.setdefault(key(v), (vid, v, n))
        groups = {}
        for k, o in enumerate(outputs):
            if not isinstance(o, torch.fx.Node) or k in self.out_cpu or k in self.out_aliases:
                continue
            if self.layout_outputs is not None and k not in self.layout_outputs:
                continue
            v = o.meta["val"]
            if not isinstance(v, torch.Tensor) or not v.untyped_storage().nbytes():
                continue
            g = key(v)
            if g in taken or g not in owners or owners[g][1].dtype != v.dtype:
                continue  # (a view with another dtype: the computed value stands)
            groups.setdefault(g, []).append((k, v))
        layouts, values = {}, {}
        eager = _eager_values(nodes) if groups else {}
        for g, members in groups.items():
            vid, owner, node = owners[g]
            geometry = [(k, (tuple(v.shape), tuple(v.stride()), v.storage_offset()))
                        for k, v in members]
            layout = (tuple(owner.stride()) if _physical_order(owner.shape, owner.stride(), owner)
                      is not None else None)
            # Eager's strides where a Python meta kernel (a decomposition:
            # copysign is where(signbit(b), ...); floor_divide's) or an
            # operand's layout made the traced ones differ (_eager_values);
            # the outputs viewing it then have their views' eager geometry.
            ev = eager.get(node)
            if ev is not None and _physical_order(ev.shape, ev.stride()) is not None:
                geos = [(k, eager.get(outputs[k])) for k, _ in members]
                if all(e is not None for _, e in geos):
                    layout = tuple(ev.stride())
                    geometry = [(k, (tuple(e.shape), tuple(e.stride()), e.storage_offset()))
                                for k, e in geos]
            if len(members) == 1 and outputs[members[0][0]] is node:
                if layout is None or _is_contiguous(owner.shape, layout):
                    continue  # the common case: the plain result is eager's layout
            if layout is None:
                continue  # an owner with gaps or overlaps: computed values stand
            perm = _physical_order(owner.shape, layout)
            phys = [owner.shape[d] for d in perm]
            if perm != list(range(owner.dim())):
                try:
                    vid = graph.add_node("aten::permute", [_GraphValue(vid), perm],
                                         [(owner.dtype, phys)])[0]
                except (RuntimeError, TypeError, ValueError) as e:
                    raise _Unsupported(str(e)) from None
            values[g] = (vid, (owner.dtype, phys))
            for k, geo in geometry:
                layouts[k] = (g, geo)
        return layouts, values

    def _input_aliases(self, placeholders, outputs):
        """Output slot -> how it views a tpu input, for the outputs that
        alias one: (placeholder index, size, stride, offset relative to the
        input's, the input's stride).

        The program's results are fresh contiguous buffers. AOTAutograd
        rebuilds an output that aliases an input from the input and our
        result: by replaying the views, or, where it cannot (a view with
        symbolic sizes, as every specialised dynamic graph has), by
        input.as_strided(result.size(), result.stride(),
        result.storage_offset()) -- which reads the input in the wrong order
        when the view is not contiguous (a transpose), and at the wrong
        place when it has an offset. So such an output is returned as what
        eager returns: a view of the input's storage with the traced
        layout."""
        from torch.multiprocessing.reductions import StorageWeakRef

        def key(v):
            return StorageWeakRef(v.untyped_storage())

        storages = {}
        for i, n in enumerate(placeholders):
            v = n.meta["val"]
            if self.inputs[i][0] == "arg" and v.untyped_storage().nbytes():
                storages.setdefault(key(v), (i, v))
        # A mutated input's new contents: the functional graph computes them
        # in a storage of its own, and an output viewing the input after the
        # mutation views that storage. Where the written value has the
        # input's layout there, that storage stands for the input's -- for
        # the outputs AOTAutograd says alias that input (another output in
        # that storage, a view of an intermediate copied into the input, is
        # no alias of the input in eager).
        written = {}
        for i, src in self.write_srcs.items():
            v = placeholders[i].meta["val"]
            if (self.inputs[i][0] == "arg" and src.untyped_storage().nbytes()
                    and src.dtype == v.dtype and _same_layout(v.shape, src.stride(), v.stride())):
                written.setdefault(key(src), (i, src))
        known = self.input_alias_outputs or {}
        aliases = {}
        for k, o in enumerate(outputs):
            if not isinstance(o, torch.fx.Node) or k in self.out_cpu:
                continue
            v = o.meta["val"]
            if not v.untyped_storage().nbytes():
                continue
            hit = storages.get(key(v))
            if hit is None and k in known:
                hit = written.get(key(v))
            if hit is None or (k in known and known[k] != hit[0]):
                continue
            i, base = hit
            if v.dtype != base.dtype:
                continue  # a view with another dtype: the computed value stands
            aliases[k] = (i, tuple(v.shape), tuple(v.stride()),
                          v.storage_offset() - base.storage_offset(), tuple(base.stride()))
        return aliases


def _physical_order(shape, stride, t=None):
    """The dimensions from outermost to innermost in memory, when the layout
    is a permutation of a contiguous one (and, given the tensor t, covers
    its storage from offset 0); else None."""
    if t is not None and (t.storage_offset() != 0 or
                          t.untyped_storage().nbytes() != t.numel() * t.element_size()):
        return None
    perm = sorted(range(len(shape)), key=lambda d: -stride[d])
    expect = 1
    for d in reversed(perm):
        if shape[d] != 1 and stride[d] != expect:
            return None
        expect *= shape[d]
    return perm


def _same_layout(shape, stride, other):
    """Whether strides `stride` and `other` of a tensor of `shape` address
    the same elements (they may differ only where a dimension has size 1)."""
    return len(stride) == len(other) and all(
        z == 1 or a == b for z, a, b in zip(shape, stride, other))


def _is_contiguous(shape, stride):
    expect = 1
    for z, st in zip(reversed(shape), reversed(stride)):
        if z != 1 and st != expect:
            return False
        expect *= z
    return True


# TensorIterator ops whose overloads lack the pointwise tag
_UNTAGGED_POINTWISE = ("aten::floor_divide", "aten::rsub")


def _pointwise_strides(node, val):
    """The strides CPU's TensorIterator gives the result of a pointwise op
    node (its tensor operands' layouts, in argument order), where they
    differ from the traced ones; else None."""
    if not isinstance(node.target, torch._ops.OpOverload) or not (
            torch.Tag.pointwise in node.target.tags or
            node.target._schema.name in _UNTAGGED_POINTWISE):
        return None
    from torch._prims_common import compute_elementwise_output_strides
    ops = [a.meta["val"] for a in node.all_input_nodes
           if isinstance(a.meta.get("val"), torch.Tensor)]
    if not ops:
        return None
    try:
        shape = torch.broadcast_shapes(*[t.shape for t in ops])
        if tuple(shape) != tuple(val.shape):
            return None
        strides = tuple(compute_elementwise_output_strides(*[t.expand(shape) for t in ops]))
    except Exception:  # noqa: BLE001 - no opinion: the traced layout stands
        return None
    if strides == tuple(val.stride()) or _physical_order(val.shape, strides) is None:
        return None
    return strides


# The functional forms of in-place writes (functionalization's): the result
# is the written tensor, which keeps its own layout in eager.
_WRITES_INTO_FIRST = ("aten::slice_scatter", "aten::select_scatter", "aten::diagonal_scatter",
                      "aten::as_strided_scatter", "aten::copy")


# Copies laid out like their operand (memory_format=torch.preserve_format):
# `v.to(torch.bool)` of a pointwise result whose eager layout differs from
# its traced one keeps the eager one.
_PRESERVES_LAYOUT = ("aten::_to_copy", "aten::clone")


def _eager_values(nodes):
    """{node: a meta tensor with the geometry eager gives its value}, for
    the nodes where that differs from the traced value's: pointwise results
    laid out by CPU's TensorIterator over their operands' eager layouts,
    views of those replayed, copies preserving them, functional in-place
    writes keeping their target's. Other nodes keep the traced geometry."""
    from torch._prims_common import compute_elementwise_output_strides

    eager = {}

    def ev(a):
        if not isinstance(a, torch.fx.Node):
            return a
        e = eager.get(a)
        return e if e is not None else a.meta.get("val")

    for n in nodes:
        target = n.target if n.op == "call_function" else None
        val = n.meta.get("val")
        if not isinstance(target, torch._ops.OpOverload) or not isinstance(val, torch.Tensor) \
                or not n.args or val.layout != torch.strided:
            continue
        schema = target._schema
        try:
            if torch.Tag.pointwise in target.tags or schema.name in _UNTAGGED_POINTWISE:
                ops = [ev(a) for a in n.args if isinstance(a, torch.fx.Node)]
                ops = [t for t in ops if isinstance(t, torch.Tensor)]
                if not ops or not any(isinstance(a, torch.fx.Node) and a in eager for a in n.args) \
                        and _pointwise_strides(n, val) is None:
                    continue  # operands as traced, and their meta agrees with CPU
                shape = tuple(val.shape)
                if tuple(torch.broadcast_shapes(*[t.shape for t in ops])) != shape:
                    continue
                strides = tuple(compute_elementwise_output_strides(*[t.expand(shape) for t in ops]))
                e = torch.empty_strided(shape, strides, dtype=val.dtype, device="meta")
            elif schema.returns and schema.returns[0].alias_info is not None \
                    and not schema.returns[0].alias_info.is_write:
                if n.args[0] not in eager:
                    continue
                e = target(ev(n.args[0]), *[ev(a) for a in n.args[1:]], **n.kwargs)
            elif schema.name == "aten::index" and schema.overload_name == "Tensor":
                # CPU's TensorIterator over self and the indices, as eager
                # computes it (dispatch.cpp index_result_strides; fuzz seed
                # 1104669: the meta kernel orders some layouts otherwise).
                indices = [ev(a) for a in n.args[1]]
                if not isinstance(ev(n.args[0]), torch.Tensor) or \
                        any(t is not None and not isinstance(t, torch.Tensor) for t in indices):
                    continue
                strides = _C._index_result_strides(ev(n.args[0]), indices, list(val.shape))
                if strides is None:
                    continue
                e = torch.empty_strided(tuple(val.shape), strides, dtype=val.dtype, device="meta")
            elif schema.name in _PRESERVES_LAYOUT:
                # (memory_format=preserve: the operand's eager layout)
                if n.args[0] not in eager or n.kwargs.get("memory_format") not in (
                        None, torch.preserve_format):
                    continue
                e = torch.empty_like(ev(n.args[0]), dtype=val.dtype, device="meta")
            elif schema.name in _WRITES_INTO_FIRST:
                base = ev(n.args[0])
                if n.args[0] not in eager or tuple(base.shape) != tuple(val.shape):
                    continue
                e = torch.empty_strided(tuple(base.shape), base.stride(), dtype=val.dtype,
                                        device="meta")
            else:
                continue
        except Exception:  # noqa: BLE001 - no opinion: the traced layout stands
            continue
        if isinstance(e, torch.Tensor) and (tuple(e.stride()) != tuple(val.stride()) or
                                            e.storage_offset() != val.storage_offset()
                                            or n.args[0] in eager):
            eager[n] = e
    return eager


_CHECK_KINDS = {RuntimeError: 0, IndexError: 1, ValueError: 2}  # _C._push_graph_check's kinds


def _runner(compiled, *, inputs, out_slots, out_writes, out_cpu=(), out_aliases=None,
            out_views=None, checks=(), literal_errors=(), out_same=None, out_consts=None):
    consts = [t for kind, t in inputs if kind == "const"]
    arg_pos = [(i, kind == "cpu") for kind, i in inputs if kind in ("arg", "cpu")]
    # Output k -> the position, among the graph's tensors, of the input it
    # rewrites (-1: a plain output).
    writes = list(out_writes)
    mutated = [(k, w) for k, w in enumerate(writes) if w >= 0]
    aliases = sorted((out_aliases or {}).items())
    views = sorted((out_views or {}).items())
    same = sorted((out_same or {}).items())
    numbers = sorted((out_consts or {}).items())

    def run(args):
        if literal_errors:
            raise RuntimeError(literal_errors[0])
        tensors = [args[i].to("tpu") if up else args[i] for i, up in arg_pos]
        tensors.extend(consts)
        deferred = bool(checks) and compiled.deferring(tensors)
        results = compiled.run(tensors, writes)
        for slot, exc, msg in checks:
            if deferred:
                # The graph joined a run (TORCHTPU_GRAPH_FUSION): its flags
                # are read before the next host read, as eager's index
                # checks are, so a step's graphs still fuse into one program.
                _C._push_graph_check(results[slot], _CHECK_KINDS.get(exc, 0), msg)
            elif results[slot].item():
                # (the program has run: inputs it writes are written)
                raise exc(msg)
        for k, w in mutated:
            if results[k] is not tensors[w]:  # a view input: copy into it
                tensors[w].copy_(results[k])
        out = [None if s is None else results[s] for s in out_slots]
        for k, (size, stride, offset) in views:
            out[k] = out[k].as_strided(size, stride, offset)
        for k in out_cpu:
            out[k] = out[k].cpu()
        for k, (i, size, stride, rel, base_stride) in aliases:
            base = args[i]
            # Dynamo's guards and the specialisation key fix the inputs'
            # strides; the computed (contiguous) value is the fallback.
            # Strides of size-1 dims address nothing: a traced base that
            # differs from the input only there is the same layout (fuzz
            # seed 1102386: without this, the contiguous fallback reached
            # AOTAutograd, which under dynamic shapes rebuilds the alias
            # with its strides: a view of the wrong elements).
            if _same_layout(base.shape, base.stride(), base_stride):
                out[k] = base.as_strided(size, stride, base.storage_offset() + rel)
        for k, k0 in same:
            out[k] = out[k0]
        for k, v in numbers:
            out[k] = v
        args.clear()  # boxed convention: the caller's list is ours to drop
        return out

    run._boxed_call = True
    return run


def _eager_runner(gm, why):
    _warn_eager(why)
    run = _boxed_module(gm)
    run._tpu_recipe = ("module", gm, why)
    return run


def _warn_eager(why):
    # One warning per reason, its details (after ": ") aside; an op's name
    # ("aten::unfold") has colons of its own.
    key = why.split(": ")[0][:120]
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"torchtpu: a graph runs eagerly (op by op) instead of compiled: {why}",
                      stacklevel=4)
    _bump("compile_graphs_eager")


def _writes_through_unfold(gm):
    """Whether a Dynamo graph writes in place into an unfold() result or a
    view of one. Functionalization turns such a write into unfold_backward
    of the written windows, which zeroes the elements no window covers: the
    writes are lost (on the CPU too, under aot_eager and inductor). Eager
    unfold is a real view, so such a graph runs eagerly."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(n):
        v = n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None
        try:
            return StorageWeakRef(v.untyped_storage()) if isinstance(v, torch.Tensor) else None
        except Exception:  # noqa: BLE001 - (no storage: not a view)
            return None

    def op_name(n):
        t = n.target
        return t if isinstance(t, str) else getattr(t, "__name__", "")

    unfolded = set()  # storages of unfold results and their views
    for n in gm.graph.nodes:
        if n.op not in ("call_method", "call_function"):
            continue
        name = op_name(n)
        if name == "unfold":
            st = storage(n)
            if st is not None:
                unfolded.add(st)
            continue
        if not unfolded:
            continue
        written = []
        if name == "setitem" or (name.endswith("_") and not name.startswith("_")):
            written.append(n.args[0] if n.args else None)
        out = n.kwargs.get("out")
        written.extend(out if isinstance(out, (list, tuple)) else [out])
        if any(storage(w) in unfolded for w in written if w is not None):
            return True
        # a view of an unfold result shares its storage
        st = storage(n)
        if st is not None and any(storage(a) == st for a in n.all_input_nodes
                                  if storage(a) in unfolded):
            unfolded.add(st)
    return False


def _boxed_module(module):
    """Runs a GraphModule in the boxed calling convention."""
    def run(args):
        out = module(*args)
        args.clear()  # the caller's list is ours to drop
        return out

    run._boxed_call = True
    return run


def _has_symbols(gm):
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("val")
            if isinstance(v, torch.SymInt):
                return True
            if isinstance(v, torch.Tensor) and any(not isinstance(s, int) for s in v.shape):
                return True
    return False


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd", "c10d")


def _is_collective(n):
    return (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and n.target.namespace in _COLLECTIVE_NAMESPACES)


class _Boxed(torch.nn.Module):
    """A boxed runner where split_module's graph calls a submodule."""

    def __init__(self, run, single):
        super().__init__()
        self.run, self.single = run, single

    def forward(self, *args):
        out = self.run(list(args))
        return out[0] if self.single else tuple(out)


def _split_at_collectives(gm):
    """A graph with collectives (functional collectives from DTensor, FSDP or
    user code): the stretches between them are compiled as graphs, the
    collectives and their waits run as eager ops on the tpudist backend."""
    from torch.fx.passes.split_module import split_module
    part, eager_parts = {}, set()
    pid, kind = -1, None
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem and n.args[0] in part:
            part[n] = part[n.args[0]]
            continue
        k = _is_collective(n)
        if k != kind:
            pid, kind = pid + 1, k
            if k:
                eager_parts.add(pid)
        part[n] = pid
    split = split_module(gm, None, lambda n: part[n], keep_original_order=True)
    for name, sub in list(split.named_children()):
        if int(name.rsplit("_", 1)[1]) not in eager_parts:
            out_node = sub.graph.find_nodes(op="output")[0]
            single = not isinstance(out_node.args[0], (tuple, list))
            if single:  # the builder takes a tuple of outputs
                out_node.args = ((out_node.args[0],),)
                sub.recompile()
            setattr(split, name, _Boxed(_compile_static(sub), single))
    _bump("compile_split_graphs")
    return _boxed_module(split)


def _compile_static(gm, input_alias_outputs=None, layout_outputs=frozenset()):
    if any(_is_collective(n) for n in gm.graph.nodes):
        return _split_at_collectives(gm)
    import time
    t0 = time.perf_counter()
    try:
        b = _Builder(gm, input_alias_outputs, layout_outputs)
        text, out_specs = b.build()
    except _Unsupported as e:
        return _eager_runner(gm, str(e))
    # Everything the runner needs, as plain data: a compiled graph is
    # rebuilt from it in another process (torchtpu._precompile).
    plan = dict(text=text, precision=_C._matmul_precision(), input_specs=b.input_specs,
                out_specs=out_specs,
                with_rng=b.with_rng, inputs=b.inputs, out_slots=b.out_slots,
                out_writes=b.out_writes, out_cpu=b.out_cpu, out_aliases=b.out_aliases,
                out_views=b.out_views, checks=b.checks, literal_errors=b.literal_errors,
                out_same=b.out_same, out_consts=b.out_consts, out_inputs=b.out_inputs)
    run = _plan_runner(plan)
    _bump("compiled_graphs")
    _bump("compiled_graph_ns", int((time.perf_counter() - t0) * 1e9))
    return run


_PRECISION_ATTR = re.compile(rb"#stablehlo<precision (DEFAULT|HIGH|HIGHEST)>")
_PRECISION_NAMES = (None, b"DEFAULT", b"HIGH", b"HIGHEST")  # by _C._matmul_precision()


class _PerPrecision:
    """A compiled graph's program for each float32 matmul precision it ran
    under. Dynamo's guards do not see the precision ("high" and "medium"
    look the same to them), so the graph checks it on every call: a new
    precision rewrites the precision_config attributes of the graph's text
    (they are on dot_general and convolution only, and every one of them
    came from the precision at compile time) and compiles that once."""

    def __init__(self, text, precision, input_specs, out_specs, with_rng):
        self.text, self.specs = text, (input_specs, out_specs, with_rng)
        self.programs = {precision: _C._CompiledGraph(text, *self.specs)}
        self.last = precision

    def current(self):
        p = _C._matmul_precision()
        compiled = self.programs.get(p)
        if compiled is None:
            _bump("compile_precision_variants")
            text = _PRECISION_ATTR.sub(b"#stablehlo<precision " + _PRECISION_NAMES[p] + b">",
                                       self.text)
            compiled = self.programs[p] = _C._CompiledGraph(text, *self.specs)
        return compiled

    def run(self, tensors, writes):
        return self.current().run(tensors, writes)


class _MaybePartitioned:
    """A compiled graph that runs partitioned over a mesh of local devices
    when one of its inputs carries a sharding (torchtpu.spmd), else on one
    device. The partitioned program is made from the same text, so a plan
    loaded from the cache partitions too."""

    def __init__(self, compiled, input_specs, out_specs, with_rng, out_inputs):
        self.compiled, self.input_specs, self.out_specs = compiled, input_specs, out_specs
        self.with_rng, self.out_inputs = with_rng, out_inputs

    def deferring(self, tensors):
        """Whether run(tensors) joins the device's deferred run."""
        if not self.with_rng and _spmd._input_shardings(tensors) is not None:
            return False  # partitioned: runs now
        c = self.compiled
        return (c.current() if isinstance(c, _PerPrecision) else c).deferring()

    def run(self, tensors, writes):
        found = _spmd._input_shardings(tensors)
        if found is None:
            return self.compiled.run(tensors, writes)
        if self.with_rng:
            if "spmd-rng" not in _warned:
                _warned.add("spmd-rng")
                warnings.warn("torchtpu.spmd: a graph that draws random numbers runs on one "
                              "device, not partitioned", stacklevel=4)
            return self.compiled.run(tensors, writes)
        c = self.compiled
        text = (c.current() if isinstance(c, _PerPrecision) else c).text
        _bump("spmd_graph_runs")
        results = _spmd._run(text, self.input_specs, self.out_specs, tensors, *found)
        for slot, i in self.out_inputs.items():
            results[slot] = tensors[i]
        return results


def _plan_runner(plan):
    """The runner of a compiled graph's plan (_compile_static)."""
    p = dict(plan)
    text, precision = p.pop("text"), p.pop("precision", None)
    specs = (p.pop("input_specs"), p.pop("out_specs"), p.pop("with_rng"))
    out_inputs = p.pop("out_inputs", {})
    if precision is None or not _PRECISION_ATTR.search(bytes(text)):
        compiled = _C._CompiledGraph(text, *specs)  # no float products: one program
    else:
        compiled = _PerPrecision(text, precision, *specs)
    run = _runner(_MaybePartitioned(compiled, *specs, out_inputs), **p)
    run._tpu_recipe = ("program", plan)
    return run


def _specializing(gm, input_alias_outputs=None, layout_outputs=frozenset()):
    """A graph with symbolic shapes: retraced to a static graph for each new
    set of concrete input shapes, each compiled once."""
    from torch.fx.experimental.proxy_tensor import make_fx
    cache = {}

    def run(args):
        # Strides too: the retraced graph's outputs that view an input
        # carry the traced input's layout (_Builder._input_aliases).
        key = tuple((tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor)
                    else ("i", int(a)) for a in args)
        hit = cache.get(key)
        if hit is None:
            _bump("compile_specializations")
            if _log_enabled("recompiles"):
                print(f"torchtpu: recompile: specialising a dynamic graph to {key}",
                      file=sys.stderr)
            # The integer inputs (symbolic sizes) become constants of the
            # retraced graph; only tensors stay inputs.
            template = list(args)
            pos = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

            def body(*tensors):
                full = list(template)
                for i, t in zip(pos, tensors):
                    full[i] = t
                return gm(*full)

            # (graph constants are real tensors: AOTAutograd folds
            # scalar_tensor nodes into them when it bundles its cache)
            static = make_fx(body, tracing_mode="fake", _allow_non_fake_inputs=True)(
                *[args[i] for i in pos])
            # the retraced graph's inputs are the tensors only
            aliases = None if input_alias_outputs is None else {
                k: pos.index(i) for k, i in input_alias_outputs.items() if i in pos}
            hit = cache[key] = (_compile_static(static, aliases, layout_outputs), pos)
        fn, pos = hit
        out = fn([args[i] for i in pos])
        args.clear()
        return out

    run._boxed_call = True
    run._tpu_recipe = ("symbolic", gm, input_alias_outputs, layout_outputs)
    return run


def _compile_graph(gm, example_inputs, input_alias_outputs=None, layout_outputs=frozenset()):
    if _has_symbols(gm):
        return _specializing(gm, input_alias_outputs, layout_outputs)
    return _compile_static(gm, input_alias_outputs, layout_outputs)


def _input_alias_outputs():
    """For the forward (or inference) graph AOTAutograd is compiling: graph
    output index -> input index, for the user outputs it rebuilds as
    aliases of inputs (after the mutated inputs it returns, if any)."""
    from torch._functorch._aot_autograd.schemas import OutputType
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None:
        return None
    first = meta.num_mutated_inp_runtime_indices
    return {first + k: info.base_idx for k, info in enumerate(meta.output_info)
            if info.output_type == OutputType.alias_of_input}


def _user_outputs():
    """For the forward (or inference) graph AOTAutograd is compiling: the
    graph output indices the user sees (their layout is eager's) and the
    intermediate bases AOTAutograd rebuilds aliases from (it reads them
    with their traced strides). The activations saved for the backward are
    left out: the backward program reads them fastest contiguous. None: not
    known (all outputs)."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is None:
        return None
    first = meta.num_mutated_inp_runtime_indices
    return frozenset(range(first, first + len(meta.output_info) + meta.num_intermediate_bases))


def _compile_forward(gm, example_inputs):
    return _compile_graph(gm, example_inputs, _input_alias_outputs(), _user_outputs())


_DECOMPS = None


# Ops the table lowers whose decompositions would compute where CPU has no
# kernel (frac of an integer is x - trunc(x) once decomposed, lerp and
# addcdiv of bools arithmetic on them): kept whole,
# their lowering declines those dtypes, so the graph runs eagerly and the
# fallback raises CPU's error, as in eager. mv and dot decompose into a
# multiply and a sum, whose one-product sums keep a -0.0 that CPU's zeroed
# accumulator (and their lowering) makes +0.0. nll_loss stays whole for its
# target check (_check_targets), which the decomposed gather cannot make,
# and the fills and linspace for their value's (_check_literal_scalars:
# decomposed, the value is a folded constant).
# The backward ops of training's normalisations, activations and losses
# stay whole for speed: their lowerings (the ones eager runs, checked
# against CPU by the OpInfo sweep) reduce in f32 in the forms XLA:CPU runs
# best (csrc/core/lower/nn.c), where the decompositions' reductions and
# broadcasts came out 245 StableHLO ops longer and ~3 ms slower per
# bench-sized TinyGPT step (73 vs 76 ms, bench/train_bench.py's model).
_KEEP_WHOLE = ("frac", "heaviside", "logaddexp", "logaddexp2", "trace", "mv", "dot", "vdot",
               "_safe_softmax",
               "nll_loss_forward", "nll_loss2d_forward", "masked_fill", "fill", "index_fill",
               "linspace", "lerp", "addcdiv",
               "_softmax_backward_data", "_log_softmax_backward_data",
               "native_layer_norm_backward", "native_group_norm_backward", "gelu_backward",
               "native_dropout_backward", "embedding_dense_backward", "nll_loss_backward",
               "nll_loss2d_backward")


def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """aten::_grouped_mm in a compiled graph (transformers' MoE experts on
    "tpu"; eager runs PyTorch's composite, one product per group after
    reading offs on the host). Every group's product is made over the whole
    ragged dim and the group's own range selected with where, never a
    multiply by a 0/1 mask, so an inf in another group's rows or weights
    cannot turn into NaN here: G times one product's FLOPs, no host read and
    no shape that depends on offs. Rows past the last offset are 0."""
    torch._check(bias is None, lambda: "grouped_mm: bias is not supported")
    if mat_a.dim() == 3 and mat_b.dim() == 3:
        return torch.bmm(mat_a, mat_b).to(out_dtype or mat_a.dtype)
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])

    def member(n):  # [G, n]: whether position j is in group g
        pos = torch.arange(n, device=offs.device)
        return (pos >= starts[:, None]) & (pos < ends[:, None])

    zero = torch.zeros((), dtype=mat_a.dtype, device=mat_a.device)
    if mat_a.dim() == 2 and mat_b.dim() == 3:  # [M, K] x [G, K, N], rows ragged -> [M, N]
        full = torch.matmul(mat_a, mat_b)  # [G, M, N]
        out = torch.where(member(mat_a.size(0))[:, :, None], full, zero).sum(0)
    elif mat_a.dim() == 3:  # [G, M, K] x [K, N], columns ragged -> [M, N]
        full = torch.matmul(mat_a, mat_b)  # [G, M, N]
        out = torch.where(member(mat_b.size(1))[:, None, :], full, zero).sum(0)
    else:  # [M, K] x [K, N], the contraction ragged -> [G, M, N]
        m = member(mat_a.size(1))  # [G, K]
        a = torch.where(m[:, None, :], mat_a, zero)  # [G, M, K]
        b = torch.where(m[:, :, None], mat_b, zero)  # [G, K, N]
        out = torch.bmm(a, b)
    return out.to(out_dtype or mat_a.dtype)


def _decompositions():
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import core_aten_decompositions
        decomps = core_aten_decompositions()
        keep = {getattr(torch.ops.aten, n) for n in _KEEP_WHOLE}
        _DECOMPS = {op: _checking_cpu_kernel(op, fn) for op, fn in decomps.items()
                    if not (getattr(op, "overloadpacket", None) in keep
                            and _C._graph_op_supported(_op_name(op)))}
        _DECOMPS[torch.ops.aten._grouped_mm.default] = _grouped_mm
    return _DECOMPS


class _CpuHasNoKernel(Exception):
    """A decomposed op CPU has no kernel for with these dtypes."""


_NO_KERNEL_NUMEL = 1 << 16  # larger operands are not tried


def _checking_cpu_kernel(op, fn):
    """fn, decomposing op, after asking CPU whether it has a kernel for the
    operands' dtypes: a decomposition computes `hardswish` of ints or
    `upsample_bilinear2d` of bools where CPU (and eager, whose lowering
    declines them) raises NotImplementedError. The op runs on the CPU on
    zeros of the operands' shapes and dtypes; its NotImplementedError stops
    the trace (tpu_backend then runs the graph eagerly, which raises it)."""
    def decompose(*args, **kwargs):
        _check_cpu_kernel(op, args, kwargs)
        return fn(*args, **kwargs)

    return decompose


def _on_cpu_zeros(a):
    """a with its tensors replaced by CPU zeros of their shapes and dtypes
    (LookupError: a tensor too large, symbolic or not strided)."""
    if isinstance(a, torch.Tensor):
        if a.layout != torch.strided or any(not isinstance(z, int) for z in a.shape) or \
                a.numel() > _NO_KERNEL_NUMEL:
            raise LookupError
        return torch.zeros(tuple(a.shape), dtype=a.dtype)
    if isinstance(a, (list, tuple)):
        return type(a)(_on_cpu_zeros(x) for x in a)
    if isinstance(a, torch.device):
        return torch.device("cpu")
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise LookupError
    return a


def _check_cpu_kernel(fn, args, kwargs):
    """Raises _CpuHasNoKernel where CPU's fn refuses the dtypes of args
    (`"glu_cpu" not implemented for 'Long'`, or a float result for an
    integer one); other outcomes are not this
    check's business (an op with no CPU kernel at all, shape errors the
    trace finds itself)."""
    from torch.utils._python_dispatch import _disable_current_modes
    try:
        with _disable_current_modes(), torch.no_grad():
            fn(*_on_cpu_zeros(args), **{k: _on_cpu_zeros(v) for k, v in kwargs.items()})
    except (NotImplementedError, RuntimeError) as e:
        # (its result cast into an integer out: soft_margin_loss of ints)
        if "not implemented for '" in str(e) or "can't be cast to the desired output" in str(e):
            raise _CpuHasNoKernel(str(e).split("\n")[0]) from None
    except Exception:  # noqa: BLE001
        pass


# nn functions Dynamo graphs call whose CompositeImplicit decompositions
# (interpolate's upsample_*.vec) run before the table's: checked on the
# Dynamo graph. Random ones would draw from CPU's generator: not checked.
_RANDOM_NN = ("dropout", "rrelu", "gumbel", "fractional", "alpha_dropout")


def _dynamo_graph_cpu_refuses(gm):
    """Whether a torch.nn.functional (or torch._C._nn) call of a Dynamo
    graph has no CPU kernel for its operands' dtypes (F.interpolate of
    ints)."""
    import torch.nn.functional as F

    def ex(a):
        if isinstance(a, torch.fx.Node):
            return a.meta.get("example_value")
        if isinstance(a, (list, tuple)):
            return type(a)(ex(x) for x in a)
        return a

    for n in gm.graph.nodes:
        if n.op != "call_function" or \
                getattr(n.target, "__module__", None) not in (F.__name__, "torch._C._nn"):
            continue
        if any(r in getattr(n.target, "__name__", "") for r in _RANDOM_NN):
            continue
        try:
            _check_cpu_kernel(n.target, ex(tuple(n.args)), {k: ex(v) for k, v in n.kwargs.items()})
        except _CpuHasNoKernel:
            return True
    return False


def tpu_backend(gm, example_inputs, **kwargs):
    """The Dynamo backend registered as "tpu"."""
    options = kwargs.get("options") or {}
    if options:
        raise ValueError(f"torchtpu: backend 'tpu' takes no options, got {sorted(options)}")
    if _dynamo_graph_cpu_refuses(gm):
        return gm  # eagerly: the op raises CPU's NotImplementedError
    if _writes_through_unfold(gm):
        _warn_eager("a write through an unfold() view (functionalization would lose it)")
        return gm
    if _has_symbols_dynamo(gm):
        from . import _buckets
        if _buckets.enabled():
            runner = _buckets.plan(gm, _aot_compile)
            if runner is not None:
                return runner
    return _aot_compile(gm, example_inputs)


def _has_symbols_dynamo(gm):
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("example_value")
            if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and any(
                    isinstance(s, torch.SymInt) for s in v.shape)):
                return True
    return False


def _partition_for_spmd(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
    """AOTAutograd's partition of a graph whose inputs carry shardings
    (torchtpu.spmd): the forward saves only its inputs and the backward
    recomputes the forward's intermediates from them. A partitioned graph's
    results are gathered whole (replicated), so saving activations would
    all-gather every one of them and leave the backward to run replicated on
    every device; recomputed, the backward stays split like the forward
    (data parallel: batch-split, then one all-reduce of the gradients).
    Graphs that draw random numbers, mutate, or have symbolic sizes keep the
    default partition (a recompute would redraw, rewrite, or need sizes)."""
    from torch._functorch import partitioners as P
    nodes = list(joint.graph.nodes)

    def seeded(n):
        # SDPA's fused op is tagged as drawing random numbers for its
        # dropout; the device only chooses it without dropout
        # (csrc/torch/attention.cpp), so it recomputes exactly.
        if n.target is torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default:
            p = n.args[4] if len(n.args) > 4 else n.kwargs.get("dropout_p", 0.0)
            return p != 0.0
        return torch.Tag.nondeterministic_seeded in n.target.tags

    plain = all(
        n.op in ("placeholder", "output", "get_attr") or (
            n.op == "call_function" and (
                n.target is operator.getitem or (
                    isinstance(n.target, torch._ops.OpOverload)
                    and not n.target._schema.is_mutable
                    and not seeded(n))))
        for n in nodes)
    symbolic = any(P.is_sym_node(n) for n in nodes)
    if not plain or symbolic:
        return P.default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
    _bump("spmd_recompute_partitions")
    primals = [n for n in nodes if P._is_primal(n)]
    return P._extract_fwd_bwd_modules(joint, primals, [], num_fwd_outputs=num_fwd_outputs)


def _aot_compile(gm, example_inputs):
    """AOTAutograd with torchtpu's graph compilers (forward, backward,
    inference), persisted in AOTAutograd's cache (torchtpu._precompile)."""
    from torch._dynamo.backends.common import aot_autograd

    from . import _precompile
    forward = _precompile.output_code(_compile_forward)
    partition = {}
    if _spmd._input_shardings([t for t in example_inputs if isinstance(t, torch.Tensor)
                               and t.device.type == "tpu"]) is not None:
        partition = {"partition_fn": _partition_for_spmd}
    backend = aot_autograd(fw_compiler=forward, bw_compiler=_precompile.output_code(_compile_graph),
                           inference_compiler=forward, **partition,
                           decompositions=_decompositions(),
                           # Inference graphs (an optimizer step) keep their
                           # input mutations as copy_ nodes: written straight
                           # into the inputs' storages, no epilogue copies.
                           keep_inference_input_mutations=True)
    try:
        with _precompile.persistence("spmd" if partition else ""):
            return backend(gm, example_inputs)
    except _CpuHasNoKernel:
        return gm  # eagerly: the op raises CPU's NotImplementedError


def _register():
    from torch._dynamo.backends.registry import _BACKENDS, register_backend
    if "tpu" not in _BACKENDS:
        register_backend(name="tpu")(tpu_backend)
    if _log_enabled("recompiles"):
        # Dynamo knows why it recompiles (the guard that failed: a new
        # shape, dtype, ...); its "recompiles" log says so on stderr.
        torch._logging.set_logs(recompiles=True)


def _register_device_interface():
    """Dynamo's per-device runtime interface for "tpu" (device queries and
    synchronize inside compiled code). Streams come with torch.tpu.Stream."""
    from torch._dynamo import device_interface as di

    from . import tpu

    class TpuInterface(di.DeviceInterface):
        class device:  # noqa: N801  (the interface's name)
            def __new__(cls, device):
                return torch.device("tpu", tpu._device_index(device))

        class Worker:
            @staticmethod
            def set_device(device):
                tpu.set_device(device)

            @staticmethod
            def current_device():
                return tpu.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return tpu.get_device_properties(device)

        current_device = staticmethod(tpu.current_device)
        set_device = staticmethod(tpu.set_device)
        device_count = staticmethod(tpu.device_count)
        is_available = staticmethod(tpu.is_available)
        synchronize = staticmethod(tpu.synchronize)
        memory_allocated = staticmethod(tpu.memory_allocated)

        @staticmethod
        def maybe_exchange_device(device):
            previous = tpu.current_device()
            if device >= 0 and device != previous:
                tpu.set_device(device)
            return previous

        exchange_device = maybe_exchange_device

        @staticmethod
        def get_compute_capability(device=None):
            return tpu.get_device_capability(device)

        @staticmethod
        def is_bf16_supported(including_emulation=False):
            return True

        @staticmethod
        def is_triton_capable(device=None):
            return False

    # PyTorch's own table names a "tpu" interface (for torch_xla) and fills
    # the table lazily on first lookup: fill it first, then replace it.
    di.get_registered_device_interfaces()
    di.register_interface_for_device("tpu", TpuInterface)
    for i in range(tpu.device_count()):
        di.register_interface_for_device(f"tpu:{i}", TpuInterface)


_register()
_register_device_interface()
