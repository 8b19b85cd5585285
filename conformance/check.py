"""One OpInfo sample on tpu and on CPU: run, compare, classify.

Outcomes (one per sample):
  pass        outputs (or gradients) match CPU within tolerance
  mismatch    they differ (values, shape or dtype)
  error       tpu raised (CPU did not)
  skip        not comparable: CPU itself raised, or (backward) the sample
              has no differentiable output
  unverified  the op's output is nondeterministic or upstream calls it
              undefined: shape/dtype checked, values not counted as a pass
Whether the tpu run used the CPU fallback is recorded beside the outcome.
"""
import itertools

import torch
import torchtpu

DEVICE = "tpu"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "bool": torch.bool}

# float32 uses torch.testing.assert_close's defaults; bfloat16 is relaxed
# the way upstream's toleranceOverride entries for bfloat16 are (2-3 ulp),
# since XLA may keep intermediates in float32 where CPU rounds each step.
TOLERANCES = {torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


def _map(obj, fn):
    """Applies fn to every leaf of nested lists/tuples/dicts."""
    if isinstance(obj, list):
        return [_map(o, fn) for o in obj]
    if isinstance(obj, tuple):
        items = [_map(o, fn) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: _map(v, fn) for k, v in obj.items()}
    return fn(obj)


def leaves(obj):
    """The leaves of nested lists/tuples/dicts, in _map's order."""
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in leaves(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in leaves(o)]
    return [obj]


def _same_layout_on(x, device, storages=None):
    """x on `device` with its strides and storage offset: its whole storage
    copied, then viewed as x (so expanded and overlapping tensors stay
    what they are). `storages` maps CPU storages already copied to their
    copies, so tensors sharing memory on CPU (an out= that is an input's
    view) share it on the device too."""
    if x.layout != torch.strided or x.device.type == torch.device(device).type:
        return x.detach().to(device)
    key = (x.untyped_storage().data_ptr(), x.dtype)
    flat = storages.get(key) if storages is not None else None
    if flat is None:
        n = x.untyped_storage().nbytes() // x.element_size()
        flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (n,), (1,)).to(device)
        if storages is not None and key[0]:
            storages[key] = flat
    return flat.as_strided(x.size(), x.stride(), x.storage_offset())


def to_device(obj, device, pinned=frozenset(), keep_layout=False):
    """Tensors copied to `device` as new leaves keeping requires_grad, except
    the leaves at positions `pinned`, which stay on the CPU; device
    arguments ("cpu", torch.device("cpu")) retargeted. keep_layout: tpu
    copies keep the CPU tensors' strides (see _same_layout_on)."""
    position = itertools.count()
    storages = {}

    def move(x):
        here = next(position)
        if isinstance(x, torch.Tensor):
            target = "cpu" if here in pinned else device
            moved = _same_layout_on(x.detach(), target, storages) if keep_layout else x.detach().to(target)
            return moved.requires_grad_(x.requires_grad)
        if device == DEVICE and (x == "cpu" if isinstance(x, str) else
                                 isinstance(x, torch.device) and x.type == "cpu"):
            return torch.device(DEVICE) if isinstance(x, torch.device) else DEVICE
        return x
    return _map(obj, move)


def _cpu(obj):
    return _map(obj, lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x)


def format_error(exc):
    text = str(exc).strip().splitlines()
    first = next((ln for ln in text if ln.strip()), "")
    return f"{type(exc).__name__}: {first}"[:300]


def _tolerance(dtype, inexact):
    """Tolerances for a value of a sample of `dtype`; exact values use
    assert_close's own (zero for integers and bool)."""
    return TOLERANCES.get(dtype, {}) if inexact else {}


