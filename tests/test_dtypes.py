"""uint16/uint32/uint64 and complex128 on the device, against CPU PyTorch.

Every case runs the same sample on CPU and on tpu: where CPU computes, the
device gives the same values and dtype; where CPU raises (most ops on the
"barebones" unsigned dtypes), the device raises the same exception type.
Also: the platform table (complex128 refused, with a TypeError naming the
dtype and platform, where TORCHTPU_DTYPE_PLATFORM=tpu), printing, save/load."""
import io
import warnings

import pytest
import torch

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
NEW = UNSIGNED + [torch.complex128]
OTHERS = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]


def sample(dtype, n=6, seed=0):
    """Values spanning the dtype (unsigned: 0, max, values past int's half range)."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.randn(n, generator=g, dtype=torch.float64),
                             torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    bits = torch.iinfo(dtype).bits
    raw = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.int64)
    if bits < 64:
        raw = raw % (2**bits)
    x = raw.to(dtype)  # int64 -> uint64 wraps: negatives become large values
    x[0] = 0
    x[1] = torch.tensor(-1).to(dtype)  # the dtype's max
    return x


def small(dtype, n=6, seed=1):
    """Small positive values (no zero), for ops whose large-value results CPU
    leaves undefined or that need a nonzero divisor."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 9, (n,), generator=g).to(dtype)


def to_cpu(r):
    if isinstance(r, torch.Tensor):
        return r.cpu()
    if isinstance(r, (tuple, list)):
        return type(r)(to_cpu(v) for v in r) if not hasattr(r, "_fields") else [to_cpu(v) for v in r]
    return r


def assert_same(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
        if want.dtype.is_floating_point or want.dtype.is_complex:
            torch.testing.assert_close(got, want, rtol=1e-6 if want.dtype in (torch.float32, torch.complex64)
                                       else 1e-12, atol=1e-12, equal_nan=True)
        else:
            assert torch.equal(got, want), (got, want)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want


def compare(fn, *cpu_args):
    """fn on CPU args and on their tpu copies: same result, or same exception."""
    dev_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    try:
        want = fn(*cpu_args)
    except Exception as e:  # CPU refuses: the device must refuse alike
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(type(e)):
                to_cpu(fn(*dev_args))
        return "raises"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = to_cpu(fn(*dev_args))
    assert_same(got, want)
    return "ok"


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "floor_divide": lambda a, b: a // b,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: a % b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b,
    "rshift": lambda a, b: a >> b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "where": lambda a, b: torch.where(torch.tensor([True, False] * 3, device=a.device), a, b),
    "cat": lambda a, b: torch.cat([a, b]),
    "stack": lambda a, b: torch.stack([a, b]),
    "mul_": lambda a, b: a.clone().mul_(b),
    "copy_": lambda a, b: a.clone().copy_(b),
}

UNARY = {
    "neg": lambda a: -a,
    "abs": torch.abs,
    "bitwise_not": lambda a: ~a,
    "sign": torch.sign,
    "mul_scalar": lambda a: a * 3,
    "eq_scalar": lambda a: a == 7,
    "lt_scalar": lambda a: a < 7,
    "add_scalar": lambda a: a + 3,
    "div_scalar": lambda a: a / 2,
    "and_scalar": lambda a: a & 5,
    "lshift_scalar": lambda a: a << 2,
    "rshift_scalar": lambda a: a >> 1,
    "sum": torch.sum,
    "sum_dim": lambda a: a.reshape(2, 3).sum(1),
    "prod": torch.prod,
    "nansum": torch.nansum,
    "cumsum": lambda a: a.cumsum(0),
    "max": torch.max,
    "min": torch.min,
    "amax": torch.amax,
    "argmax": torch.argmax,
    "argmin": torch.argmin,
    "max_dim": lambda a: tuple(a.reshape(2, 3).max(1)),
    "any": torch.any,
    "all": torch.all,
    "isnan": torch.isnan,
    "isfinite": torch.isfinite,
    "sqrt": torch.sqrt,
    "exp": torch.exp,
    "sin": torch.sin,
    "clamp": lambda a: a.clamp(2, 5),
    "masked_fill": lambda a: a.masked_fill(torch.tensor([True, False] * 3, device=a.device), 0),
    "index": lambda a: a[torch.tensor([4, 0, 2], device=a.device)],
    "index_select": lambda a: a.index_select(0, torch.tensor([1], device=a.device)),
    "gather": lambda a: a.gather(0, torch.tensor([3, 1], device=a.device)),
    "flip": lambda a: a.flip(0),
    "sort": lambda a: tuple(a.sort()),
    "topk": lambda a: tuple(a.topk(2)),
    "nonzero": torch.nonzero,
    "zero_": lambda a: a.clone().zero_(),
    "fill_": lambda a: a.clone().fill_(3),
    "clone_strided": lambda a: a.reshape(2, 3).t().contiguous(),
    "view_slice": lambda a: a[1::2],
    "mean": lambda a: a.mean(),
    "mm": lambda a: a.reshape(2, 3) @ a.reshape(3, 2),
    "triu": lambda a: a.reshape(2, 3).triu(),
}

