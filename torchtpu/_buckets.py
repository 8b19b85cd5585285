"""Bounded dynamic shapes: one program per size bucket, padding masked.

A Dynamo graph with symbolic sizes (dynamic=True, mark_dynamic, automatic
dynamic) would otherwise be retraced and compiled for every new size
(_compile._specializing). Here each size symbol's value is rounded up to a
bucket (the next power of two, up to TORCHTPU_BUCKET_MAX; beyond it the exact
size), the tensor inputs are padded to the buckets, and one program per
bucket runs every size in it; outputs are cut back to the true sizes.

Exactness comes from an analysis of the Dynamo graph (torch-level ops, before
autograd, so gradients of the rewrite are right by construction):

  - every tensor dimension is described by its *factors*: sizes (sympy
    expressions of the symbols) whose product is the dimension; a factor
    with symbols is padded: its positions at or beyond the true size hold
    padding. A view that merges [s0, s1] into s0*s1 keeps both factors, so
    its validity stays known;
  - an op that mixes positions along a padded dimension is rewritten to
    ignore the padding: sums and means (divided by the count of valid
    elements), max/min, softmax and log-softmax, matrix products contracting
    over it (both operands zeroed there), attention over padded keys (an
    additive mask, finite), losses over padded targets (ignore_index), and
    index inputs (embedding) are set to 0 where padded;
  - position-wise ops need nothing: the padding only reaches padded positions;
  - inputs are padded by repeating their last element, so padded positions
    hold values like real data (finite wherever the model is); with the
    losses masked, every gradient reaching a padded position is zero, so
    parameter gradients are exact too;
  - anything else touching a padded dimension (an op without a rule, an
    index from the end, random ops, in-place writes, an output aliasing an
    input) declines: the graph specialises per size as before, and the
    metric bucket_declined::<reason> says why.

Masks are computed from bool vectors (arange(padded) < true) passed to the
program as inputs, so one program serves every true size in its bucket."""
import operator
import os

import sympy
import torch
import torch.fx

from . import _C

_ELEMENTWISE = {
    "add", "sub", "mul", "truediv", "div", "floordiv", "neg", "pos", "pow", "rsqrt", "sqrt", "exp",
    "log", "log1p", "expm1", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "abs", "clamp",
    "clip", "where", "masked_fill", "float", "half", "bfloat16", "double", "int", "long", "bool",
    "to", "type_as", "contiguous", "clone", "detach", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_not", "and_", "or_", "invert", "cos", "sin",
    "maximum", "minimum", "mish", "softplus", "leaky_relu", "elu", "hardtanh", "relu6",
    "reciprocal", "square", "sign", "tril", "triu", "lerp", "addcmul", "addcdiv", "rsub",
    "bitwise_and", "bitwise_or", "bitwise_not", "hardswish", "hardsigmoid", "logit",
    "nan_to_num", "type",
}
_VIEWS = {"view", "reshape", "flatten", "unflatten", "view_as", "reshape_as"}
_PERMUTES = {"permute", "transpose", "t", "swapaxes", "movedim"}
_FACTORIES = {"arange", "zeros", "ones", "full", "empty", "tensor", "scalar_tensor"}
_LIKE = {"zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones",
         "new_full", "new_empty"}
_RANDOM = ("rand", "bernoulli", "multinomial", "normal", "uniform", "exponential", "poisson",
           "dropout")
_REDUCE_FILL = {"sum": 0, "nansum": 0, "mean": 0, "count_nonzero": 0, "prod": 1,
                "amax": "min", "max": "min", "logsumexp": "min", "argmax": "min",
                "softmax": "min", "log_softmax": "min", "amin": "max", "min": "max",
                "argmin": "max", "all": True, "any": False}
# reductions whose padding must weigh nothing, not just never win
_WEIGHING = {"logsumexp", "softmax", "log_softmax"}
# factories whose arguments may hold a size used as a value: positions and
# keywords of those arguments (arange(end) alone is a size)
_VALUE_ARGS = {"arange": ((0, 2), ("start", "step")), "full": ((1,), ("fill_value",)),
               "new_full": ((2,), ("fill_value",)), "full_like": ((1,), ("fill_value",)),
               "linspace": ((0, 1), ("start", "end")), "logspace": ((0, 1), ("start", "end"))}
_CUMULATIVE = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"}


# op families without a rule of their own: (names, the _Analysis method)
_FAMILIES = ((_ELEMENTWISE, "_elementwise"), (_VIEWS, "_view"), (_PERMUTES, "_permute"),
             (_REDUCE_FILL, "_reduce"), (_CUMULATIVE, "_cumulative"), (_FACTORIES, "_factory"),
             (_LIKE, "_like"))


class Decline(Exception):
    pass


def _exprs(val):
    return tuple(sympy.sympify(d.node.expr) if isinstance(d, torch.SymInt) else sympy.Integer(d)
                 for d in val.shape)


def _padded(f):
    return bool(sympy.sympify(f).free_symbols)


def _dim_padded(factors):
    return any(_padded(f) for f in factors)


# cross_entropy(input, target, weight, size_average, ignore_index, reduce,
# reduction, label_smoothing); nll_loss has the same up to reduction
_LOSS_ARGS = {"ignore_index": (4, -100), "reduction": (6, "mean")}


def _loss_arg(n, key):
    pos, default = _LOSS_ARGS[key]
    v = n.kwargs.get(key, n.args[pos] if len(n.args) > pos else default)
    return _const(v)


def _mutates(n, name):
    """Whether a call writes into a tensor argument."""
    return (name.endswith("_") and not name.endswith("__")) or name in (
        "setitem", "copy_", "index_put_", "masked_scatter_") or (
        name.startswith("i") and name[1:] in _ELEMENTWISE) or "out" in n.kwargs


def _const(a):
    """An int for a size Dynamo already specialised (a SymInt node whose
    value is a number); anything else as it is."""
    v = _val(a)
    if isinstance(v, torch.SymInt) and not sympy.sympify(v.node.expr).free_symbols:
        return int(sympy.sympify(v.node.expr))
    if isinstance(a, slice):
        return a
    return v if isinstance(v, int) else a


def _name(n):
    if n.op == "call_method":
        return n.target
    return getattr(n.target, "__name__", str(n.target)).lstrip("_")


def _val(a):
    return a.meta.get("example_value") if isinstance(a, torch.fx.Node) else a