def compare(got, want, dtype, shape_only=False):
    """None when got (moved to CPU) matches want, else a one-line reason."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return f"structure differs: {type(got).__name__} vs {type(want).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = compare(g, w, dtype, shape_only)
            if why:
                return f"[{i}] {why}"
        return None
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"got {type(got).__name__}, want Tensor"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
        if shape_only:
            return None
        try:
            torch.testing.assert_close(got, want, equal_nan=True, check_device=False,
                                       check_stride=False, check_layout=False,
                                       **_tolerance(dtype, want.is_floating_point()
                                                    or want.is_complex()))
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = "; ".join(ln for ln in lines if ln.startswith(("Mismatched", "Greatest")))
            return (detail or (lines[0] if lines else "values differ"))[:300]
        return None
    if isinstance(want, (bool, int, float, complex)) and not shape_only:
        try:
            torch.testing.assert_close(got, want, equal_nan=True,
                                       **_tolerance(dtype, isinstance(want, (float, complex))))
        except (AssertionError, TypeError, ValueError) as e:
            return f"scalar {got!r} vs {want!r}: {str(e).splitlines()[0][:100]}"
        return None
    if shape_only or want is None or isinstance(want, (str, torch.dtype, torch.device)):
        return None if (shape_only or got == want) else f"{got!r} vs {want!r}"
    return None if got == want else f"{type(got).__name__} {got!r} vs {want!r}"[:300]


def _fallback_delta(before):
    after = torchtpu.metrics.fallback_counts()
    return sorted(k for k, v in after.items() if v != before.get(k, 0))


def _call(op, sample):
    out = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(out)


def _as_sample(sample, parts):
    inp, args, kwargs = parts
    return type(sample)(inp, args=tuple(args), kwargs=dict(kwargs),
                        output_process_fn_grad=sample.output_process_fn_grad)


def _split(sample, device, pinned=frozenset(), keep_layout=False):
    parts = (sample.input, list(sample.args), sample.kwargs)
    return _as_sample(sample, to_device(parts, device, pinned, keep_layout))


_UNVERIFIED = {"undefined": "undefined per upstream: ",
               "expected_to_differ": "upstream expects devices to differ from CPU here: "}


def _outcome(why, kind):
    if why is None:
        return ("unverified", "values not compared (nondeterministic op)") \
            if kind == "nondeterministic" else ("pass", "")
    if kind in _UNVERIFIED:
        return "unverified", _UNVERIFIED[kind] + why
    return "mismatch", why


def _error(e, kind):
    if kind == "expected_to_differ":
        return "unverified", _UNVERIFIED[kind] + format_error(e)
    return "error", format_error(e)


def run_forward(op, sample, dtype, kind, pinned=frozenset()):
    """(outcome, message, fallback ops) for one forward sample; `pinned`:
    leaf positions that stay on the CPU (see ops.cpu_pinned)."""
    tpu_sample = _split(sample, DEVICE, pinned)   # copied before CPU may mutate inputs
    cpu_sample = _split(sample, "cpu")
    try:
        want = _cpu(_call(op, cpu_sample))
    except Exception as e:  # noqa: BLE001  (CPU rejects the sample)
        return "skip", "cpu error: " + format_error(e), []
    before = torchtpu.metrics.fallback_counts()
    try:
        got = _cpu(_call(op, tpu_sample))
    except Exception as e:  # noqa: BLE001
        return (*_error(e, kind), _fallback_delta(before))
    used = _fallback_delta(before)
    return (*_outcome(compare(got, want, dtype, kind == "nondeterministic"), kind), used)


def _grads(op, sample, device, seed):
    """Gradients of <outputs, fixed random cotangents> with respect to every
    input that requires grad; None entries where an input is unused."""
    out = _call(op, sample)
    outs = [o for o in leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    ins = [t for t in leaves((sample.input, list(sample.args), sample.kwargs))
           if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not ins:
        return None
    g = torch.Generator().manual_seed(seed)
    cots = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(device) for o in outs]
    return list(torch.autograd.grad(outs, ins, cots, allow_unused=True))


def run_backward(op, sample, dtype, kind, pinned=frozenset(), seed=0):
    """(outcome, message, fallback ops) for one gradient sample."""
    tpu_sample = _split(sample, DEVICE, pinned)
    cpu_sample = _split(sample, "cpu")
    try:
        want = _grads(op, cpu_sample, "cpu", seed)
    except Exception as e:  # noqa: BLE001
        return "skip", "cpu error: " + format_error(e), []
    if want is None:
        return "skip", "no differentiable output", []
    before = torchtpu.metrics.fallback_counts()
    try:
        got = _cpu(_grads(op, tpu_sample, DEVICE, seed))
    except Exception as e:  # noqa: BLE001
        return (*_error(e, kind), _fallback_delta(before))
    used = _fallback_delta(before)
    if got is None:
        return "mismatch", "tpu output does not require grad", used
    return (*_outcome(compare(got, want, dtype, kind == "nondeterministic"), kind), used)



# ---- error_inputs, out= and in-place variants -------------------------------

def _raised(fn):
    """(result, exception, warning messages) of fn()."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(), None, [str(w.message) for w in caught]
        except Exception as e:  # noqa: BLE001  (the type is what is compared)
            return None, e, [str(w.message) for w in caught]


