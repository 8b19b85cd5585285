"""Sweep: the strides of every lowered pointwise op's result on tpu against
CPU PyTorch's, over operand layouts (transposed, permuted, sliced, expanded,
broadcast, unfold'ed, size-1 dims with odd strides, 0-dim, channels_last)
and dtype mixes. Eager output metadata comes from PyTorch's meta kernels,
some of which are Python references whose layout rules differ from the CPU
TensorIterator's; this finds where they disagree.

Runs in defer_and_fuse mode and never reads a value, so nothing compiles
(the strides are known when the op is recorded): a few minutes for all ops.
Also the out= overload with an empty out (resized, so restrided as a new
result on CPU). Not a pytest file: `nice .venv/bin/python tests/stride_sweep.py [--ops add,mul]`
prints one line per op whose strides differ and exits 1 if any does."""
import argparse
import itertools
import sys
import warnings

import torch

import torchtpu

S = (2, 3, 4)


def layouts_3d():
    """name -> fn(dtype, device) making a tensor that broadcasts to S."""
    def t(shape, dtype, device):
        g = torch.Generator().manual_seed(len(shape) * 7 + sum(shape))
        if dtype == torch.bool:
            x = torch.rand(shape, generator=g) > 0.5
        elif dtype.is_floating_point:
            x = (torch.rand(shape, generator=g) * 0.8 + 0.1).to(dtype)
        else:
            x = torch.randint(1, 5, shape, generator=g).to(dtype)
        return x.to(device)

    return {
        "contig": lambda d, dev: t(S, d, dev),
        "rev": lambda d, dev: t(S[::-1], d, dev).permute(2, 1, 0),
        "perm": lambda d, dev: t((3, 4, 2), d, dev).permute(2, 0, 1),
        "slice": lambda d, dev: t((2, 3, 8), d, dev)[..., ::2],
        "expand": lambda d, dev: t((2, 1, 4), d, dev).expand(S),
        "bcast": lambda d, dev: t((3, 1), d, dev),
        "bcast_t": lambda d, dev: t((4, 3), d, dev).t(),
        "unfold": lambda d, dev: t((2, 6), d, dev).unfold(1, 4, 1),
        "size1": lambda d, dev: t((2, 3, 4), d, dev)[:, 1:2],
        "size1_t": lambda d, dev: t((4, 1, 2), d, dev).permute(2, 1, 0),
        "zerodim": lambda d, dev: t((), d, dev),
    }


def layouts_4d():
    s4 = (2, 3, 4, 5)

    def t(shape, dtype, device):
        x = torch.arange(1, 1 + int(torch.tensor(shape).prod()), dtype=torch.float32).reshape(shape)
        x = (x % 5 + 1) / 8
        return (x > 0.3 if dtype == torch.bool else x.to(dtype)).to(device)

    return {
        "contig4": lambda d, dev: t(s4, d, dev),
        "cl": lambda d, dev: t(s4, d, dev).to(memory_format=torch.channels_last),
        "rev4": lambda d, dev: t(s4[::-1], d, dev).permute(3, 2, 1, 0),
        "bcast4": lambda d, dev: t((3, 1, 1), d, dev),
        "cl_bcast": lambda d, dev: t((2, 3, 1, 5), d, dev).to(memory_format=torch.channels_last),
    }


def pointwise_ops(only=None):
    """Lowered functional overloads tagged pointwise (random ones too: their
    strides are known without reading values)."""
    low = set(torchtpu._C._lowerings())
    out = []
    for name in sorted(dir(torch.ops.aten)):
        if name not in low or (only and name not in only):
            continue
        try:
            packet = getattr(torch.ops.aten, name)
            overloads = packet.overloads()
        except Exception:  # noqa: BLE001
            continue
        for ov in overloads:
            op = getattr(packet, ov)
            if torch.Tag.pointwise not in op.tags:
                continue
            schema = op._schema
            if schema.is_mutable or any(a.alias_info is not None for a in schema.returns):
                continue
            out.append(op)
    return out