COMPLEX_ONLY = {
    "real": lambda a: a.real.clone(),
    "imag": lambda a: a.imag.clone(),
    "conj": lambda a: a.conj().resolve_conj(),
    "conj_physical": torch.conj_physical,
    "angle": torch.angle,
    "abs": torch.abs,
    "view_as_real": lambda a: torch.view_as_real(a).clone(),
    "reciprocal": torch.reciprocal,
    "log": torch.log,
    "tanh": torch.tanh,
    "mul_complex_scalar": lambda a: a * (0.1 + 0.7j),
    "add_float_scalar": lambda a: a + 0.1,
    "matmul": lambda a: a.reshape(2, 3) @ a.reshape(3, 2),
    "bmm": lambda a: torch.bmm(a.reshape(1, 2, 3), a.reshape(1, 3, 2)),
    "dot": lambda a: torch.dot(a, a.flip(0)),
    "vdot": lambda a: torch.vdot(a, a.flip(0)),
    "mean": torch.mean,
    "sum_dim": lambda a: a.reshape(2, 3).sum(0),
    "prod": torch.prod,
    "pow2": lambda a: a * a,
    "sub": lambda a: a - a.flip(0),
    "div": lambda a: a / a.flip(0),
    "eq": lambda a: a == a.flip(0),
    "polar_roundtrip": lambda a: torch.polar(a.abs(), a.angle()),
    "with_complex64": lambda a: a * a.to(torch.complex64),
    "with_float64": lambda a: a * a.real,
}


@pytest.mark.parametrize("dtype", NEW, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_matches_cpu(dtype, op):
    a = sample(dtype)
    b = small(dtype) if op in ("lshift", "rshift") else sample(dtype, seed=3)
    if op in ("div", "floor_divide", "div_trunc", "remainder"):
        b = small(dtype)
    compare(BINARY[op], a, b)


@pytest.mark.parametrize("dtype", NEW, ids=str)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_matches_cpu(dtype, op):
    a = sample(dtype) if op not in ("prod", "mm") else small(dtype)
    compare(UNARY[op], a)


@pytest.mark.parametrize("op", sorted(COMPLEX_ONLY))
def test_complex128_matches_cpu(op):
    compare(COMPLEX_ONLY[op], sample(torch.complex128))


def test_complex128_keeps_double_precision():
    # Values float32 cannot hold: a complex64 path anywhere would lose them.
    x = torch.tensor([1 + 1e-12j, 1e-300 + 3j], dtype=torch.complex128)
    t = x.to("tpu")
    assert torch.equal(t.cpu(), x)
    assert torch.equal((t * (1 + 1e-13j)).cpu(), x * (1 + 1e-13j))
    assert torch.equal((t + 1e-15).cpu(), x + 1e-15)
    assert torch.equal(t.real.cpu(), x.real)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_unsigned_wraps_like_cpu(dtype):
    big = torch.tensor([-1, -2, 3]).to(dtype)  # max, max - 1, 3
    two = torch.tensor([2, 3, 5]).to(dtype)
    assert compare(lambda a, b: a * b, big, two) == "ok"
    assert compare(lambda a: a * 7, big) == "ok"
    assert compare(lambda a: a.sum(), big) == "ok"   # int64 result, as CPU
    assert compare(lambda a: a.prod(), big) == "ok"
    assert compare(lambda a: a.cumsum(0), big) == "ok"
    assert compare(lambda a, b: a / b, big, two) == "ok"  # true division: float


@pytest.mark.parametrize("dtype", NEW, ids=str)
@pytest.mark.parametrize("other", OTHERS + NEW, ids=str)
def test_casts_both_ways_match_cpu(dtype, other):
    # Values every dtype holds; complex -> real casts are PyTorch's own
    # warning path (real part kept) and are compared too.
    vals = torch.tensor([0, 1, 7, 100, 3, 2])
    compare(lambda a: a.to(dtype), vals.to(other))
    compare(lambda a: a.to(other), vals.to(dtype))
    if dtype.is_complex and other.is_complex:
        compare(lambda a: a.to(other), sample(dtype))
        compare(lambda a: a.to(dtype), sample(other))


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_negative_floats_to_unsigned_wrap_like_cpu(dtype):
    x = torch.tensor([-1.0, -3.7, 2.9, 1000.0], dtype=torch.float32)
    compare(lambda a: a.to(dtype), x)
    compare(lambda a: a.to(dtype), x.double())


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_factories_match_cpu(dtype):
    for fn in [lambda d: torch.zeros(2, 3, dtype=dtype, device=d),
               lambda d: torch.ones(4, dtype=dtype, device=d),
               lambda d: torch.full((3,), 7, dtype=dtype, device=d),
               lambda d: torch.empty(2, dtype=dtype, device=d).fill_(5),
               lambda d: torch.zeros_like(torch.empty(3, dtype=dtype, device=d)),
               lambda d: torch.tensor([1, 2], dtype=dtype, device=d)]:
        assert_same(fn("tpu").cpu(), fn("cpu"))
    # arange: CPU has no kernel for the unsigned dtypes; the device agrees.
    try:
        want = torch.arange(5, dtype=dtype)
    except Exception as e:
        with pytest.raises(type(e)):
            torch.arange(5, dtype=dtype, device="tpu").cpu()
    else:
        assert_same(torch.arange(5, dtype=dtype, device="tpu").cpu(), want)


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_roundtrip_bit_exact_and_strided(dtype):
    x = sample(dtype, n=12).reshape(3, 4)
    t = x.to("tpu")
    assert t.dtype == dtype
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t.t().cpu(), x.t())
    assert torch.equal(t[:, 1::2].cpu(), x[:, 1::2])
    y = torch.zeros(3, 4, dtype=dtype, device="tpu")
    y[1:, 2:] = x[1:, 2:]
    ref = torch.zeros(3, 4, dtype=dtype)
    ref[1:, 2:] = x[1:, 2:]
    assert torch.equal(y.cpu(), ref)
    out = torch.empty(4, 3, dtype=dtype).t()
    out.copy_(t)
    assert torch.equal(out, x)


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_item_tolist_and_print(dtype):
    x = sample(dtype)
    t = x.to("tpu")
    assert t[1].item() == x[1].item()
    assert t.tolist() == x.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = repr(t)
    assert " ".join(text.split()) == " ".join(repr(x).replace("dtype=", "device='tpu:0', dtype=").split())


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_save_load(dtype):
    x = sample(dtype).to("tpu")
    buf = io.BytesIO()
    torch.save({"x": x}, buf)
    buf.seek(0)
    y = torch.load(buf)["x"]
    assert y.device.type == "tpu" and y.dtype == dtype
    assert torch.equal(y.cpu(), x.cpu())
    buf.seek(0)
    z = torch.load(buf, map_location="cpu")["x"]
    assert torch.equal(z, x.cpu())