def _synced(fn):
    """fn's result once read back: errors the device raises at the next
    host read (an out-of-range index, like CUDA's device-side asserts)
    surface here, as in a program that reads the result."""
    def run():
        r = fn()
        _cpu(r)
        return r
    return run


def _same_error(got, want):
    """None when the tpu run raised what CPU raised (the same exception
    type; both or neither), else the reason."""
    if want is None and got is None:
        return None
    if want is None:
        return "tpu raised " + format_error(got) + "; CPU did not"
    if got is None:
        return "CPU raised " + format_error(want) + "; tpu did not"
    if type(got) is not type(want):
        return f"tpu raised {format_error(got)}; CPU raised {format_error(want)}"
    return None


def run_error(op, error_input, dtype, kind, pinned=frozenset()):
    """One OpInfo error_inputs sample: CPU raises; tpu must raise the same
    exception type (and not crash)."""
    sample = error_input.sample_input
    tpu_sample = _split(sample, DEVICE, pinned, keep_layout=True)
    cpu_sample = _split(sample, "cpu")
    _, want, _ = _raised(lambda: _call(op, cpu_sample))
    if want is None:
        return "skip", "CPU does not raise", []
    before = torchtpu.metrics.fallback_counts()
    _, got, _ = _raised(_synced(lambda: _call(op, tpu_sample)))
    why = _same_error(got, want)
    return ("pass", "", _fallback_delta(before)) if why is None else \
        ("mismatch", why, _fallback_delta(before))


from .ops import OUT_SAMPLES, OUT_VARIANTS  # noqa: E402


def _out_dtype(dtype, variant):
    if variant != "wrong_dtype":
        return dtype
    # A float result into int64 (CPU refuses: can't cast); an integer one into
    # bool (refused); a bool one into int64 (allowed: the result is cast).
    if dtype.is_floating_point or dtype.is_complex:
        return torch.int64
    return torch.int64 if dtype == torch.bool else torch.bool


def _make_out(want, variant, device):
    """Out tensors shaped after `want` (a tensor or a sequence of them):
    contiguous; strided (every other element of a sentinel-filled base);
    of a wrong nonempty shape (CPU resizes and warns); of a wrong dtype.
    Returns (out, bases): bases are the tensors whose whole storage is
    compared afterwards."""
    if isinstance(want, (list, tuple)):
        pairs = [_make_out(w, variant, device) for w in want]
        return tuple(p[0] for p in pairs), [b for p in pairs for b in p[1]]
    dt = _out_dtype(want.dtype, variant)
    if variant == "strided":
        base = torch.full((*want.shape, 2), 7, dtype=dt, device=device)
        return base[..., 1], [base]
    shape = (want.numel() + 2,) if variant == "resized" else want.shape
    out = torch.full(shape, 7, dtype=dt, device=device)
    return out, [out]


def _identity(ret, out):
    if isinstance(out, tuple):
        return isinstance(ret, (list, tuple)) and len(ret) == len(out) and \
            all(r is o for r, o in zip(ret, out))
    return ret is out


