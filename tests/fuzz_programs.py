"""Random-program fuzzer: tpu against CPU PyTorch.

A program is a seed's straight-line list of Python statements over a few
input tensors (pointwise ops with broadcasting and type promotion,
reductions, matmuls, views and in-place writes through them, indexing,
cat/stack, sort/topk, casts among float32/bfloat16/int64/bool/uint8). It is
built by running candidate steps on CPU and keeping the ones CPU accepts (a
small share of programs end with a step CPU rejects: the device must raise
the same exception type). `check` runs a program on CPU and on "tpu" in one
eager mode (or under torch.compile(backend="tpu")) and compares every live
tensor: dtype, shape, strides, storage offset, values (bfloat16 loosely,
integers and bools exactly) and which tensors share a storage. `minimize`
deletes steps and shrinks inputs while the same kind of mismatch remains;
`repro` prints a self-contained script.

Generation needs only CPU PyTorch; checking imports torchtpu.

    python tests/fuzz_programs.py --programs 5000 --modes strict,debug,defer_and_fuse,compiled
"""
import argparse
import dataclasses
import os
import random
import re
import sys
import time
import traceback
import warnings

import torch

F32, BF16, I64, BOOL, U8 = torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8
DTYPES = (F32, BF16, I64, BOOL, U8)
DTYPE_SRC = {F32: "torch.float32", BF16: "torch.bfloat16", I64: "torch.int64",
             BOOL: "torch.bool", U8: "torch.uint8"}
MODES = ("strict", "debug", "defer_and_fuse", "compiled", "compiled_dynamic")

# Step tags whose mismatches are known and being fixed elsewhere; the CI run
# does not generate them (see tests/test_fuzz.py). `make fuzz` generates
# everything unless FUZZ_EXCLUDE says otherwise.
KNOWN_MISMATCH_TAGS = frozenset()
# Checks the CI run does not make (none now: eager and compiled strides,
# offsets and shared storages are all checked).
KNOWN_SKIPPED_CHECKS = frozenset()


@dataclasses.dataclass
class Step:
    tag: str   # the op family and op, e.g. "view.unfold", "inplace.index_put_"
    src: str   # one Python statement; inputs a0.., results v0.., DEV the device


@dataclasses.dataclass
class Program:
    seed: int
    inputs: list   # [(name, shape tuple, dtype, data seed, specials)]
    steps: list    # [Step]

    def source(self):
        return "\n".join(s.src for s in self.steps)


# --- inputs ---------------------------------------------------------------

def _offsets(t):
    """The storage element index of each element of t (a tensor of t's
    shape)."""
    n = t.storage_offset() + sum((z - 1) * abs(st) for z, st in zip(t.shape, t.stride())) + 1
    return torch.arange(n).as_strided(t.shape, t.stride(), t.storage_offset())


def _elements_of(t):
    """The storage element indices t covers (a set)."""
    if t.numel() == 0:
        return set()
    return set(_offsets(t).flatten().tolist())


def _same_places(u, t):
    """Whether operand u, broadcast to t's shape, reads each element of t
    from the memory t writes it to (x.add_(x)), or cannot be broadcast."""
    try:
        return torch.equal(_offsets(u).broadcast_to(t.shape), _offsets(t))
    except RuntimeError:
        return True


def _dense(t):
    """Non-overlapping and dense: CPU's overlap check can compare two such
    tensors; it gives up on any other."""
    e = _elements_of(t)
    return len(e) == t.numel() and (not e or max(e) - min(e) + 1 == t.numel())


def _shares_memory_within(t):
    """Whether two elements of t are one memory location."""
    return t.numel() >= 2 and len(_elements_of(t)) < t.numel()


def make_input(shape, dtype, data_seed, specials):
    """A CPU tensor whose float values are multiples of 1/4 (exact in
    bfloat16, so sums and products of them agree to the bit), optionally
    with a nan and an inf."""
    g = torch.Generator().manual_seed(data_seed)
    if dtype in (F32, BF16):
        t = (torch.randint(-8, 9, shape, generator=g).to(F32) / 4)
        if specials and t.numel() >= 2:
            flat = t.view(-1)
            flat[torch.randint(0, t.numel(), (), generator=g)] = float("nan")
            flat[torch.randint(0, t.numel(), (), generator=g)] = float("inf") * (1 if data_seed % 2 else -1)
        return t.to(dtype)
    if dtype == I64:
        return torch.randint(-6, 7, shape, generator=g)
    if dtype == BOOL:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 12, shape, generator=g).to(U8)


def make_inputs(program, device):
    return {name: make_input(shape, dtype, ds, sp).to(device)
            for name, shape, dtype, ds, sp in program.inputs}


# --- generation -----------------------------------------------------------

def _near_ties(t):
    """Whether t has two floats equal to within rounding but not equal."""
    if not t.is_floating_point() or t.numel() < 2:
        return False
    v = t.detach().double().flatten()
    v = v[torch.isfinite(v)].unique()  # sorted, distinct
    if v.numel() < 2:
        return False
    rel = 2.0 ** -7 if t.dtype in (torch.bfloat16, torch.float16) else 1e-5
    gap = v[1:] - v[:-1]
    return bool((gap <= rel * torch.maximum(v[1:].abs(), v[:-1].abs())).any())


def _inexact_ties(t):
    """Whether t has two equal floats that are not multiples of 2^-10 (so
    computed by a rounding op: tanh, a matmul of such values ...). The
    device may round them an ulp apart (XLA's batched dot of identical rows
    in two batch entries; seed 1023886), which reorders a sort of them."""
    if not t.is_floating_point() or t.numel() < 2:
        return False
    v = t.detach().double().flatten()
    v = v[torch.isfinite(v)]
    vals, counts = v.unique(return_counts=True)
    tied = vals[counts > 1]
    return bool(((tied * 1024) != (tied * 1024).round()).any())


def _no_nan(x, t):
    """x with its NaNs made 1 where a NaN's sign would be read (signbit, the
    sign source of copysign): a NaN's sign is unspecified -- CPU's vectorized
    float -> bfloat16 gives 0xFFFF, its scalar path and XLA 0x7FC0 (seed
    602489)."""
    if t.is_floating_point() and bool(torch.isnan(t).any()):
        return f"{x}.nan_to_num(1.0, float('inf'), -float('inf'))"
    return x