def test_platform_without_complex128_raises_type_error(py):
    code = (
        "import torch, torchtpu\n"
        "try:\n"
        "    torch.empty(2, dtype=torch.complex128, device='tpu')\n"
        "except TypeError as e:\n"
        "    print('TYPEERROR', e)\n"
        "try:\n"
        "    torch.ones(2, dtype=torch.complex128).to('tpu')\n"
        "except TypeError as e:\n"
        "    print('TYPEERROR2')\n"
        "print('U32', torch.ones(2, dtype=torch.uint32, device='tpu').cpu().tolist())\n"
        "print('F64', torch.ones(2, dtype=torch.float64, device='tpu').cpu().tolist())\n")
    r = py(code, {"TORCHTPU_DTYPE_PLATFORM": "tpu"})
    assert r.returncode == 0, r.stderr
    assert "TYPEERROR" in r.stdout and "complex128" in r.stdout and "'tpu'" in r.stdout
    assert "TYPEERROR2" in r.stdout
    assert "U32 [1, 1]" in r.stdout and "F64 [1.0, 1.0]" in r.stdout
    # Without the override the CPU plugin's platform holds complex128.
    r = py(code)
    assert r.returncode == 0, r.stderr
    assert "TYPEERROR" not in r.stdout


def test_dtypes_still_refused_name_the_dtype():
    for dtype in [torch.float8_e4m3fn, torch.complex32]:
        with pytest.raises(TypeError, match="not supported on the tpu device"):
            torch.empty(3, dtype=dtype, device="tpu")


def test_compile_complex128_and_uint32_match_cpu():
    def f(x, y):
        return (x * (0.5 + 1e-13j)) @ y

    def h(a, b):
        return a * b

    x = sample(torch.complex128, n=9).reshape(3, 3)
    y = sample(torch.complex128, n=9, seed=4).reshape(3, 3)
    got = torch.compile(f, backend="tpu")(x.to("tpu"), y.to("tpu")).cpu()
    torch.testing.assert_close(got, f(x, y), rtol=1e-13, atol=1e-14)
    u = sample(torch.uint32)
    assert torch.equal(torch.compile(h, backend="tpu")(u.to("tpu"), u.to("tpu")).cpu(), h(u, u))