def run_out(op, item, dtype, kind, pinned=frozenset()):
    """One out= check: the op into out tensors built the same way on CPU and
    tpu (see _make_out); the same error, or the same values in the out
    tensors (strided: in the whole base), the return being the out
    tensors, and the resize warning where CPU gives it."""
    sample, variant = item
    cpu_sample = _split(sample, "cpu")
    want_plain, err, _ = _raised(lambda: op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs))
    if err is not None:
        return "skip", "cpu error: " + format_error(err), []
    if not all(isinstance(w, torch.Tensor) for w in leaves(want_plain)) or \
            isinstance(want_plain, dict):
        return "skip", "the op returns something other than tensors", []
    cpu_sample = _split(sample, "cpu")
    tpu_sample = _split(sample, DEVICE, pinned, keep_layout=True)
    cpu_out, cpu_bases = _make_out(want_plain, variant, "cpu")
    tpu_out, tpu_bases = _make_out(want_plain, variant, DEVICE)
    ret, want_err, want_warn = _raised(
        lambda: op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs, out=cpu_out))
    want_same = want_err is None and _identity(ret, cpu_out)
    before = torchtpu.metrics.fallback_counts()
    ret, got_err, got_warn = _raised(_synced(
        lambda: op(tpu_sample.input, *tpu_sample.args, **tpu_sample.kwargs, out=tpu_out)))
    used = _fallback_delta(before)
    why = _same_error(got_err, want_err)
    if why is None and want_err is None:
        if _identity(ret, tpu_out) != want_same:
            why = "the returned tensors are not the out= tensors" if want_same else \
                "returns the out= tensors where CPU does not"
        else:
            resized = [any("resized" in w for w in ws) for ws in (got_warn, want_warn)]
            if resized[0] != resized[1]:
                why = "resize warning " + ("given" if resized[0] else "missing")
            else:
                why = compare(_cpu(tpu_bases), cpu_bases, dtype, kind == "nondeterministic")
                if why is not None and variant != "strided":
                    # outputs unique only up to sign (svd, eigh): compared
                    # after the sample's own processing, as the fwd check
                    # compares them
                    fn = sample.output_process_fn_grad
                    if compare(_cpu(fn(tpu_out)), fn(cpu_out), dtype,
                               kind == "nondeterministic") is None and \
                            compare(_cpu(fn(tpu_out)), fn(_cpu(tpu_out)), dtype, False) is None \
                            and fn(cpu_out) is not cpu_out:
                        why = None
    if why is None:
        return "pass", "", used
    why = f"{variant}: {why}"
    if kind in _UNVERIFIED:
        return "unverified", _UNVERIFIED[kind] + why, used
    return "mismatch", why, used


def run_inplace(op, sample, dtype, kind, pinned=frozenset()):
    """The op's in-place variant on CPU and tpu: the same error (a result
    that does not broadcast to self, a result dtype self cannot hold), or
    the same new value of self, returned as self."""
    fn = op.inplace_variant
    cpu_sample = _split(sample, "cpu")
    tpu_sample = _split(sample, DEVICE, pinned, keep_layout=True)
    ret, want_err, _ = _raised(lambda: fn(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs))
    want_self = want_err is None and ret is cpu_sample.input
    before = torchtpu.metrics.fallback_counts()
    ret, got_err, _ = _raised(_synced(lambda: fn(tpu_sample.input, *tpu_sample.args, **tpu_sample.kwargs)))
    used = _fallback_delta(before)
    why = _same_error(got_err, want_err)
    if why is None and want_err is None:
        if (ret is tpu_sample.input) != want_self:
            why = "does not return self" if want_self else "returns self where CPU does not"
        else:
            why = compare(_cpu(tpu_sample.input), cpu_sample.input, dtype,
                          kind == "nondeterministic")
    if why is None:
        return "pass", "", used
    if kind in _UNVERIFIED:
        return "unverified", _UNVERIFIED[kind] + why, used
    return "mismatch", why, used