# Lowered elementwise overloads PyTorch does not tag pointwise, whose CPU
# kernels are TensorIterators too (or allocate like one).
EXTRA = ["floor_divide.default", "floor_divide.Scalar", "elu_backward.default",
         "hardshrink_backward.default", "hardsigmoid_backward.default", "hardswish.default",
         "hardswish_backward.default", "hardtanh_backward.default", "leaky_relu_backward.default",
         "log_sigmoid_backward.default", "softplus_backward.default", "softshrink_backward.default",
         "where.ScalarOther", "where.ScalarSelf", "where.Scalar", "_prelu_kernel.default",
         "_prelu_kernel_backward.default", "mse_loss.default", "huber_loss.default",
         "smooth_l1_loss.default", "mse_loss_backward.default", "huber_loss_backward.default",
         "smooth_l1_loss_backward.default", "binary_cross_entropy.default",
         "binary_cross_entropy_backward.default", "masked_fill.Tensor", "fill.Scalar", "fill.Tensor",
         "zero.default", "_to_copy.default", "lift_fresh_copy.default", "bernoulli.p",
         "uniform.default", "native_dropout.default", "log_sigmoid_forward.default", "glu.default"]


def extra_ops(only=None):
    out = []
    for spec in EXTRA:
        name, ov = spec.split(".")
        if only and name not in only:
            continue
        out.append(getattr(getattr(torch.ops.aten, name), ov))
    return out


def arg_plans(op):
    """Ways to call op: per schema argument 'T' (a tensor operand) or a
    fixed value. The defaults; then Scalars that default to 1 (alpha,
    value) as 2: add's reference multiplies by alpha first."""
    plan, alt = [], []
    for a in op._schema.arguments:
        ty = str(a.type)
        if ty in ("Tensor", "Tensor?", "Optional[Tensor]"):
            v = "T"
        elif a.name == "min" and op._schema.name == "aten::clamp":
            v = ("v", 0.5)  # clamp needs a bound
        elif a.name == "reduction":
            v = ("v", 0)  # elementwise losses
        elif a.has_default_value():
            v = ("v", a.default_value)
        elif ty in ("Scalar", "number"):
            v = ("v", 2)
        elif ty == "int":
            v = ("v", 1)
        elif ty == "float":
            v = ("v", 0.5)
        elif ty == "bool":
            v = ("v", False)
        elif ty in ("str?", "Optional[str]"):
            v = ("v", "floor")
        else:
            return []
        plan.append(v)
        alt.append(("v", 2) if ty in ("Scalar", "number") and a.has_default_value() and a.default_value == 1
                   else v)
    return [plan] + ([alt] if alt != plan else [])


def run_op(op, plan, tensors, out=None):
    args, it = [], iter(tensors)
    kwargs = {}
    for a, p in zip(op._schema.arguments, plan):
        v = next(it) if p == "T" else p[1]
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    if out is None:
        return op(*args, **kwargs)
    # the out= overload: an empty out is resized, and restrided as a new result
    op._overloadpacket(*args, **kwargs, out=out)
    return out


def strides_of(r):
    if isinstance(r, torch.Tensor):
        return [(tuple(r.shape), r.stride())]
    if isinstance(r, (tuple, list)):
        return [(tuple(x.shape), x.stride()) for x in r if isinstance(x, torch.Tensor)]
    return []


DTYPE_MIXES = [
    ("f32", lambda n: [torch.float32] * n),
    ("f32+i64", lambda n: [torch.float32] + [torch.int64] * (n - 1)),
    ("bool+f32", lambda n: [torch.bool] + [torch.float32] * (n - 1)),
    ("i64", lambda n: [torch.int64] * n),
    ("bool", lambda n: [torch.bool] * n),
]