def _same(a, b):
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


class _Analysis:
    """Factor layouts of every tensor node of a Dynamo graph, and the
    rewrites its ops need (node -> rule)."""

    def __init__(self, gm):
        self.gm = gm
        self.layout = {}
        self.rules = {}  # node -> (kind, details) for the rewriter
        self.symbols = set()  # sizes of tensor inputs: bucketed
        self.root = {}  # node -> the node whose storage it may share
        for n in gm.graph.nodes:
            self._visit(n)

    def _root(self, a):
        return self.root.get(a, a) if isinstance(a, torch.fx.Node) else a

    # -- helpers
    def _lay(self, a):
        if isinstance(a, torch.fx.Node):
            if a not in self.layout:
                v = _val(a)
                if isinstance(v, torch.Tensor) and not any(_padded(e) for e in _exprs(v)):
                    return tuple((e,) for e in _exprs(v))
                raise Decline(f"the layout of {a.name}")
            return self.layout[a]
        return None

    def _tensor_args(self, n):
        out = []
        for a in list(n.args) + list(n.kwargs.values()):
            for x in (a if isinstance(a, (list, tuple)) else [a]):
                if isinstance(x, torch.fx.Node) and isinstance(_val(x), torch.Tensor):
                    out.append(x)
        return out

    def _has_padding(self, lay):
        return lay is not None and any(_dim_padded(d) for d in lay)

    def _broadcast(self, n, out_exprs):
        lays = [self._lay(a) for a in self._tensor_args(n)]
        rank = len(out_exprs)
        out = []
        for k in range(rank):
            chosen = None
            for lay in lays:
                j = len(lay) - rank + k
                if j < 0:
                    continue
                d = lay[j]
                if len(d) == 1 and _same(d[0], 1) and not _same(out_exprs[k], 1):
                    continue  # broadcast from 1
                if chosen is None:
                    chosen = d
                elif tuple(map(str, chosen)) != tuple(map(str, d)):
                    if _dim_padded(chosen) or _dim_padded(d):
                        raise Decline(f"{_name(n)}: operands padded differently")
            if chosen is None:
                if _padded(out_exprs[k]):
                    raise Decline(f"{_name(n)}: a padded dimension from nowhere")
                chosen = (out_exprs[k],)
            out.append(chosen)
        return tuple(out)

    def _regroup(self, name, lay, out_exprs):
        """A view: the input's factors regrouped into the output's dims."""
        queue = [f for d in lay for f in d if not _same(f, 1)]
        out = []
        for e in out_exprs:
            if _same(e, 1):
                out.append((sympy.Integer(1),))
                continue
            dim, prod = [], sympy.Integer(1)
            while not _same(prod, e):
                if not queue:
                    raise Decline(f"{name}: a view that does not regroup the padded factors")
                f = queue.pop(0)
                rest = sympy.simplify(e / prod)
                if _padded(f) or _same(sympy.gcd(f, rest), f) or rest.free_symbols:
                    dim.append(f)
                    prod = sympy.simplify(prod * f)
                    continue
                # split a constant factor
                if f.is_Integer and rest.is_Integer and int(f) % int(rest) == 0:
                    dim.append(rest)
                    queue.insert(0, sympy.Integer(int(f) // int(rest)))
                    prod = sympy.simplify(prod * rest)
                    continue
                raise Decline(f"{name}: a view splitting a padded dimension")
            out.append(tuple(dim))
        if queue:
            raise Decline(f"{name}: a view that does not regroup the padded factors")
        return tuple(out)

    # -- the visit
    def _visit(self, n):
        if n.op == "placeholder":
            self.root[n] = n
            v = _val(n)
            if isinstance(v, torch.SymInt):
                expr = sympy.sympify(v.node.expr)
                # a plain symbol is a size if some tensor input has it in its
                # shape (then bucketed), else a value (kept exact)
                if not expr.is_Symbol and expr.free_symbols:
                    raise Decline("an input size that is an expression")
            elif isinstance(v, torch.Tensor):
                lay = []
                for e in _exprs(v):
                    if e.free_symbols and not e.is_Symbol:
                        raise Decline("an input size that is an expression")
                    self.symbols |= e.free_symbols
                    lay.append((e,))
                self.layout[n] = tuple(lay)
            return
        if n.op in ("output", "get_attr"):
            if n.op == "get_attr":
                v = getattr(self.gm, n.target, None)
                if isinstance(v, torch.Tensor):
                    self.layout[n] = tuple((sympy.Integer(s),) for s in v.shape)
            return
        val = _val(n)
        name = _name(n)
        targs = self._tensor_args(n)
        padded_in = any(self._has_padding(self._lay(a)) for a in targs)
        if n.op == "call_function" and n.target is operator.getitem and \
                isinstance(_val(n.args[0]), (tuple, list)):
            self.root[n] = self._root(n.args[0])
            src = self.layout.get(n.args[0])
            if isinstance(src, list):
                self.layout[n] = src[n.args[1]]
            elif isinstance(val, torch.Tensor) and not any(_padded(e) for e in _exprs(val)):
                self.layout[n] = tuple((e,) for e in _exprs(val))
            elif isinstance(val, torch.Tensor):
                raise Decline("getitem of an unknown padded tuple")
            return
        if _mutates(n, name):
            # a write: into a padded input (through any view of it) it would
            # land in the padded copy; from padded values it would carry
            # padding into its destination
            roots = {self._root(a) for a in targs}
            if padded_in or any(r.op == "placeholder" and self._has_padding(self.layout.get(r))
                                for r in roots):
                raise Decline(f"in-place {name} with padding")
        self.root[n] = self._root(n.args[0]) if name in _MAY_ALIAS and n.args and \
            isinstance(n.args[0], torch.fx.Node) else n
        if not isinstance(val, (torch.Tensor, tuple, list)):
            # sizes, dims and other Python values: a size feeding a tensor op
            # as a value is caught there; anything else read from a padded
            # tensor (an .item(), a .tolist()) would read the padding
            if padded_in and name not in ("size", "dim", "numel", "stride", "getattr"):
                raise Decline(f"{name} reads a padded tensor")
            return
        if any(r in name for r in _RANDOM):
            if name == "dropout" and not self._dropout_active(n):
                self.layout[n] = self._lay(n.args[0])
                return
            if padded_in or any(_padded(e) for e in self._out_exprs(val)):
                raise Decline(f"random op {name}")
        for a in list(n.args) + list(n.kwargs.values()):
            v = _val(a)
            if isinstance(v, (torch.SymInt, torch.SymFloat)) and \
                    sympy.sympify(v.node.expr).free_symbols & self.symbols and name not in (
                    _VIEWS | _FACTORIES | _LIKE | {"expand", "narrow", "getitem", "split",
                                                   "new_zeros", "new_ones", "new_full"}):
                if sympy.sympify(v.node.expr).free_symbols:
                    raise Decline(f"{name} computes with a size as a value")
        if name in _VALUE_ARGS:
            # a size used as a start, step or fill value, not as a size
            pos, keys = _VALUE_ARGS[name]
            values = [n.args[i] for i in pos if i < len(n.args)] + [n.kwargs.get(k) for k in keys]
            if name == "arange" and len(n.args) < 2:
                values = [n.kwargs.get("start"), n.kwargs.get("step")]
            for a in values:
                v = _val(a)
                if isinstance(v, (torch.SymInt, torch.SymFloat)) and \
                        sympy.sympify(v.node.expr).free_symbols & self.symbols:
                    raise Decline(f"{name} with a size as a value")
        out_exprs = self._out_exprs(val) if isinstance(val, torch.Tensor) else None
        if not padded_in and name not in _LIKE | _FACTORIES:
            if isinstance(val, torch.Tensor) and not any(_padded(e) for e in out_exprs):
                self.layout[n] = tuple((e,) for e in out_exprs)
                return
            if isinstance(val, (tuple, list)) and all(
                    isinstance(v, torch.Tensor) and not any(_padded(e) for e in _exprs(v))
                    for v in val):
                self.layout[n] = [tuple((e,) for e in _exprs(v)) for v in val]
                return
        handler = getattr(self, "_rule_" + name, None) or next(
            (getattr(self, method) for names, method in _FAMILIES if name in names), None)
        if handler is None:
            raise Decline(f"{name} on a padded tensor")
        self.layout[n] = handler(n, name, val, out_exprs)

    def _out_exprs(self, val):
        return _exprs(val) if isinstance(val, torch.Tensor) else None

    def _dropout_active(self, n):
        p = n.kwargs.get("p", n.args[1] if len(n.args) > 1 else 0.5)
        training = n.kwargs.get("training", n.args[2] if len(n.args) > 2 else True)
        return bool(training) and p != 0

    def _elementwise(self, n, name, val, out_exprs):
        if name in ("floordiv", "div") and (n.kwargs.get("rounding_mode") or name == "floordiv"):
            if not _val(n.args[0]).is_floating_point():
                raise Decline("integer division of padded values")
        return self._broadcast(n, out_exprs)

    def _factory(self, n, name, val, out_exprs):
        return tuple((e,) for e in out_exprs)

    def _like(self, n, name, val, out_exprs):
        src = self._lay(n.args[0])
        if name.startswith("new_"):
            return tuple((e,) for e in out_exprs)
        return src

    def _view(self, n, name, val, out_exprs):
        return self._regroup(name, self._lay(n.args[0]), out_exprs)

    def _rule_expand(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        lead = len(out_exprs) - len(lay)
        out = [(e,) for e in out_exprs[:lead]]
        for d, e in zip(lay, out_exprs[lead:]):
            out.append(d if not (len(d) == 1 and _same(d[0], 1) and not _same(e, 1)) else (e,))
        return tuple(out)

    _rule_expand_as = _rule_expand

    def _rule_unsqueeze(self, n, name, val, out_exprs):
        lay = list(self._lay(n.args[0]))
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
        dim = dim % (len(lay) + 1)
        lay.insert(dim, (sympy.Integer(1),))
        return tuple(lay)

    def _rule_squeeze(self, n, name, val, out_exprs):
        return self._regroup(name, self._lay(n.args[0]), out_exprs)

    def _permute(self, n, name, val, out_exprs):
        lay = list(self._lay(n.args[0]))
        r = len(lay)
        args = list(n.args[1:])
        if name == "permute":
            dims = args[0] if args and isinstance(args[0], (list, tuple)) else args
            dims = n.kwargs.get("dims", dims)
            return tuple(lay[d % r] for d in dims)
        if name == "t":
            return tuple(reversed(lay))
        if name == "movedim":
            src, dst = args[0] % r, args[1] % r
            d = lay.pop(src)
            lay.insert(dst, d)
            return tuple(lay)
        a = n.kwargs.get("dim0", args[0] if args else -2) % r
        b = n.kwargs.get("dim1", args[1] if len(args) > 1 else -1) % r
        lay[a], lay[b] = lay[b], lay[a]
        return tuple(lay)

    def _rule_getitem(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        idx = n.args[1]
        idx = idx if isinstance(idx, tuple) else (idx,)
        if any(isinstance(i, torch.fx.Node) and isinstance(_val(i), torch.Tensor) for i in idx):
            raise Decline("tensor indexing of a padded tensor")
        out, d = [], 0
        n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
        for pos, i in enumerate(idx):
            if i is Ellipsis:
                for _ in range(len(lay) - n_real):
                    out.append(lay[d])
                    d += 1
                continue
            if i is None:
                out.append((sympy.Integer(1),))
                continue
            dim = lay[d]
            d += 1
            i = _const(i)
            if isinstance(i, int):
                if _dim_padded(dim) and i < 0:
                    # the i-th from the end of the true size (n + i)
                    self._from_end(n, dim, d - 1, pos, "int", -i)
                elif _dim_padded(dim) and i != 0:
                    self.rules.setdefault("min_size", []).append((dim, i + 1))
                continue
            if isinstance(i, slice):
                if not _dim_padded(dim):
                    out.append(None)  # filled from the output's exprs
                    continue
                start, stop, step = _const(i.start), _const(i.stop), _const(i.step)
                if step in (None, 1) and len(dim) == 1 and isinstance(start, int) and \
                        start < 0 and stop is None:
                    # the last -start positions of the true size
                    self._from_end(n, dim, d - 1, pos, "slice", -start)
                    out.append(None)
                    continue
                if step not in (None, 1) or len(dim) != 1 or \
                        (start is not None and (not isinstance(start, int) or start < 0)):
                    raise Decline("a slice from the end of a padded dimension")
                out.append("prefix")
                continue
            raise Decline("an index the bucketing does not read")
        out.extend(lay[d:])
        res = []
        for k, (o, e) in enumerate(zip(out, out_exprs)):
            res.append((e,) if o in (None, "prefix") else o)
        return tuple(res)

    def _from_end(self, n, dim, d, pos, kind, k):
        if len(dim) != 1 or n in self.rules:
            raise Decline("an index from the end of a padded dimension")
        self.rules[n] = ("from_end", d, pos, kind, k, dim[0])

    def _rule_narrow(self, n, name, val, out_exprs):
        lay = list(self._lay(n.args[0]))
        dim = n.args[1] % len(lay)
        start = _val(n.args[2])
        if _dim_padded(lay[dim]) and (len(lay[dim]) != 1 or not isinstance(start, int) or start < 0):
            raise Decline("narrow of a padded dimension")
        lay[dim] = (out_exprs[dim],)
        return tuple(lay)

    def _split_dim(self, n):
        dim = n.kwargs.get("dim", n.args[2] if len(n.args) > 2 else 0)
        return dim

    def _rule_split(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        dim = self._split_dim(n) % len(lay)
        if _dim_padded(lay[dim]):
            raise Decline("split along a padded dimension")
        outs = []
        for v in val:
            e = _exprs(v)
            outs.append(tuple(d if k != dim else (e[k],) for k, d in enumerate(lay)))
        return outs

    _rule_split_with_sizes = _rule_split

    def _rule_chunk(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        dim = n.kwargs.get("dim", n.args[2] if len(n.args) > 2 else 0) % len(lay)
        if _dim_padded(lay[dim]):
            raise Decline("chunk along a padded dimension")
        return [tuple(d if k != dim else (_exprs(v)[k],) for k, d in enumerate(lay)) for v in val]

    def _rule_unbind(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0) % len(lay)
        if _dim_padded(lay[dim]):
            raise Decline("unbind along a padded dimension")
        return [tuple(d for k, d in enumerate(lay) if k != dim) for _ in val]

    def _rule_cat(self, n, name, val, out_exprs):
        # (cat skips 1-d empty tensors: a fresh cache's keys, say)
        tensors = [t for t in n.args[0] if tuple(_val(t).shape) != (0,)]
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0)
        lays = [self._lay(t) for t in tensors]
        rank = len(out_exprs)
        dim %= rank
        if len(lays) == 1:
            return lays[0]
        out = self._broadcast_list(n, lays, out_exprs, skip=dim)
        if any(_dim_padded(lay[dim]) for lay in lays):
            # each input's true part placed right after the previous one's
            # (a KV cache growing by the new keys)
            if any(len(lay[dim]) != 1 for lay in lays) or n.args[0] != list(n.args[0]) and \
                    len(tensors) != len(n.args[0]):
                raise Decline("cat along a merged padded dimension")
            self.rules[n] = ("padded_cat", dim, [lay[dim][0] for lay in lays])
        return out

    _rule_concat = _rule_cat
    _rule_concatenate = _rule_cat

    def _broadcast_list(self, n, lays, out_exprs, skip=None):
        out = []
        for k, e in enumerate(out_exprs):
            if k == skip:
                out.append((e,))
                continue
            ds = {tuple(map(str, lay[k])): lay[k] for lay in lays}
            if len(ds) > 1 and any(_dim_padded(d) for d in ds.values()):
                raise Decline(f"{_name(n)}: operands padded differently")
            out.append(next(iter(ds.values())))
        return tuple(out)

    def _rule_stack(self, n, name, val, out_exprs):
        tensors = n.args[0]
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0) % len(out_exprs)
        lays = [self._lay(t) for t in tensors]
        inner = [e for k, e in enumerate(out_exprs) if k != dim]
        merged = list(self._broadcast_list(n, lays, inner))
        merged.insert(dim, (out_exprs[dim],))
        return tuple(merged)

    def _reduce_dims(self, n, rank, name):
        if name in ("softmax", "log_softmax"):
            dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
            return [dim % rank], True
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else None)
        keep = n.kwargs.get("keepdim", n.args[2] if len(n.args) > 2 and
                            isinstance(n.args[2], bool) else False)
        if dim is None:
            return list(range(rank)), False
        dims = dim if isinstance(dim, (list, tuple)) else [dim]
        return [d % rank for d in dims], keep

    def _reduce(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        dims, keep = self._reduce_dims(n, len(lay), name)
        if name in ("argmax", "argmin") and len(dims) > 1 and self._has_padding(lay):
            raise Decline(f"{name} over all dims: a flat index into the padding")
        if any(_dim_padded(lay[d]) for d in dims):
            self.rules[n] = ("mask_reduce", name, dims, keep)
        if name in ("softmax", "log_softmax"):
            return lay
        if name in ("max", "min") and isinstance(val, (tuple, list)):
            one = tuple(d if k not in dims else (sympy.Integer(1),) for k, d in enumerate(lay)) \
                if keep else tuple(d for k, d in enumerate(lay) if k not in dims)
            return [one, one]
        if keep:
            return tuple(d if k not in dims else (sympy.Integer(1),) for k, d in enumerate(lay))
        return tuple(d for k, d in enumerate(lay) if k not in dims)

    def _cumulative(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        dim = n.kwargs.get("dim", n.args[1] if len(n.args) > 1 else 0) % len(lay)
        if _dim_padded(lay[dim]) and len(lay[dim]) != 1:
            raise Decline(f"{name} along a merged padded dimension")
        return lay if not isinstance(val, (tuple, list)) else [lay, lay]

    def _matmul_layout(self, n, a, b, out_exprs):
        la, lb = self._lay(a), self._lay(b)
        if len(la) < 2 or len(lb) < 2:
            raise Decline("a vector matmul with padding")
        if _dim_padded(la[-1]) or _dim_padded(lb[-2]):
            self.rules[n] = ("mask_contract",)
        rank = len(out_exprs)
        batch = []
        for k in range(rank - 2):
            ds = []
            for lay in (la, lb):
                j = len(lay) - rank + k
                if j >= 0 and not (len(lay[j]) == 1 and _same(lay[j][0], 1) and
                                   not _same(out_exprs[k], 1)):
                    ds.append(lay[j])
            if len({tuple(map(str, d)) for d in ds}) > 1 and any(_dim_padded(d) for d in ds):
                raise Decline("matmul: batch dims padded differently")
            batch.append(ds[0] if ds else (out_exprs[k],))
        return tuple(batch) + (la[-2], lb[-1])

    def _rule_matmul(self, n, name, val, out_exprs):
        return self._matmul_layout(n, n.args[0], n.args[1], out_exprs)

    _rule_mm = _rule_matmul
    _rule_bmm = _rule_matmul

    def _rule_linear(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        w = n.kwargs.get("weight", n.args[1] if len(n.args) > 1 else None)
        if _dim_padded(lay[-1]) or self._has_padding(self._lay(w)):
            raise Decline("linear over a padded feature dimension")
        return tuple(lay[:-1]) + ((out_exprs[-1],),)

    def _rule_layer_norm(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        shape = n.kwargs.get("normalized_shape", n.args[1] if len(n.args) > 1 else None)
        k = len(shape) if isinstance(shape, (list, tuple)) else 1
        if any(_dim_padded(d) for d in lay[-k:]):
            raise Decline(f"{name} over a padded dimension")
        return lay

    _rule_rms_norm = _rule_layer_norm

    def _rule_embedding(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        max_norm = n.kwargs.get("max_norm", n.args[3] if len(n.args) > 3 else None)
        if max_norm is not None and _const(max_norm) is not None:
            raise Decline("embedding with max_norm (it renormalises the rows it reads)")
        if self._has_padding(lay):
            self.rules[n] = ("zero_index", 0)
        return tuple(lay) + ((out_exprs[-1],),)

    def _rule_cross_entropy(self, n, name, val, out_exprs):
        inp = n.args[0]
        tgt = n.kwargs.get("target", n.args[1] if len(n.args) > 1 else None)
        li, lt = self._lay(inp), self._lay(tgt)
        if _val(tgt).is_floating_point():
            raise Decline(f"{name} with probabilities over padding")
        if len(li) > 1 and _dim_padded(li[1]):
            raise Decline(f"{name} over a padded class dimension")
        if self._has_padding(li) and not self._has_padding(lt):
            raise Decline(f"{name}: padded input, unpadded target")
        if self._has_padding(lt):
            self.rules[n] = ("ignore_target",)
        if _loss_arg(n, "reduction") == "none":
            return lt
        return ()

    _rule_nll_loss = _rule_cross_entropy

    def _zero_at_run(self, a):
        """A value that must be 0 for the padding to stay exact (a dropout
        probability): a constant is checked now; .item() of an input is
        checked at each call (_BucketRunner)."""
        if isinstance(a, torch.fx.Node):
            if a.op == "call_method" and a.target == "item" and a.args[0].op == "placeholder":
                self.rules.setdefault("zero_items", []).append(a.name)
                return True
            return False
        return not a

    def _rule_pad(self, n, name, val, out_exprs):
        lay = self._lay(n.args[0])
        pad = n.args[1] if len(n.args) > 1 else n.kwargs.get("pad")
        mode = n.kwargs.get("mode", n.args[2] if len(n.args) > 2 else "constant")
        if mode != "constant" or not isinstance(pad, (list, tuple)):
            raise Decline("pad that is not constant")
        out = list(lay)
        for j in range(len(pad) // 2):
            d = len(lay) - 1 - j
            if pad[2 * j] or pad[2 * j + 1]:
                if _dim_padded(lay[d]) and len(lay[d]) != 1:
                    raise Decline("pad of a merged padded dimension")
                out[d] = (out_exprs[d],)
        if self._has_padding(lay):
            value = n.kwargs.get("value", n.args[3] if len(n.args) > 3 else 0)
            self.rules[n] = ("fill_padding", 0, value or 0)
        return tuple(out)

    def _rule_scaled_dot_product_attention(self, n, name, val, out_exprs):
        q, k, v = n.args[:3]
        lq, lk, lv = self._lay(q), self._lay(k), self._lay(v)
        kw = dict(n.kwargs)
        if not self._zero_at_run(kw.get("dropout_p", n.args[4] if len(n.args) > 4 else 0.0)):
            raise Decline("attention dropout over padding")
        if _dim_padded(lq[-1]) or _dim_padded(lk[-1]) or _dim_padded(lv[-1]):
            raise Decline("attention over a padded head dimension")
        causal = kw.get("is_causal", n.args[5] if len(n.args) > 5 else False)
        mask = kw.get("attn_mask", n.args[3] if len(n.args) > 3 else None)
        if _dim_padded(lk[-2]):
            same = tuple(map(str, lq[-2])) == tuple(map(str, lk[-2]))
            if not (causal and mask is None and same):
                if causal:
                    raise Decline("causal attention with a mask or other lengths over padding")
                self.rules[n] = ("mask_keys",)
        return tuple(lq[:-1]) + ((out_exprs[-1],),)


# ---------------------------------------------------------------------------


def bucket(n, bound):
    if n <= 1 or n > bound:
        return n
    return 1 << (int(n) - 1).bit_length()


class _Rewriter:
    """The graph with the rules applied and one bool vector input per padded
    factor (positions valid at the call's true sizes)."""

    def __init__(self, gm, an):
        self.gm, self.an = gm, an
        self.factors = []  # padded factor exprs, in input order
        self.g = torch.fx.Graph()
        self.env = {}
        self.vec = {}
        self.masks = {}

    def build(self):
        nodes = list(self.gm.graph.nodes)
        last_ph = None
        for n in nodes:
            if n.op == "placeholder":
                self.env[n] = last_ph = self.g.node_copy(n, lambda a: self.env[a])
        # the factor vectors, after the graph's own inputs
        wanted = []
        for lay in self.an.layout.values():
            for lay1 in (lay if isinstance(lay, list) else [lay]):
                for d in lay1:
                    for f in d:
                        if _padded(f) and str(f) not in map(str, wanted):
                            wanted.append(f)
        for f in wanted:
            self.vec[str(f)] = self.g.placeholder(f"bucket_valid_{len(self.factors)}")
            self.factors.append(f)
        for n in nodes:
            if n.op == "placeholder":
                continue
            rule = self.an.rules.get(n)
            if rule is None:
                self.env[n] = self.g.node_copy(n, lambda a: self.env[a])
            else:
                self.env[n] = getattr(self, "_" + rule[0])(n, *rule[1:])
        out = torch.fx.GraphModule(self.gm, self.g)
        return out

    def _call(self, fn, *args, **kwargs):
        return self.g.call_function(fn, args, kwargs)

    def mask(self, node):
        """A bool tensor broadcastable to node's value: True where valid."""
        if node in self.masks:
            return self.masks[node]
        lay = self.an.layout[node]
        rank = len(lay)
        m = None
        for k, d in enumerate(lay):
            if not _dim_padded(d):
                continue
            dm = None
            for j, f in enumerate(d):
                if _padded(f):
                    v = self.vec[str(f)]
                else:
                    v = self._call(torch.ones, int(f), dtype=torch.bool, device=self._device(node))
                # place factor j among the dim's factors: [.., P_j, ..]
                shape = [1] * len(d)
                shape[j] = -1
                v = self._call(torch.reshape, v, shape)
                dm = v if dm is None else self._call(torch.logical_and, dm, v)
            if len(d) > 1:
                dm = self._call(torch.reshape, dm, [-1])
            shape = [1] * rank
            shape[k] = -1
            dm = self._call(torch.reshape, dm, shape)
            m = dm if m is None else self._call(torch.logical_and, m, dm)
        self.masks[node] = m
        return m

    def _device(self, node):
        return _val(node).device

    def _fill(self, x, value):
        if isinstance(value, torch.fx.Node):  # a value of the graph (an int input)
            return self.env[value]
        v = _val(x)
        if value in ("min", "max"):
            info = torch.finfo(v.dtype) if v.is_floating_point() else torch.iinfo(v.dtype)
            value = info.min if value == "min" else info.max
        return value

    def _masked(self, node, value):
        m = self.mask(node)
        x = self.env[node]
        if m is None:
            return x
        fill = self._fill(node, value)
        return self._call(torch.where, m, x, self._call(torch.scalar_tensor, fill,
                                                        dtype=_val(node).dtype,
                                                        device=self._device(node)))

    def _mask_reduce(self, n, name, dims, keep):
        src = n.args[0]
        fill = _REDUCE_FILL[name]
        if fill in ("min", "max") and _val(src).is_floating_point():
            x = self._extreme_input(src, dims, fill)
        elif name in _WEIGHING and not _val(src).is_floating_point():
            # An integer input weighs in floating point (its result's
            # dtype), where the integer's lowest value is no -inf: uint8's
            # is 0, whose exp(0) = 1 counted once per padded position. So
            # it is converted first and padded as a float.
            dtype = _val(n).dtype
            x = self._extreme_input(src, dims, fill,
                                    self._call(torch.Tensor.to, self.env[src], dtype), dtype)
        else:
            x = self._masked(src, fill)
        if name != "mean":
            return self._with_args(n, {0: _Raw(x)})
        # mean: the masked sum over the count of valid elements
        m = self.mask(src)
        dtype = _val(n).dtype
        total = self._call(torch.sum, x, dims, keep)
        full = self._call(torch.logical_and, m, self._call(torch.ones_like, self.env[src],
                                                            dtype=torch.bool))
        count = self._call(torch.sum, full, dims, keep)
        return self._call(torch.div, total, self._call(torch.Tensor.to, count, dtype))

    def _extreme_input(self, src, dims, fill, x=None, dtype=None):
        """Float padding filled with the dtype's lowest (fill "min") or
        highest value, so it never wins a max (min) nor takes softmax mass;
        but where every valid element of a reduced slice is -inf (+inf),
        with -inf (+inf), so the slice gives CPU's answer: max -inf,
        argmax its first index, logsumexp -inf, softmax NaN forward and
        backward (a finite fill would win them all). Slices of padding
        alone keep the finite fill. Known gap: amax / amin split their
        gradient among tied elements, and in such a slice the padding ties
        too (the valid elements get g / (n + padding), CPU g / n). x, dtype:
        src's value converted (default: src itself)."""
        m = self.mask(src)
        x = self.env[src] if x is None else x
        dev = self._device(src)
        dtype = _val(src).dtype if dtype is None else dtype
        inf = self._call(torch.scalar_tensor, float("-inf") if fill == "min" else float("inf"),
                         dtype=dtype, device=dev)
        info = torch.finfo(dtype)
        finite = self._call(torch.scalar_tensor, info.min if fill == "min" else info.max,
                            dtype=dtype, device=dev)
        valid_extreme = self._call(torch.amax if fill == "min" else torch.amin,
                                   self._call(torch.where, m, x, inf), dims, True)
        has_valid = self._call(torch.any, m, dims, True)
        all_inf = self._call(torch.logical_and, self._call(torch.eq, valid_extreme, inf), has_valid)
        return self._call(torch.where, m, x, self._call(torch.where, all_inf, inf, finite))

    def _mask_contract(self, n):
        a, b = n.args[0], n.args[1]
        return self._with_args(n, {0: _Raw(self._masked(a, 0)), 1: _Raw(self._masked(b, 0))})

    def _true_size(self, factor):
        """The true size of a padded factor, as a 0-dim int64 tensor of the
        program (the count of its valid positions)."""
        return self._call(torch.sum, self.vec[str(factor)])

    def _from_end(self, n, d, pos, kind, k, factor):
        """x[..., -k:, ...] or x[..., -k, ...] along a padded dim: the
        positions n-k .. n-1 of the true size n, gathered, then the rest of
        the index applied with that dim taken whole (or at 0)."""
        src = n.args[0]
        dev = self._device(src)
        idx = self._call(torch.add, self._call(torch.arange, k, device=dev),
                         self._call(torch.sub, self._true_size(factor), k))
        picked = self._call(torch.index_select, self.env[src], d, idx)
        index = list(n.args[1] if isinstance(n.args[1], tuple) else (n.args[1],))
        index[pos] = 0 if kind == "int" else slice(None)
        return self._with_args(_FakeNode(n, (_Raw(picked), tuple(index)), {}), {})

    def _padded_cat(self, n, dim, factors):
        tensors = [t for t in n.args[0] if tuple(_val(t).shape) != (0,)]
        dev = self._device(tensors[0])
        acc = self.env[tensors[0]]
        n_acc = self._size_of(acc, dim, factors[0])
        for t, f in zip(tensors[1:], factors[1:]):
            b = self.env[t]
            cat = self._call(torch.cat, [acc, b], dim)
            p_b = self.g.call_method("size", (b, dim))
            idx = self._call(torch.arange, self.g.call_method("size", (cat, dim)), device=dev)
            shift = self._call(torch.sub, idx, n_acc)
            b_idx = self._call(torch.clamp, shift, 0, self._call(operator.sub, p_b, 1))
            from_b = self._call(torch.ge, shift, 0)
            shape = [1] * _val(t).dim()
            shape[dim] = -1
            from_b = self._call(torch.reshape, from_b, shape)
            acc = self._call(torch.where, from_b, self._call(torch.index_select, b, dim, b_idx), cat)
            n_acc = self._call(torch.add, n_acc, self._size_of(b, dim, f))
        return acc

    def _size_of(self, x, dim, factor):
        if _padded(factor):
            return self._true_size(factor)
        return self.g.call_method("size", (x, dim))

    def _fill_padding(self, n, pos, value):
        """Padded positions of the operand set to the op's fill value: the
        positions an end-pad adds then all hold it (a shifted label's -100)."""
        return self._with_args(n, {pos: _Raw(self._masked(n.args[pos], value))})

    def _zero_index(self, n, pos):
        return self._with_args(n, {pos: _Raw(self._masked(n.args[pos], 0))})

    def _ignore_target(self, n):
        tgt = n.kwargs.get("target", n.args[1] if len(n.args) > 1 else None)
        masked = self._masked(tgt, _loss_arg(n, "ignore_index"))
        if "target" in n.kwargs:
            kwargs = dict(n.kwargs)
            kwargs["target"] = _Raw(masked)
            n2 = _FakeNode(n, n.args, kwargs)
            return self._with_args(n2, {})
        return self._with_args(n, {1: _Raw(masked)})

    def _mask_keys(self, n):
        q, k = n.args[0], n.args[1]
        # validity of the key positions: k's mask reduced to its key dim
        m = self.mask(k)
        km = self._call(torch.Tensor.any, m, -1, True)  # [..., S, 1]
        km = self._call(torch.transpose, km, -2, -1)  # [..., 1, S]
        dtype = _val(q).dtype
        add = self._call(torch.where, km, self._call(torch.scalar_tensor, 0.0, dtype=dtype,
                                                     device=self._device(q)),
                         self._call(torch.scalar_tensor, torch.finfo(dtype).min, dtype=dtype,
                                    device=self._device(q)))
        mask = n.kwargs.get("attn_mask", n.args[3] if len(n.args) > 3 else None)
        if mask is not None:
            mv = _val(mask)
            if mv.dtype == torch.bool:
                add = self._call(torch.where, self.env[mask], add,
                                 self._call(torch.scalar_tensor, torch.finfo(dtype).min,
                                            dtype=dtype, device=self._device(q)))
            else:
                add = self._call(torch.add, self.env[mask], add)
        kwargs = dict(n.kwargs)
        args = list(n.args)
        if len(args) > 3:
            args[3] = _Raw(add)
        else:
            kwargs["attn_mask"] = _Raw(add)
        return self._with_args(_FakeNode(n, tuple(args), kwargs), {})


class _Raw:
    """An argument already in the new graph."""

    def __init__(self, node):
        self.node = node


class _FakeNode:
    def __init__(self, n, args, kwargs):
        self.op, self.target, self.args, self.kwargs = n.op, n.target, args, kwargs


def _with_args(self, n, replace):
    args = [replace.get(i, a) for i, a in enumerate(n.args)]

    def conv(a):
        if isinstance(a, _Raw):
            return a.node
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x) for x in a)
        if isinstance(a, dict):
            return {k: conv(v) for k, v in a.items()}
        if isinstance(a, slice):
            return slice(conv(a.start), conv(a.stop), conv(a.step))
        return a

    args = conv(tuple(args))
    kwargs = conv(dict(n.kwargs))
    if n.op == "call_method":
        return self.g.call_method(n.target, args, kwargs)
    return self.g.call_function(n.target, args, kwargs)


_Rewriter._with_args = _with_args


# ops whose result may share its first operand's storage (views, and the
# casts and reshapes that return their input itself when nothing changes)
_MAY_ALIAS = _VIEWS | _PERMUTES | {
    "getitem", "expand", "expand_as", "unsqueeze", "squeeze", "detach", "alias", "narrow",
    "split", "chunk", "unbind", "diagonal", "as_strided", "unfold", "select", "real", "imag",
    "view_as_real", "view_as_complex", "to", "float", "double", "half", "bfloat16", "int", "long",
    "bool", "type", "type_as", "contiguous", "flatten", "reshape"}


def _output_aliasing(gm):
    """Why the outputs cannot be cut back into fresh tensors: one shares
    storage with an input, or two share storage with each other (eager
    returns views of one tensor; fresh copies would separate them)."""
    root = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            root[n] = n
        elif n.op in ("call_function", "call_method") and _name(n) in _MAY_ALIAS and n.args \
                and isinstance(n.args[0], torch.fx.Node) and n.args[0] in root:
            root[n] = root[n.args[0]]
        elif n.op == "output":
            flat = []
            torch.fx.node.map_arg(n.args[0], lambda a: flat.append(a))
            seen = set()
            for a in flat:
                if not isinstance(_val(a), torch.Tensor):
                    continue
                r = root.get(a, a)
                if r.op == "placeholder":
                    return "an output aliasing an input"
                if r in seen:
                    return "outputs sharing storage"
                seen.add(r)
        else:
            root[n] = n
    return None


def _bump(name):
    _C._metrics_add(name, 1)


def bound():
    try:
        return int(_C._env_get("TORCHTPU_BUCKET_MAX"))
    except ValueError:
        return 4096


def enabled():
    return _C._env_get("TORCHTPU_DYNAMIC_BUCKETS") != "0"


def plan(gm, compile_static):
    """A bucketed runner for a Dynamo graph with symbolic sizes, or None
    (with the reason counted) when the graph cannot be bucketed exactly.
    compile_static(gm, example_inputs) compiles a graph at static shapes."""
    try:
        an = _Analysis(gm)
        if not an.symbols:
            return None
        why = _output_aliasing(gm)
        if why:
            raise Decline(why)
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        outs = []
        torch.fx.node.map_arg(out_node.args[0], lambda a: outs.append(a))
        for a in outs:
            v = _val(a)
            if isinstance(v, torch.Tensor):
                lay = an._lay(a)
                if any(len(d) != 1 and _dim_padded(d) for d in lay):
                    raise Decline("an output with merged padded dimensions")
        rewritten = _Rewriter(gm, an)
        new_gm = rewritten.build()
    except Decline as e:
        _bump("bucket_declined::" + str(e).split(":")[0][:60])
        return None
    except Exception as e:  # a graph the analysis does not read: decline
        _bump("bucket_declined::analysis " + type(e).__name__)
        return None
    return _BucketRunner(gm, an, new_gm, rewritten.factors, compile_static)


class _BucketRunner:
    def __init__(self, gm, an, new_gm, factors, compile_static):
        self.an, self.gm, self.new_gm = an, gm, new_gm
        self.factors = factors
        self.compile_static = compile_static
        self.cache = {}
        self.vectors = {}
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.out_spec = out_node.args[0]
        self.min_size = an.rules.get("min_size", [])
        # found once: the .item() reads of inputs, the inputs that are numbers
        pos = {n.name: i for i, n in enumerate(self.placeholders)}
        self.item_reads = [(n.name, pos[n.args[0].name]) for n in new_gm.graph.nodes
                           if n.op == "call_method" and n.target == "item"
                           and n.args[0].op == "placeholder" and n.args[0].name in pos]
        self.ints = [i for i, n in enumerate(self.placeholders)
                     if isinstance(_val(n), (torch.SymInt, torch.SymFloat))]

    def _values(self, args):
        vals = {}
        for n, a in zip(self.placeholders, args):
            v = _val(n)
            if isinstance(v, torch.SymInt):
                if sympy.sympify(v.node.expr).is_Symbol:
                    vals[sympy.sympify(v.node.expr)] = int(a)
            elif isinstance(v, torch.Tensor):
                for e, s in zip(_exprs(v), a.shape):
                    if e.is_Symbol:
                        vals[e] = int(s)
        return vals

    def __call__(self, *args):
        vals = self._values(args)
        lim = bound()
        buckets = {s: bucket(v, lim) if s in self.an.symbols else v for s, v in vals.items()}
        for dim, need in self.min_size:
            for f in dim:
                if _padded(f) and int(f.subs(vals)) < need:
                    buckets = dict(vals)  # an index past the true size: exact
        for n, a in zip(self.placeholders, args):
            v = _val(n)
            if isinstance(v, torch.Tensor) and any(
                    e.is_Symbol and s == 0 for e, s in zip(_exprs(v), a.shape)):
                buckets = dict(vals)  # nothing to repeat into the padding: exact
        items = self._items(args)
        if any(items.get(name) for name in self.an.rules.get("zero_items", ())):
            buckets = dict(vals)  # active dropout: the exact sizes
        key = tuple(sorted((str(s), b) for s, b in buckets.items())) + tuple(
            (i, args[i]) for i, n in enumerate(self.placeholders)
            if isinstance(_val(n), torch.SymFloat)) + tuple(sorted(items.items()))
        padded = []
        for n, a in zip(self.placeholders, args):
            v = _val(n)
            if isinstance(v, torch.SymInt):
                e = sympy.sympify(v.node.expr)
                padded.append(buckets[e] if e.is_Symbol else int(a))
            elif isinstance(v, torch.Tensor):
                for d, e in enumerate(_exprs(v)):
                    if e.is_Symbol and buckets[e] != a.shape[d]:
                        extra = buckets[e] - a.shape[d]
                        last = a.narrow(d, a.shape[d] - 1, 1)
                        shape = list(a.shape)
                        shape[d] = extra
                        a = torch.cat([a, last.expand(shape)], d)
                padded.append(a)
            else:
                padded.append(a)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        vectors = []
        for f in self.factors:
            p, t = int(f.subs(buckets)), int(f.subs(vals))
            vk = (p, t, str(device))
            if vk not in self.vectors:
                self.vectors[vk] = torch.arange(p, device=device) < t
            vectors.append(self.vectors[vk])
        fn = self.cache.get(key)
        ints = self.ints
        tensors = [a for i, a in enumerate(padded) if i not in ints]
        if fn is None:
            _bump("bucket_compiles")
            fn = self.cache[key] = self.compile_static(
                self._at_sizes({i: padded[i] for i in ints}, items), tensors + vectors)
        out = fn(*tensors, *vectors)
        return self._cut(out, vals)

    def _items(self, args):
        """Values of .item() of scalar inputs (Dynamo's dynamic floats: a
        module's float attribute becomes a 0-dim input read by .item()),
        constants of a bucket's program like the sizes."""
        return {name: args[i].item() for name, i in self.item_reads}

    def _at_sizes(self, sizes, items):
        """The rewritten graph with its size inputs (the buckets) and the
        .item() of scalar inputs as constants."""
        import copy
        gm = copy.deepcopy(self.new_gm)
        for n in list(gm.graph.nodes):
            if n.op == "call_method" and n.target == "item" and n.name in items:
                n.replace_all_uses_with(items[n.name])
                gm.graph.erase_node(n)
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, value in sizes.items():
            phs[i].replace_all_uses_with(value)
            gm.graph.erase_node(phs[i])
        gm.recompile()
        return gm

    def _cut(self, out, vals):
        flat_out = list(out) if isinstance(out, (list, tuple)) else [out]
        spec = []
        torch.fx.node.map_arg(self.out_spec, lambda a: spec.append(a))
        res = []
        for o, node in zip(flat_out, spec):
            v = _val(node)
            if isinstance(o, torch.Tensor) and isinstance(v, torch.Tensor) and \
                    any(_padded(e) for e in _exprs(v)):
                for d, e in enumerate(_exprs(v)):
                    if _padded(e):
                        o = o.narrow(d, 0, int(e.subs(vals)))
                # a tensor of its own with eager's strides, as the unpadded
                # run returns (not a view into the padded result)
                strides = [int(sympy.sympify(st.node.expr).subs(vals))
                           if isinstance(st, torch.SymInt) else st for st in v.stride()]
                fresh = torch.empty_strided(o.shape, strides, dtype=o.dtype, device=o.device)
                o = fresh.copy_(o)
            elif isinstance(v, torch.SymInt):
                o = int(sympy.sympify(v.node.expr).subs(vals))
            res.append(o)
        return type(out)(res) if isinstance(out, (list, tuple)) else res[0]