class _Gen:
    def __init__(self, seed, exclude):
        self.r = random.Random(seed)
        self.exclude = exclude
        self.ns = {"torch": torch, "DEV": "cpu"}
        self.nvars = 0

    # helpers over the live CPU tensors
    def tensors(self, pred=None):
        return [(k, v) for k, v in self.ns.items()
                if isinstance(v, torch.Tensor) and (pred is None or pred(v))]

    def pick(self, pred=None):
        c = self.tensors(pred)
        return self.r.choice(c) if c else None

    def pick_broadcastable(self, shape, into=False):
        """A live tensor broadcastable with `shape` (into: to exactly `shape`)."""
        def ok(t):
            try:
                b = torch.broadcast_shapes(tuple(shape), tuple(t.shape))
            except RuntimeError:
                return False
            return b == tuple(shape) if into else True
        return self.pick(ok)

    def scalar(self, kind=None):
        r = self.r
        kind = kind or r.choice(["int", "float", "float", "bool"])
        if kind == "int":
            return str(r.randint(-3, 4))
        if kind == "bool":
            return r.choice(["True", "False"])
        return r.choice(["0.5", "-1.25", "2.0", "0.25", "3.5", "-0.75"])

    def dim(self, t, allow_neg=True):
        nd = max(t.dim(), 1)
        d = self.r.randrange(nd)
        return d - nd if allow_neg and self.r.random() < 0.3 else d

    def index_list(self, n, size, allow_neg=True):
        lo = -size if allow_neg else 0
        return [self.r.randint(lo, size - 1) for _ in range(n)]

    def idx_tensor(self, size, n=None, shape2=False):
        r = self.r
        n = n if n is not None else r.randint(1, 4)
        vals = self.index_list(n, size)
        if shape2 and n % 2 == 0 and r.random() < 0.3:
            vals = [vals[: n // 2], vals[n // 2:]]
        return f"torch.tensor({vals}, device=DEV)"

    def slice_src(self, size):
        r = self.r
        start = r.choice([None, 0, r.randint(0, max(size - 1, 0)), -1 if size else None])
        stop = r.choice([None, size, r.randint(0, size), -1])
        step = r.choice([None, None, 1, 2, 3])
        s = "" if start is None else str(start)
        s += ":" + ("" if stop is None else str(stop))
        if step is not None:
            s += f":{step}"
        return s

    # view expressions of x (src string, tag)
    def view_expr(self, name, t):
        r = self.r
        nd = t.dim()
        opts = ["reshape", "view", "unsqueeze", "slice"]
        if nd >= 1:
            opts += ["narrow", "select", "unflatten"]
        if nd >= 2:
            opts += ["transpose", "permute", "diagonal", "mT"]
        if nd <= 2:
            opts += ["t"]
        if any(s == 1 for s in t.shape) or nd == 0 or r.random() < 0.2:
            opts += ["expand"]
        if any(s == 1 for s in t.shape):
            opts += ["squeeze"]
        if nd >= 1 and max(t.shape) >= 2:
            opts += ["unfold"]
        opts = [o for o in opts if f"view.{o}" not in self.exclude] or ["unsqueeze"]
        op = r.choice(opts)
        if op in ("reshape", "view"):
            shape = _random_factorization(r, t.numel())
            if r.random() < 0.3 and shape:
                shape[r.randrange(len(shape))] = -1
            return f"{name}.{op}({', '.join(map(str, shape)) if shape else '()'})", op
        if op == "unsqueeze":
            return f"{name}.unsqueeze({r.randint(-nd - 1, nd)})", op
        if op == "slice":
            if nd == 0:
                return f"{name}[None]", op
            parts = [self.slice_src(t.shape[d]) for d in range(r.randint(1, nd))]
            if r.random() < 0.2:
                parts.insert(r.randint(0, len(parts)), "None")
            if r.random() < 0.2 and len(parts) < nd:
                parts = ["..."] + parts
            if r.random() < 0.2:
                parts[-1] = str(r.randint(-t.shape[len(parts) - 1], t.shape[len(parts) - 1] - 1)) if t.shape[len(parts) - 1] and parts[-1] not in ("None", "...") and "..." not in parts else parts[-1]
            return f"{name}[{', '.join(parts)}]", op
        if op == "narrow":
            d = self.dim(t)
            size = t.shape[d]
            start = r.randint(0, size)
            length = r.randint(0, size - start)
            return f"{name}.narrow({d}, {start}, {length})", op
        if op == "select":
            d = self.dim(t)
            size = t.shape[d]
            if size == 0:
                return None
            return f"{name}.select({d}, {r.randint(-size, size - 1)})", op
        if op == "unflatten":
            d = self.dim(t)
            sizes = _random_factorization(r, t.shape[d]) or [1]
            return f"{name}.unflatten({d}, {tuple(sizes)})", op
        if op == "transpose":
            return f"{name}.transpose({self.dim(t)}, {self.dim(t)})", op
        if op == "permute":
            p = list(range(nd))
            r.shuffle(p)
            return f"{name}.permute({', '.join(map(str, p))})", op
        if op == "diagonal":
            d1 = self.dim(t)
            d2 = self.dim(t)
            return f"{name}.diagonal({r.randint(-2, 2)}, {d1}, {d2})", op
        if op == "mT":
            return f"{name}.mT", op
        if op == "t":
            return f"{name}.t()", op
        if op == "expand":
            sizes = [str(s if s != 1 else r.choice([1, 2, 3])) for s in t.shape]
            if r.random() < 0.5:
                sizes = [str(r.randint(1, 3))] + sizes
            if r.random() < 0.3 and sizes:
                sizes[-1] = "-1"
            return f"{name}.expand({', '.join(sizes)})", op
        if op == "squeeze":
            ones = [d for d, s in enumerate(t.shape) if s == 1]
            if r.random() < 0.4:
                return f"{name}.squeeze()", op
            return f"{name}.squeeze({r.choice(ones)})", op
        if op == "unfold":
            d = self.dim(t)
            size = t.shape[d]
            if size < 1:
                return None
            return f"{name}.unfold({d}, {r.randint(1, size)}, {r.randint(1, 3)})", op
        return None

    def fresh(self):
        v = f"v{self.nvars}"
        self.nvars += 1
        return v

    # families: each returns (tag, src) or None
    def g_unary(self):
        x, t = self.pick()
        ops = ["-{x}", "{x}.abs()", "torch.exp({x})", "torch.log({x}.abs() + 1)", "torch.sin({x})",
               "torch.cos({x})", "torch.tanh({x})", "torch.sigmoid({x})", "torch.relu({x})",
               "{x}.floor()", "{x}.ceil()", "{x}.round()", "{x}.trunc()", "{x}.sign()",
               "torch.sqrt({x}.abs())", "{x}.reciprocal()", "{x}.square()", "~{x}",
               "{x}.logical_not()", "torch.isnan({x})", "torch.isinf({x})", "{x}.nan_to_num()",
               "torch.clamp({x}, min={lo})", "torch.clamp({x}, max={hi})",
               "torch.clamp({x}, {lo}, {hi})", "{x} ** 2", "torch.rsqrt({x}.abs() + 1)",
               "torch.expm1({x})", "torch.log1p({x}.abs())", "torch.erf({x})",
               "torch.atan({x})", "torch.frac({x})", "{x}.neg()", "torch.signbit({x})"]
        i = self.r.randrange(len(ops))
        name = ops[i].split("(")[0].replace("{x}", "").strip(".") or ops[i]
        if "signbit" in ops[i]:
            x = _no_nan(x, t)
        src = ops[i].format(x=x, lo=self.scalar("int"), hi=self.r.choice(["1", "2", "0.5", "3"]))
        return f"unary.{_tag_name(ops[i])}", f"{self.fresh()} = {src}"

    def g_binary(self):
        r = self.r
        x, t = self.pick()
        ops = ["{x} + {y}", "{x} - {y}", "{x} * {y}", "{x} / {y}", "torch.maximum({x}, {y})",
               "torch.minimum({x}, {y})", "{x} == {y}", "{x} < {y}", "{x} >= {y}", "{x} != {y}",
               "{x} & {y}", "{x} | {y}", "{x} ^ {y}", "torch.logical_and({x}, {y})",
               "torch.logical_or({x}, {y})", "torch.where({c}, {x}, {y})", "torch.atan2({x}, {y})",
               "{x} // {d}", "{x} % {d}", "torch.fmod({x}, {d})", "torch.pow({x}, {y})",
               "torch.add({x}, {y}, alpha={a})", "torch.sub({x}, {y}, alpha={a})",
               "torch.lerp({x}, {y}, 0.25)", "torch.hypot({x}, {y})", "torch.copysign({x}, {y})"]
        op = r.choice(ops)
        if r.random() < 0.25:
            y = self.scalar()
        else:
            yy = self.pick_broadcastable(t.shape)
            y = yy[0]
        # integer division by zero is another suite's known issue: divide by a
        # nonzero divisor (|y| + 1 for integer tensors)
        d = y
        yt = self.ns.get(y)
        if isinstance(yt, torch.Tensor) and not yt.is_floating_point():
            d = f"({y}.abs() + 1)"
        elif y in ("0", "False"):
            d = "2"
        if "copysign" in op and isinstance(yt, torch.Tensor):
            y = _no_nan(y, yt)
        c = x if t.dtype == BOOL else f"{x} > 0"
        if "{c}" in op and r.random() < 0.5:
            cc = self.pick_broadcastable(t.shape)
            if cc and self.ns[cc[0]].dtype == BOOL:
                c = cc[0]
        if op.startswith("torch.add") or op.startswith("torch.sub"):
            a = self.scalar(r.choice(["int", "float"]))
        else:
            a = None
        if r.random() < 0.5 and op.startswith("{x} ") and "{d}" not in op and not isinstance(self.ns.get(y), torch.Tensor):
            # scalar on the left exercises the reflected operators
            op = op.replace("{x}", "@@").replace("{y}", "{x}").replace("@@", "{y}").replace("{d}", "{x}")
        tag = f"binary.{_tag_name(op)}"
        yb = self.ns.get(y)
        if (t.dtype == BOOL) != (isinstance(yb, torch.Tensor) and yb.dtype == BOOL) and "{c}" not in op and (
                t.is_floating_point() or (isinstance(yb, torch.Tensor) and yb.is_floating_point())
                or "." in y or "/" in op):
            tag += "@bool_float"  # a bool tensor meeting a float (or true division)
        return tag, f"{self.fresh()} = {op.format(x=x, y=y, d=d, c=c, a=a)}"

    def g_reduce(self):
        r = self.r
        x, t = self.pick()
        op = r.choice(["sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "any", "all",
                       "cumsum", "var", "std", "logsumexp", "max", "min", "nansum", "count_nonzero"])
        nd = t.dim()
        form = r.random()
        args = []
        if op in ("cumsum",):
            args = [str(self.dim(t))]
        elif op in ("argmax", "argmin", "max", "min", "any", "all", "prod") or op == "logsumexp":
            if op == "logsumexp" or (form < 0.7 and nd > 0):
                args = [f"dim={self.dim(t)}"] if nd > 0 else ["dim=0"]
                if op != "logsumexp" and nd > 0 and r.random() < 0.5:
                    args.append(f"keepdim={r.choice(['True', 'False'])}")
                elif op == "logsumexp":
                    args.append(f"keepdim={r.choice(['True', 'False'])}")
        else:
            if form < 0.3 or nd == 0:
                pass
            elif form < 0.7:
                args = [f"dim={self.dim(t)}"]
            else:
                dims = sorted({self.dim(t, allow_neg=False) for _ in range(r.randint(1, nd))})
                args = [f"dim={tuple(dims)}"]
            if args and r.random() < 0.5:
                args.append(f"keepdim={r.choice(['True', 'False'])}")
            if op in ("sum", "prod", "cumsum", "mean") and r.random() < 0.2:
                to = r.choice([F32, I64, BF16])
                args.append(f"dtype={DTYPE_SRC[to]}")
                if to == I64 and t.is_floating_point():
                    # (the elements are cast first: out-of-range and
                    # non-finite float -> integer casts are undefined, as
                    # in g_cast; seed 600279)
                    vals = t.float()
                    if vals.numel() and (not bool(torch.isfinite(vals).all())
                                         or float(vals.abs().max()) > 1000):
                        x = f"{x}.nan_to_num(0.0, 1000.0, -1000.0).clamp(-1000, 1000)"
            if op in ("var", "std") and r.random() < 0.5:
                args.append(f"correction={r.choice([0, 1])}")
        v = self.fresh()
        src = f"torch.{op}({x}{', ' if args else ''}{', '.join(args)})"
        if op in ("max", "min") and any(a.startswith("dim=") for a in args):
            src += r.choice([".values", ".indices"])
        return f"reduce.{op}", f"{v} = {src}"

    def g_matmul(self):
        r = self.r
        x, t = self.pick(lambda t: t.dim() >= 1)
        form = r.random()
        v = self.fresh()
        if t.dim() >= 2 and form < 0.35:
            return "matmul.matmul_mT", f"{v} = {x} @ {x}.mT"
        if t.dim() == 3 and form < 0.5:
            return "matmul.bmm", f"{v} = torch.bmm({x}, {x}.transpose(1, 2))"
        if t.dim() == 2 and form < 0.6:
            return "matmul.mm", f"{v} = torch.mm({x}.t(), {x})"
        k = t.shape[-1]
        cand = self.pick(lambda u: (u.dim() >= 2 and u.shape[-2] == k) or (u.dim() == 1 and u.shape[0] == k))
        if cand is None:
            return "matmul.matmul_mT", f"{v} = {x} @ {x}.mT" if t.dim() >= 2 else f"{v} = {x} @ {x}"
        mixed = "@mixed_dtype" if self.ns[cand[0]].dtype != t.dtype else ""
        return "matmul.matmul" + mixed, f"{v} = torch.matmul({x}, {cand[0]})"

    def g_view(self):
        x, t = self.pick()
        e = self.view_expr(x, t)
        if e is None:
            return None
        src, op = e
        if self.r.random() < 0.3:
            try:
                tt = eval(src, self.ns)
                e2 = self.view_expr(f"({src})" if src[0] != "(" else src, tt)
                if e2:
                    src = e2[0]
                    op = f"{op}+{e2[1]}"
            except Exception:
                pass
        return f"view.{op.split('+')[-1]}", f"{self.fresh()} = {src}"

    def g_inplace(self):
        r = self.r
        # the target: an existing view, or a view expression of a live tensor
        views = self.tensors(lambda t: t._base is not None)
        if views and r.random() < 0.4:
            tgt, tt = r.choice(views)
        else:
            x, t = self.pick()
            e = self.view_expr(x, t) if r.random() < 0.8 else (x, "whole")
            if e is None:
                return None
            tgt = e[0]
            try:
                tt = eval(tgt, self.ns)
            except Exception:
                return None
        op = r.choice(["add_", "mul_", "sub_", "copy_", "fill_", "zero_", "clamp_", "index_put_",
                       "masked_fill_", "setitem", "setitem_mask", "div_", "abs_", "neg_"])
        tag = f"inplace.{op}"
        if torch._debug_has_internal_overlap(tt) == 1:
            tag += "@overlap"  # the target has elements sharing memory (expand)
        elif op not in ("fill_", "zero_", "masked_fill_") and _shares_memory_within(tt):
            # Overlap PyTorch cannot detect (unfold's overlapping windows):
            # CPU writes element by element, later elements reading what
            # earlier ones wrote, in its loop order -- no defined result.
            return None
        if op in ("add_", "mul_", "sub_", "copy_", "div_"):
            if r.random() < 0.35 and op != "copy_":
                other = self.scalar(r.choice(["int", "float"]))
            else:
                o = self.pick_broadcastable(tt.shape, into=True)
                if o is None:
                    return None
                other = o[0]
                ot = self.ns[other]
                if op == "copy_" and not tt.is_floating_point() and ot.is_floating_point() and not (
                        bool(torch.isfinite(ot.float()).all()) and float(ot.float().abs().max(), ) < 100
                        if ot.numel() else True):
                    return None  # a non-finite or large float cast to an integer is undefined
            s = f"{tgt}.{op}({other})"
            if "." in other and not tt.is_floating_point():
                tag += "@float_scalar"  # CPU: "result type Float can't be cast"; tpu writes
        elif op == "fill_":
            s = f"{tgt}.fill_({self.scalar()})"
        elif op == "zero_" or op == "abs_" or op == "neg_":
            s = f"{tgt}.{op}()"
        elif op == "clamp_":
            s = f"{tgt}.clamp_({self.scalar('int')}, {r.choice(['2', '3', '1.5'])})"
        elif op == "index_put_":
            if tt.dim() == 0 or tt.shape[0] == 0:
                return None
            idx = self.idx_tensor(tt.shape[0], n=r.randint(1, 3))
            vals = self.scalar(r.choice(["int", "float"]))
            o = self.pick_broadcastable(tuple(tt.shape[1:]), into=True)
            if o is not None and r.random() < 0.5:
                vals = o[0]
            acc = r.choice(["", ", accumulate=True"])
            # accumulate=False with repeated indices is order-dependent
            if not acc:
                idx = f"torch.tensor({sorted(set(self.index_list(3, tt.shape[0], allow_neg=False)))}, device=DEV)"
            s = f"{tgt}.index_put_(({idx},), torch.as_tensor({vals}, device=DEV){acc})"
        elif op == "masked_fill_":
            m = self.pick_broadcastable(tt.shape, into=True)
            mask = m[0] + " > 0" if m and self.ns[m[0]].dtype != BOOL else (m[0] if m else f"{tgt} > 0")
            s = f"{tgt}.masked_fill_({mask}, {self.scalar()})"
        elif op == "setitem":
            if tt.dim() == 0:
                s = f"{tgt}[()] = {self.scalar()}"
            else:
                sl = self.slice_src(tt.shape[0])
                s = f"{tgt}[{sl}] = {self.scalar()}"
        else:
            s = f"{tgt}[{tgt} > 0] = {self.scalar()}"
        if "[" in tgt.split(".")[0] or tgt.endswith(")") or op.startswith("setitem"):
            pass
        for name in _names_in(s[len(tgt):]):
            u = self.ns.get(name)
            if isinstance(u, torch.Tensor) and u.untyped_storage().data_ptr() == tt.untyped_storage().data_ptr():
                if _shares_memory_within(tt):
                    # CPU reads an operand the write keeps changing through
                    # the target's shared elements (index_put_ accumulating
                    # into an expand of its own values): loop-order results
                    return None
                if op == "index_put_":
                    # index_put_'s values read from the tensor it writes
                    # (v0.index_put_(i, v0[:, 0], accumulate=True)): CPU's
                    # kernel adds element by element, later additions reading
                    # what earlier ones wrote (its loop order; no overlap
                    # check: the values are not dense), CUDA's races. No
                    # defined result to compare (seed 930789).
                    return None
                if _elements_of(u) & _elements_of(tt) and _elements_of(u) != _elements_of(tt) and (
                        op == "copy_" or not (_dense(u) and _dense(tt))):
                    # An operand partly overlapping the target where CPU's
                    # overlap check cannot tell (copy_ makes none; the others
                    # give up unless both are dense: v3.add_(v3[:, 1])): CPU
                    # reads what it has already written in its loop order,
                    # CUDA races (seeds 981905, 1210962). No defined result.
                    return None
                if _elements_of(u) == _elements_of(tt) and u.numel() and not _same_places(u, tt):
                    # The same memory in another order (v.permute(...).copy_(v),
                    # x.add_(x.mT)): CPU's overlap check calls it a full
                    # overlap and its loop reads elements it already wrote;
                    # CUDA races (seed 1024668). No defined result.
                    return None
                tag += "@aliased_operand"  # an operand shares the target's storage
                break
        if r.random() < 0.3 and not op.startswith("setitem"):
            s = f"{self.fresh()} = {s}"
        return tag, s

    def g_index(self):
        r = self.r
        x, t = self.pick(lambda t: t.dim() >= 1 and t.shape[0] > 0)
        form = r.choice(["adv0", "adv1", "adv2", "gather", "index_select", "mask", "mask_var",
                         "masked_select", "nonzero", "scatter", "scatter_add", "take", "where1"])
        v = self.fresh()
        got = self._index_step(form, x, t, v)
        if got is not None and any(
                isinstance(self.ns.get(n), torch.Tensor) and torch._debug_has_internal_overlap(self.ns[n]) == 1
                for n in _names_in(got[1].split(" = ", 1)[1])):
            # debug mode raises an overlap error indexing an expanded tensor
            got = (got[0] + "@overlap", got[1])
        return got

    def _index_step(self, form, x, t, v):
        r = self.r
        if form == "adv0":
            return "index.advanced", f"{v} = {x}[{self.idx_tensor(t.shape[0], shape2=True)}]"
        if form == "adv1":
            if t.dim() < 2 or t.shape[1] == 0:
                return None
            return "index.advanced", f"{v} = {x}[:, {self.idx_tensor(t.shape[1])}]"
        if form == "adv2":
            if t.dim() < 2 or t.shape[1] == 0:
                return None
            n = r.randint(1, 4)
            return "index.advanced", (f"{v} = {x}[{self.idx_tensor(t.shape[0], n)}, "
                                      f"{self.idx_tensor(t.shape[1], n)}]")
        if form == "gather":
            d = self.dim(t, allow_neg=False)
            shape = [r.randint(1, s) if s else 0 for s in t.shape]
            vals = torch.randint(0, t.shape[d], shape, generator=torch.Generator().manual_seed(r.randint(0, 1 << 30))).tolist() if all(shape) else None
            if vals is None:
                return None
            return "index.gather", f"{v} = torch.gather({x}, {d}, torch.tensor({vals}, device=DEV))"
        if form == "index_select":
            d = self.dim(t)
            if t.shape[d] == 0:
                return None
            idx = self.idx_tensor(t.shape[d])
            neg = "@negative" if "-" in idx else ""  # out of range for index_select: CPU raises
            return "index.index_select" + neg, f"{v} = {x}.index_select({d}, {idx})"
        if form == "mask":
            return "index.mask", f"{v} = {x}[{x} > 0]" if t.dtype != BOOL else f"{v} = {x}[{x}]"
        if form == "mask_var":
            m = self.pick(lambda u: u.dtype == BOOL and u.dim() >= 1 and u.shape == t.shape[:u.dim()])
            if m is None:
                return None
            return "index.mask", f"{v} = {x}[{m[0]}]"
        if form == "masked_select":
            m = self.pick_broadcastable(t.shape)
            return "index.masked_select", f"{v} = torch.masked_select({x}, {m[0]} > 0)"
        if form == "nonzero":
            return "index.nonzero", f"{v} = torch.nonzero({x})"
        if form in ("scatter", "scatter_add"):
            d = self.dim(t, allow_neg=False)
            # one index per (row, position): scatter (no add) is order-dependent
            # when an index repeats, so each index row is a permutation prefix
            shape = [r.randint(1, s) if s else 0 for s in t.shape]
            if not all(shape):
                return None
            g = torch.Generator().manual_seed(r.randint(0, 1 << 30))
            idx = torch.argsort(torch.rand([t.shape[d]] + shape[:d] + shape[d + 1:], generator=g), dim=0)[: shape[d]]
            idx = idx.movedim(0, d).contiguous()
            src = self.pick(lambda u: u.dim() == t.dim() and all(a >= b for a, b in zip(u.shape, shape)))
            src = src[0] if src else self.scalar("float")
            if form == "scatter":
                if not isinstance(self.ns.get(src), torch.Tensor):
                    return "index.scatter", f"{v} = {x}.scatter({d}, torch.tensor({idx.tolist()}, device=DEV), {src})"
                return "index.scatter", f"{v} = {x}.scatter({d}, torch.tensor({idx.tolist()}, device=DEV), {src})"
            if not isinstance(self.ns.get(src), torch.Tensor):
                return None
            return "index.scatter_add", f"{v} = {x}.scatter_add({d}, torch.tensor({idx.tolist()}, device=DEV), {src})"
        if form == "take":
            n = t.numel()
            if n == 0:
                return None
            return "index.take", f"{v} = torch.take({x}, {self.idx_tensor(n)})"
        if t.dtype == BOOL:
            return "index.where_nonzero", f"{v} = torch.where({x})[0]"
        return "index.where", f"{v} = torch.where({x} > 0, {x}, {self.scalar()})"

    def g_cat(self):
        r = self.r
        x, t = self.pick()
        v = self.fresh()
        if r.random() < 0.5:
            ys = [n for n, u in self.tensors(lambda u: u.shape == t.shape)]
            ys = [r.choice(ys) for _ in range(r.randint(1, 2))]
            d = r.randint(-t.dim() - 1, t.dim())
            return "cat.stack", f"{v} = torch.stack([{x}, {', '.join(ys)}], dim={d})"
        if t.dim() == 0:
            return None
        d = self.dim(t)
        ys = [n for n, u in self.tensors(
            lambda u: u.dim() == t.dim() and all(a == b for i, (a, b) in enumerate(zip(u.shape, t.shape))
                                                  if i != d % t.dim()))]
        ys = [r.choice(ys) for _ in range(r.randint(1, 2))]
        return "cat.cat", f"{v} = torch.cat([{x}, {', '.join(ys)}], dim={d})"

    def g_sort(self):
        r = self.r
        x, t = self.pick()
        v = self.fresh()
        d = self.dim(t) if t.dim() else 0
        form = r.choice(["sort", "sort", "argsort", "topk", "msort"])
        desc = r.choice(["True", "False"])
        if form in ("sort", "argsort") and (_near_ties(t) or _inexact_ties(t)):
            # indices of values equal to within rounding are unspecified:
            # CPU's own vectorized and scalar loops differ by an ulp (atan2
            # of equal inputs; seed 700561), and so may the device
            form = "msort"
        if form == "sort":
            return "sort.sort", (f"{v} = torch.sort({x}, dim={d}, descending={desc}, stable=True)"
                                 + r.choice([".values", ".indices"]))
        if form == "argsort":
            return "sort.argsort", f"{v} = torch.argsort({x}, dim={d}, descending={desc}, stable=True)"
        if form == "msort":
            return "sort.msort", f"{v} = torch.msort({x})"
        size = t.shape[d] if t.dim() else 1
        k = r.randint(0, size)
        # with ties topk's indices are unspecified: only its values are compared
        return "sort.topk" + ("_k0" if k == 0 else ""), f"{v} = torch.topk({x}, {k}, dim={d}, largest={desc}).values"

    def g_cast(self):
        r = self.r
        x, t = self.pick()
        to = r.choice(DTYPES)
        src = x
        if t.is_floating_point() and to in (I64, U8):
            # out-of-range float -> integer casts are undefined in C (and on CPU)
            lo, hi = (0, 255) if to == U8 else (-1000, 1000)
            vals = t.float()
            if not bool(torch.isfinite(vals).all()) or float(vals.min()) < lo or float(vals.max()) > hi:
                src = f"{x}.nan_to_num(0.0, {hi}.0, {lo}.0).clamp({lo}, {hi})"
        form = r.choice(["to", "method", "type_as"]) if to != U8 else "to"
        v = self.fresh()
        if form == "method":
            m = {F32: "float", BF16: "bfloat16", I64: "long", BOOL: "bool", U8: "byte"}[to]
            return f"cast.{m}", f"{v} = {src}.{m}()"
        if form == "type_as":
            o = self.pick(lambda u: u.dtype == to)
            if o is not None:
                return "cast.type_as", f"{v} = {src}.type_as({o[0]})"
        return "cast.to", f"{v} = {src}.to({DTYPE_SRC[to]})"

    FAMILIES = (("unary", 14), ("binary", 18), ("reduce", 12), ("matmul", 5), ("view", 16),
                ("inplace", 16), ("index", 10), ("cat", 4), ("sort", 4), ("cast", 8))


def _tag_name(op_src):
    for tok in ("torch.", "{x}."):
        if op_src.startswith(tok):
            return op_src[len(tok):].split("(")[0]
    return {"-{x}": "neg", "~{x}": "bitwise_not", "{x} ** 2": "pow_scalar"}.get(
        op_src, op_src.replace("{x}", "").replace("{y}", "").replace("{d}", "").strip())


def _random_factorization(r, n):
    if n == 0:
        return [0, r.randint(1, 3)] if r.random() < 0.5 else [0]
    fs = []
    m = n
    p = 2
    while m > 1:
        while m % p == 0:
            fs.append(p)
            m //= p
        p += 1
    r.shuffle(fs)
    out = []
    for f in fs:
        if out and r.random() < 0.5:
            out[-1] *= f
        else:
            out.append(f)
    while r.random() < 0.25:
        out.insert(r.randint(0, len(out)), 1)
    return out


def _excluded(tag, exclude):
    return tag in exclude or tag.split("@")[0] in exclude or tag.split(".")[0] in exclude or any(
        "@" + part in exclude for part in tag.split("@")[1:])


def generate(seed, exclude=frozenset(), min_steps=5, max_steps=12, error_share=0.06):
    """The program of `seed`: steps CPU accepts; with probability
    `error_share` the last step is one CPU rejects."""
    g = _Gen(seed, exclude)
    r = g.r
    base = [r.randint(1, 5) for _ in range(r.randint(1, 4))]
    inputs = []
    for i in range(r.randint(2, 4)):
        shape = list(base)
        form = r.random()
        if form < 0.3 and shape:
            shape = shape[r.randint(0, len(shape) - 1):]
        elif form < 0.55:
            shape = [s if r.random() < 0.6 else 1 for s in shape]
        elif form < 0.65:
            shape = []
        elif form < 0.75:
            shape = [r.randint(1, 5) for _ in range(r.randint(1, 3))]
        dtype = r.choice((F32, F32, F32, BF16, I64, I64, BOOL, U8))
        specials = dtype in (F32, BF16) and r.random() < 0.08
        inputs.append((f"a{i}", tuple(shape), dtype, r.randint(0, 1 << 30), specials))
    prog = Program(seed, inputs, [])
    g.ns.update(make_inputs(prog, "cpu"))
    want_error = r.random() < error_share
    names, weights = zip(*_Gen.FAMILIES)
    n_steps = r.randint(min_steps, max_steps)
    tries = 0
    while len(prog.steps) < n_steps and tries < 20 * n_steps:
        tries += 1
        fam = r.choices(names, weights)[0]
        try:
            got = getattr(g, "g_" + fam)()
        except (TypeError, ValueError, IndexError, RuntimeError):
            got = None  # the family found no fitting operands
        if got is None:
            continue
        tag, src = got
        if _excluded(tag, exclude):
            g.nvars -= src.startswith(f"v{g.nvars - 1} =")
            continue
        saved = dict(g.ns)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(src, g.ns)
        except Exception as e:  # noqa: BLE001
            g.ns = saved
            msg = str(e)
            if isinstance(e, NotImplementedError) or "does not support" in msg or "dtypes match" in msg \
                    or "same dtype" in msg:
                tag += "@cpu_rejects_dtype"  # CPU has no kernel for (or refuses) these dtypes
            if want_error and not _excluded(tag, exclude):
                prog.steps.append(Step(tag, src))
                break
            g.nvars -= src.startswith(f"v{g.nvars - 1} =")
            continue
        prog.steps.append(Step(tag, src))
    return prog


# --- running and comparing -------------------------------------------------

@dataclasses.dataclass
class Mismatch:
    kind: str     # "value", "dtype", "shape", "stride", "offset", "alias", "device", "raise", "no-raise", "exc-type"
    var: str
    detail: str
    tag: str      # the step that produced (or last wrote) `var`, or raised

    def signature(self):
        return f"{self.kind}:{self.tag}"


def _exec_steps(program, ns, on_step=None):
    """Runs the steps in `ns`; returns (index, exception) of the first
    that raised, or (None, None)."""
    for i, s in enumerate(program.steps):
        try:
            exec(s.src, ns)
        except Exception as e:  # noqa: BLE001 - every exception is compared
            return i, e
    return None, None


def _tols(dtype):
    if dtype == BF16:
        return 2e-2, 2e-2
    return 1e-4, 1e-5


def _values_equal(c, d, precision=None):
    """c, d: CPU tensors of one dtype and shape; precision: the dtype whose
    tolerance applies (a float cast of a bfloat16 value has bfloat16's)."""
    if c.is_floating_point():
        rtol, atol = _tols(precision or c.dtype)
        c, d = c.float(), d.float()
        return bool(torch.isclose(d, c, rtol=rtol, atol=atol, equal_nan=True).all()) if c.numel() else True
    return bool(torch.equal(c, d))


def _tensor_tags(program):
    """var -> the tag of the last step that named it (its producer or a write)."""
    tags = {}
    for s in program.steps:
        for tok in _names_in(s.src):
            if tok == s.src.split("=")[0].strip() or tok in s.src.split("=")[0]:
                tags[tok] = s.tag
    return tags


def _names_in(src):
    out, cur = [], ""
    for ch in src + " ":
        if ch.isalnum() or ch == "_":
            cur += ch
        else:
            if cur and cur[0] in "av" and cur[1:].isdigit():
                out.append(cur)
            cur = ""
    return out


def _storage_key(t):
    st = t.untyped_storage()
    if st.nbytes() == 0:
        return None
    return st.data_ptr()


def compare_states(program, cpu, dev, views_of_intermediates=True, check_strides=True, compiled=False,
                   device_type="tpu"):
    """cpu, dev: name -> tensor (the live tensors). Returns [Mismatch].
    views_of_intermediates=False skips the storage checks of tensors that
    share no storage with an input."""
    out = []
    tags = _tensor_tags(program)
    names = [n for n, v in cpu.items() if isinstance(v, torch.Tensor)]
    # casts of bfloat16 values keep bfloat16's precision (seed 972425: a
    # one-ulp bfloat16 difference, cast to float32, failed float32's check)
    from_bf16 = set()
    for st in program.steps:
        m = re.match(r"(v\d+) = (\w+)\.(?:float|double|half|to|type_as)\(", st.src)
        if st.tag.startswith("cast.") and m and getattr(cpu.get(m.group(2)), "dtype", None) == BF16:
            from_bf16.add(m.group(1))
    for n in names:
        c, d = cpu[n], dev.get(n)
        tag = tags.get(n, "input")
        if not isinstance(d, torch.Tensor):
            out.append(Mismatch("missing", n, f"{type(d).__name__}", tag))
            continue
        if d.device.type != device_type:
            out.append(Mismatch("device", n, f"on {d.device}", tag))
            continue
        if c.dtype != d.dtype:
            out.append(Mismatch("dtype", n, f"cpu {c.dtype} tpu {d.dtype}", tag))
            continue
        if c.shape != d.shape:
            out.append(Mismatch("shape", n, f"cpu {tuple(c.shape)} tpu {tuple(d.shape)}", tag))
            continue
        # strides of size-1 dims carry no meaning (PyTorch itself varies them)
        cs = [s for s, z in zip(c.stride(), c.shape) if z != 1]
        ds = [s for s, z in zip(d.stride(), d.shape) if z != 1]
        if c.numel() > 1 and cs != ds and (check_strides or c._base is not None and not compiled):
            out.append(Mismatch("stride", n, f"cpu {c.stride()} tpu {d.stride()}", tag))
        if (c._base is not None or d._base is not None) and (views_of_intermediates or n.startswith("a") or any(
                _storage_key(c) == _storage_key(cpu[i]) for i in cpu if i.startswith("a"))):
            if c.storage_offset() != d.storage_offset() and c.numel():
                out.append(Mismatch("offset", n, f"cpu {c.storage_offset()} tpu {d.storage_offset()}", tag))
        dc = d.cpu()
        if not _values_equal(c, dc, BF16 if n in from_bf16 else None):
            out.append(Mismatch("value", n, f"cpu {c.tolist()} tpu {dc.tolist()}"[:400], tag))
    # which tensors share a storage must agree
    keys_c = {n: _storage_key(cpu[n]) for n in names}
    keys_d = {n: _storage_key(dev[n]) for n in names if isinstance(dev.get(n), torch.Tensor)}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if keys_c[a] is None or keys_c[b] is None or a not in keys_d or b not in keys_d:
                continue
            if not views_of_intermediates and not any(
                    keys_c[x] == keys_c[i] for x in (a, b) for i in names if i.startswith("a")):
                continue
            sc = keys_c[a] == keys_c[b]
            sd = keys_d[a] is not None and keys_d[a] == keys_d[b]
            if sc != sd:
                out.append(Mismatch("alias", f"{a},{b}", f"cpu shares={sc} tpu shares={sd}",
                                    tags.get(b, tags.get(a, "input"))))
    return out


def _live(ns):
    return {k: v for k, v in ns.items() if isinstance(v, torch.Tensor)}


def _fn_source(program, returns):
    args = ", ".join(n for n, *_ in program.inputs)
    body = "\n".join("    " + s.src for s in program.steps) or "    pass"
    return f"def prog({args}):\n{body}\n    return ({', '.join(returns)}{',' if returns else ''})\n"


def check(program, mode, skip=frozenset()):
    """Runs `program` on CPU and on tpu in `mode`; returns [Mismatch].
    skip: KNOWN_SKIPPED_CHECKS entries not to make."""
    import torchtpu
    if mode in ("compiled", "compiled_dynamic"):
        # compiled_dynamic: torch.compile(dynamic=True), every size symbolic,
        # so the graph runs padded to its buckets (torchtpu._buckets)
        return _check_compiled(program, "compiled.views_of_intermediates" not in skip,
                               "compiled.strides" not in skip, dynamic=mode == "compiled_dynamic")
    ns_c = {"torch": torch, "DEV": "cpu", **make_inputs(program, "cpu")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ic, ec = _exec_steps(program, ns_c)
    ns_d = {"torch": torch, "DEV": "tpu"}
    sync_exc = None
    with torchtpu.eager_mode(mode), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ns_d.update(make_inputs(program, "tpu"))
        idd, ed = _exec_steps(program, ns_d)
        try:
            torchtpu.flush()
            torch.tpu.synchronize()
            cpu_copies = {k: v.cpu() for k, v in _live(ns_d).items()}
        except Exception as e:  # noqa: BLE001
            sync_exc = e
            cpu_copies = None
    return _judge(program, mode, ic, ec, idd, ed, sync_exc, ns_c, ns_d, cpu_copies,
                  "eager.computed_strides" not in skip)


def _judge(program, mode, ic, ec, idd, ed, sync_exc, ns_c, ns_d, cpu_copies, check_strides=True):
    steps = program.steps
    if ec is not None:
        tag = steps[ic].tag
        got = ed if ed is not None else sync_exc
        if got is None:
            return [Mismatch("no-raise", f"step{ic}", f"cpu raised {type(ec).__name__}: {str(ec)[:200]}", tag)]
        if idd is not None and idd != ic:
            return [Mismatch("raise", f"step{idd}", f"tpu raised at step {idd} {type(ed).__name__}: "
                             f"{str(ed)[:200]}; cpu at step {ic}", steps[idd].tag)]
        if not isinstance(got, type(ec)):
            return [Mismatch("exc-type", f"step{ic}", f"cpu {type(ec).__name__}: {str(ec)[:150]} | "
                             f"tpu {type(got).__name__}: {str(got)[:150]}", tag)]
        if mode == "debug" and ed is None:
            return [Mismatch("late-raise", f"step{ic}", "debug raised at the sync, not at the op", tag)]
        return []
    if ed is not None:
        return [Mismatch("raise", f"step{idd}", f"{type(ed).__name__}: {str(ed)[:300]}", steps[idd].tag)]
    if sync_exc is not None:
        return [Mismatch("raise", "sync", f"{type(sync_exc).__name__}: {str(sync_exc)[:300]}", "sync")]
    return compare_states(program, _live(ns_c), _live(ns_d), check_strides=check_strides)


_COMPILE_COUNT = [0]


def _check_compiled(program, views_of_intermediates=True, check_strides=True, dynamic=False):
    import torchtpu  # noqa: F401
    # every name a step assigns is returned, plus the inputs (in-place writes)
    outs = []
    for s in program.steps:
        lhs = s.src.split(" = ")[0] if " = " in s.src else ""
        if lhs.startswith("v") and lhs[1:].isdigit() and lhs not in outs:
            outs.append(lhs)
    src = _fn_source(program, outs)
    ins = [n for n, *_ in program.inputs]

    def build(dev):
        g = {"torch": torch, "DEV": dev}
        exec(src, g)
        return g["prog"]

    cpu_in = make_inputs(program, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res_c, ec = build("cpu")(*cpu_in.values()), None
        except Exception as e:  # noqa: BLE001
            res_c, ec = None, e
        _COMPILE_COUNT[0] += 1
        if _COMPILE_COUNT[0] % 50 == 0:
            torch._dynamo.reset()
        dev_in = make_inputs(program, "tpu")
        try:
            fn = torch.compile(build("tpu"), backend="tpu", dynamic=dynamic or None)
            res_d, ed = fn(*dev_in.values()), None
            torch.tpu.synchronize()
        except Exception as e:  # noqa: BLE001
            res_d, ed = None, e
    if ec is not None:
        if ed is None:
            m = Mismatch("no-raise", "compiled", f"cpu raised {type(ec).__name__}: {str(ec)[:200]}",
                         _raising_tag(program))
            # CPU eager's check that PyTorch's compile stack drops on the CPU
            # too (functionalization has no overlapping writes to refuse)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.compile(build("cpu"), backend="aot_eager")(*make_inputs(program, "cpu").values())
            except Exception:  # noqa: BLE001
                return [m]
            return [Mismatch("pytorch", m.var, m.detail, "pytorch")]
        return []  # Dynamo wraps exceptions in its own types: raising is the check
    if ed is not None:
        # a failure Dynamo/AOTAutograd have on CPU too is PyTorch's, not ours
        try:
            torch.compile(build("cpu"), backend="aot_eager")(*make_inputs(program, "cpu").values())
        except Exception:  # noqa: BLE001
            return [Mismatch("pytorch", "compiled", f"{type(ed).__name__}: {str(ed)[:200]}", "pytorch")]
        return [Mismatch("raise", "compiled", f"{type(ed).__name__}: {str(ed)[:300]}", _raising_tag(program, ed))]
    cpu = dict(zip(outs, res_c))
    cpu.update(cpu_in)
    cpu = {k: cpu[k] for k in ins + outs}
    dev = dict(zip(outs, res_d))
    dev.update(dev_in)
    ms = compare_states(program, cpu, dev, views_of_intermediates, check_strides, compiled=True)
    if ms:
        ms = _pytorch_limited(program, build, ins, outs, cpu, dev, ms, views_of_intermediates,
                              check_strides)
    return ms


def _pytorch_limited(program, build, ins, outs, cpu, dev, ms, views_of_intermediates, check_strides):
    """Marks "pytorch" the mismatches PyTorch's own compile stack has on the
    CPU too: where aot_eager's result differs from eager's the same way
    (same kind, same tensor) and ours agrees with aot_eager's there (Python
    meta kernels pick other strides than TensorIterator; writes
    through unfold, which functionalization loses, run eagerly here and
    are no longer among them)."""
    aot_in = make_inputs(program, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res_a = torch.compile(build("cpu"), backend="aot_eager")(*aot_in.values())
        except Exception:  # noqa: BLE001
            return ms
    aot = dict(zip(outs, res_a))
    aot.update(aot_in)
    aot = {k: aot[k] for k in ins + outs}
    vs_eager = {(m.kind, m.var) for m in compare_states(program, cpu, aot, views_of_intermediates,
                                                         check_strides, compiled=True,
                                                         device_type="cpu")}
    vs_aot = {(m.kind, m.var) for m in compare_states(program, aot, dev, views_of_intermediates,
                                                      check_strides, compiled=True)}
    return [Mismatch("pytorch", m.var, m.detail, "pytorch")
            if (m.kind, m.var) in vs_eager and (m.kind, m.var) not in vs_aot else m for m in ms]


def _raising_tag(program, exc=None):
    if exc is not None:
        text = "".join(traceback.format_exception(exc))
        for s in reversed(program.steps):
            if s.src in text:
                return s.tag
    return program.steps[-1].tag if program.steps else "empty"


# --- minimizing and printing -----------------------------------------------

def _still_fails(program, mode, kind, skip=frozenset()):
    try:
        ms = check(program, mode, skip)
    except Exception:  # noqa: BLE001 - a crash of the harness is not the same failure
        return None
    ms = [m for m in ms if m.kind == kind and m.kind != "pytorch"]
    return ms or None


def minimize(program, mode, kind, budget=200, skip=frozenset()):
    """Deletes steps, then shrinks inputs, while a mismatch of `kind` remains."""
    best = program
    evals = 0
    changed = True
    while changed and evals < budget:
        changed = False
        # delete chunks of steps, largest first
        n = len(best.steps)
        chunk = max(n // 2, 1)
        while chunk >= 1 and evals < budget:
            i = 0
            while i < len(best.steps) and evals < budget:
                cand = Program(best.seed, best.inputs, best.steps[:i] + best.steps[i + chunk:])
                evals += 1
                if cand.steps and _still_fails(cand, mode, kind, skip):
                    best, changed = cand, True
                else:
                    i += chunk
            chunk //= 2
        # drop unused inputs
        used = set(_names_in(best.source()))
        ins = [x for x in best.inputs if x[0] in used]
        if len(ins) < len(best.inputs):
            cand = Program(best.seed, ins, best.steps)
            evals += 1
            if _still_fails(cand, mode, kind, skip):
                best, changed = cand, True
        # shrink input shapes, drop specials
        for j, (name, shape, dtype, ds, sp) in enumerate(best.inputs):
            alts = []
            if sp:
                alts.append((name, shape, dtype, ds, False))
            for d, s in enumerate(shape):
                if s > 1:
                    alts.append((name, shape[:d] + (s - 1,) + shape[d + 1:], dtype, ds, sp))
            for alt in alts:
                if evals >= budget:
                    break
                ins = list(best.inputs)
                ins[j] = alt
                cand = Program(best.seed, ins, best.steps)
                evals += 1
                if _still_fails(cand, mode, kind, skip):
                    best, changed = cand, True
                    break
    return best


def repro(program, mode):
    """A self-contained script: inputs as literals, the steps, and the comparison."""
    lines = ["import torch", "import torchtpu", ""]
    if mode not in ("strict", "compiled"):
        lines += [f"torchtpu.set_eager_mode({mode!r})", ""]
    args = ", ".join(n for n, *_ in program.inputs)
    lines.append(f"def prog(DEV{', ' if args else ''}{args}):" if mode != "compiled" else f"def prog({args}):")
    if mode == "compiled":
        lines.append(f"    DEV = {program.inputs[0][0]}.device" if program.inputs else "    DEV = 'cpu'")
    for s in program.steps:
        lines.append("    " + s.src)
    lines.append("    return {k: v for k, v in locals().items() if isinstance(v, torch.Tensor)}")
    lines.append("")
    ins = []
    for name, shape, dtype, ds, sp in program.inputs:
        t = make_input(shape, dtype, ds, sp)
        lit = repr(t.float().tolist() if dtype == BF16 else t.tolist()).replace("nan", "float('nan')").replace("inf", "float('inf')")
        ins.append(f"{name} = torch.tensor({lit}, dtype={DTYPE_SRC[dtype]})")
    lines += ins
    names = [n for n, *_ in program.inputs]
    clone = lambda dev: ", ".join(f"{n}.clone().to({dev!r})" for n in names)  # noqa: E731
    if mode == "compiled":
        lines.append(f"cpu = prog({clone('cpu')})")
        lines.append(f"tpu = torch.compile(prog, backend='tpu')({clone('tpu')})")
    else:
        lines.append(f"cpu = prog('cpu'{', ' if names else ''}{clone('cpu')})")
        lines.append(f"tpu = prog('tpu'{', ' if names else ''}{clone('tpu')})")
    lines.append("def storage_of(res):  # name -> first name sharing its storage")
    lines.append("    ptrs = {k: v.untyped_storage().data_ptr() for k, v in res.items()}")
    lines.append("    return {k: min(j for j in ptrs if ptrs[j] == p) for k, p in ptrs.items()}")
    lines.append("for k in cpu:")
    lines.append("    print(k, cpu[k].dtype, tuple(cpu[k].shape), cpu[k].stride(), storage_of(cpu)[k], cpu[k].tolist())")
    lines.append("    print(k, tpu[k].dtype, tuple(tpu[k].shape), tpu[k].stride(), storage_of(tpu)[k], tpu[k].cpu().tolist())")
    return "\n".join(lines)


# --- the campaign ------------------------------------------------------------

def run(n_programs, modes, seed0=0, exclude=frozenset(), minimize_max=20, log=print, timeout_s=None,
        skip=frozenset()):
    """Checks n_programs programs (seeds seed0..) in each mode. Returns
    {mode: {"programs", "checks_raise", "mismatches", "classes": {sig: (program, [Mismatch])}}}."""
    stats = {}
    for mode in modes:
        st = {"programs": 0, "error_programs": 0, "mismatches": 0, "pytorch_limited": 0,
              "classes": {}, "seconds": 0.0}
        t0 = time.time()
        for k in range(n_programs):
            if timeout_s is not None and time.time() - t0 > timeout_s:
                break
            p = generate(seed0 + k, exclude)
            try:
                ms = check(p, mode, skip)
            except Exception as e:  # noqa: BLE001 - a harness crash is reported as a mismatch
                ms = [Mismatch("harness", "-", f"{type(e).__name__}: {e}"[:300], "harness")]
            st["programs"] += 1
            if p.steps and _cpu_raises(p):
                st["error_programs"] += 1
            if ms and all(m.kind == "pytorch" for m in ms):
                st["pytorch_limited"] += 1
                continue
            ms = [m for m in ms if m.kind != "pytorch"]
            if ms:
                st["mismatches"] += 1
                sig = ms[0].signature()
                if sig not in st["classes"]:
                    st["classes"][sig] = [p, ms, 1]
                    log(f"[{mode}] seed {p.seed}: new class {sig}: {ms[0].var}: {ms[0].detail[:200]}")
                else:
                    st["classes"][sig][2] += 1
        st["seconds"] = time.time() - t0
        if minimize_max:
            for i, (sig, entry) in enumerate(list(st["classes"].items())[:minimize_max]):
                p, ms = entry[0], entry[1]
                small = minimize(p, mode, ms[0].kind, skip=skip)
                entry.append(small)
                log(f"\n### [{mode}] {sig} ({entry[2]} programs; seed {p.seed})\n"
                    f"{(_still_fails(small, mode, ms[0].kind, skip) or ms)[0]}\n{repro(small, mode)}\n")
        log(f"== {mode}: {st['programs']} programs ({st['error_programs']} ending in a CPU error), "
            f"{st['mismatches']} mismatches in {len(st['classes'])} classes, "
            f"{st['pytorch_limited']} PyTorch-limited, {st['seconds']:.0f} s")
        stats[mode] = st
    return stats


def _cpu_raises(p):
    ns = {"torch": torch, "DEV": "cpu", **make_inputs(p, "cpu")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _exec_steps(p, ns)[0] is not None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=int(os.environ.get("FUZZ_PROGRAMS", 500)))
    ap.add_argument("--modes", default=os.environ.get("FUZZ_MODES", ",".join(MODES)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", 0)))
    ap.add_argument("--exclude", default=os.environ.get("FUZZ_EXCLUDE", ""),
                    help="comma-separated step tags or families not to generate; 'known' = KNOWN_MISMATCH_TAGS")
    ap.add_argument("--minimize", type=int, default=20, help="classes minimized per mode")
    ap.add_argument("--show", type=int, default=None, help="print the program of this seed and exit")
    a = ap.parse_args(argv)
    exclude = set(x for x in a.exclude.split(",") if x)
    skip = frozenset()
    if "known" in exclude:
        exclude = (exclude - {"known"}) | KNOWN_MISMATCH_TAGS
        skip = KNOWN_SKIPPED_CHECKS
    if a.show is not None:
        p = generate(a.show, frozenset(exclude))
        print(p.inputs)
        print(p.source())
        return 0
    stats = run(a.programs, a.modes.split(","), a.seed, frozenset(exclude), a.minimize, skip=skip)
    total = sum(s["mismatches"] for s in stats.values())
    print("\nsummary: " + "; ".join(f"{m}: {s['programs']} programs, {s['mismatches']} mismatches"
                                    for m, s in stats.items()))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