def case(op, plan, makers, dtypes, out_dtype):
    """(cpu strides, tpu strides) of one call; None when CPU rejects it."""
    def go(dev):
        tensors = [m(d, dev) for m, d in zip(makers, dtypes)]
        out = None if out_dtype is None else torch.empty(0, dtype=out_dtype, device=dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return strides_of(run_op(op, plan, tensors, out))
    try:
        want = go("cpu")
    except Exception:  # noqa: BLE001 (CPU rejects it: not a case)
        return None
    try:
        got = go("tpu")
    except Exception as e:  # noqa: BLE001
        got = f"raised {type(e).__name__}: {str(e).splitlines()[0][:100]}"
    return want, got


def report(name, cases, verbose):
    print(f"{name}: {len(cases)} cases, e.g. {cases[0]}", flush=True)
    if verbose:
        for c in cases[1:]:
            print("   ", c)


def sweep(ops, max_combos, mixes, outs, verbose=False):
    lay3, lay4 = layouts_3d(), layouts_4d()
    bad = {}
    total = 0
    for op in ops:
        for k, plan in enumerate(arg_plans(op)):
            n = plan.count("T")
            if n == 0:
                continue
            combos = []
            for group in (lay3, lay4):
                every = list(itertools.product(list(group), repeat=n))
                step = max(1, len(every) // max_combos)
                combos += [([group[c] for c in combo], combo) for combo in every[::step]]
            out_sample = {(mixes[0][0], names) for _, names in combos[::max(1, len(combos) // 12)]}
            for mix_name, mix in mixes:
                dtypes = mix(n)
                for makers, names in combos:
                    r = case(op, plan, makers, dtypes, None)
                    if r is None or not r[0]:
                        continue
                    total += 1
                    if r[0] != r[1]:
                        bad.setdefault(str(op), []).append((mix_name, k, names, r[0], r[1]))
                    # out= runs compile (a resize is not deferred): a sample
                    if outs and len(r[0]) == 1 and (mix_name, names) in out_sample:
                        # out= of the result's dtype (CPU's, so no cast error)
                        want_dtype = run_op(op, plan, [m(d, "cpu") for m, d in zip(makers, dtypes)]).dtype
                        ro = case(op, plan, makers, dtypes, want_dtype)
                        if ro is None:
                            continue
                        total += 1
                        if ro[0] != ro[1]:
                            bad.setdefault(str(op) + " out=", []).append((mix_name, k, names, ro[0], ro[1]))
        # an out= call runs the deferred ops before it: keep that run short
        torchtpu.flush()
        for name in (str(op), str(op) + " out="):
            if name in bad:
                report(name, bad[name], verbose)
    return bad, total


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="", help="comma-separated aten base names (default: all)")
    ap.add_argument("--max-combos", type=int, default=130,
                    help="operand-layout combinations per op and layout group")
    ap.add_argument("--mixes", default="all", help="dtype mixes: " + ",".join(m for m, _ in DTYPE_MIXES))
    ap.add_argument("-v", action="store_true", help="print every differing case")
    ap.add_argument("--no-out", action="store_true", help="skip the out= (resized) calls")
    ap.add_argument("--extra", action="store_true",
                    help="also the untagged elementwise overloads in EXTRA")
    a = ap.parse_args(argv)
    only = set(x for x in a.ops.split(",") if x) or None
    mixes = DTYPE_MIXES if a.mixes == "all" else [m for m in DTYPE_MIXES if m[0] in a.mixes.split(",")]
    ops = pointwise_ops(only) + (extra_ops(only) if a.extra else [])
    with torchtpu.eager_mode("defer_and_fuse"):
        bad, total = sweep(ops, a.max_combos, mixes, not a.no_out, a.v)
        torchtpu.flush()
    print(f"{len(ops)} ops, {total} cases, {sum(map(len, bad.values()))} differ in {len(bad)} ops")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
