"""Host <-> tpu transfers: every dtype bit-exact, contiguous and strided,
copy_ both ways, views written through, scalars, printing."""
import pytest
import torch

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.complex64, torch.uint16, torch.uint32, torch.uint64,
          torch.complex128]


def make(dtype, shape, seed=0):
    """Random values covering each dtype's range, with NaN/inf/-0 for floats."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        parts = torch.randn(n, 2, generator=g)
        return torch.view_as_complex(parts).reshape(shape).to(dtype)
    if dtype.is_floating_point:
        x = (torch.randn(n, generator=g) * 1e3).to(dtype)
        specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0],
                                dtype=dtype)
        k = min(n, 4)
        x[:k] = specials[:k]
        return x.reshape(shape)
    info = torch.iinfo(dtype)
    raw = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.int64)
    x = raw.to(dtype)  # wraps: covers the whole range
    x[0] = info.min
    if n > 1:
        x[1] = torch.tensor(info.max if info.max < 2**63 else -1).to(dtype)  # uint64: wraps to max
    return x.reshape(shape)


def bits(t):
    """Bit pattern of a CPU tensor for exact comparison (NaN-safe)."""
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(
        {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bit_equal(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(bits(a), bits(b))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_contiguous_bit_exact(dtype):
    x = make(dtype, (7, 5))
    t = x.to("tpu")
    assert t.device.type == "tpu" and t.dtype == dtype and t.shape == x.shape
    assert_bit_equal(t.cpu(), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("view", ["transpose", "step_slice", "offset_slice",
                                  "expand", "permute3d", "column"])
def test_roundtrip_noncontiguous_bit_exact(dtype, view):
    base = make(dtype, (6, 8, 4), seed=1)
    x = {
        "transpose": lambda: base[0].t(),
        "step_slice": lambda: base[:, ::3, 1::2],
        "offset_slice": lambda: base[2:5, 3:7],
        "expand": lambda: base[0, :1, :].expand(5, 4),
        "permute3d": lambda: base.permute(2, 0, 1),
        "column": lambda: base[:, 2, 3],
    }[view]()
    assert not x.is_contiguous()
    t = x.to("tpu")
    assert_bit_equal(t.cpu(), x.contiguous())
    # And back into a non-contiguous CPU destination.
    out = torch.empty_like(base).permute(2, 1, 0)[: x.shape[0]] if x.dim() == 2 else None
    if out is not None and out.shape == x.shape:
        out.copy_(t)
        assert_bit_equal(out, x.contiguous())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scalar_and_empty(dtype):
    x = make(dtype, (1,)).reshape(())
    t = x.to("tpu")
    assert t.dim() == 0
    assert_bit_equal(t.cpu(), x)
    e = torch.empty(0, 3, dtype=dtype, device="tpu")
    assert e.cpu().shape == (0, 3)


def test_factories():
    assert torch.zeros(2, 3, device="tpu").cpu().tolist() == [[0.0] * 3] * 2
    assert torch.ones(4, dtype=torch.int32, device="tpu").cpu().tolist() == [1] * 4
    assert torch.full((2,), 7.5, device="tpu").cpu().tolist() == [7.5, 7.5]
    e = torch.empty(3, 4, device="tpu")
    assert e.shape == (3, 4) and e.device.type == "tpu"
    assert torch.empty_strided((2, 3), (1, 2), device="tpu").stride() == (1, 2)


def test_copy_both_ways_with_dtype_conversion_and_broadcast():
    t = torch.zeros(3, 4, device="tpu")
    t.copy_(torch.arange(4, dtype=torch.int64))  # broadcast + int -> float
    assert t.cpu().tolist() == [[0.0, 1.0, 2.0, 3.0]] * 3
    out = torch.empty(3, 4, dtype=torch.float64)
    out.copy_(t)
    assert out.tolist() == [[0.0, 1.0, 2.0, 3.0]] * 3
    h = t.to(torch.float16)
    assert h.device.type == "tpu" and h.dtype == torch.float16


def test_write_through_views_is_seen_by_base():
    base = torch.zeros(4, 5, device="tpu")
    base[1:3, 2:4] = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    col = base[:, 0]
    col.copy_(torch.tensor([9.0, 8.0, 7.0, 6.0]))
    ref = torch.zeros(4, 5)
    ref[1:3, 2:4] = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    ref[:, 0] = torch.tensor([9.0, 8.0, 7.0, 6.0])
    assert torch.equal(base.cpu(), ref)
    assert torch.equal(col.cpu(), ref[:, 0])
    tt = base.t()
    assert torch.equal(tt.cpu(), ref.t())


def test_tpu_to_tpu_copy_and_clone():
    a = torch.arange(12.0).reshape(3, 4).to("tpu")
    b = torch.empty(4, 3, device="tpu")
    b.copy_(a.t())
    assert torch.equal(b.cpu(), torch.arange(12.0).reshape(3, 4).t())


def test_item_and_tolist():
    t = torch.tensor([2.5, -1.0], device="tpu")
    assert t[0].item() == 2.5
    assert t.tolist() == [2.5, -1.0]
    assert torch.tensor(7, dtype=torch.int64, device="tpu").item() == 7
    assert torch.tensor(True, device="tpu").item() is True


def test_print_shows_values_and_device():
    t = torch.tensor([[1.5, 2.0], [3.0, float("nan")]], device="tpu")
    text = repr(t)
    assert "device='tpu:0'" in text
    assert "1.5000" in text and "nan" in text


def test_resize_and_set():
    t = torch.tensor([1.0, 2.0, 3.0], device="tpu")
    t.resize_(5)
    assert t.shape == (5,)
    assert t[:3].cpu().tolist() == [1.0, 2.0, 3.0]
    u = torch.empty(0, device="tpu")
    u.set_(t.untyped_storage(), 1, (2,), (1,))
    assert u.cpu().tolist() == [2.0, 3.0]
    t[1] = 20.0  # shared storage: u sees it
    assert u.cpu().tolist() == [20.0, 3.0]


@pytest.mark.parametrize("dtype", [torch.complex32, torch.float8_e4m3fn])
def test_unsupported_dtype_raises_clearly_and_process_continues(dtype):
    with pytest.raises(TypeError, match="not supported on the tpu device"):
        torch.empty(3, dtype=dtype, device="tpu")
    with pytest.raises(TypeError, match="not supported on the tpu device"):
        torch.zeros(3, dtype=dtype).to("tpu")
    assert torch.ones(2, device="tpu").cpu().tolist() == [1.0, 1.0]


def _bytes_to_host(fn):
    import torchtpu.metrics
    torch.tpu.synchronize()
    before = torchtpu.metrics.metrics().get("bytes_to_host", 0)
    out = fn()
    return out, torchtpu.metrics.metrics().get("bytes_to_host", 0) - before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.bool, torch.int64])
def test_element_and_slice_reads_move_only_their_bytes(dtype):
    """x[5].item() and x[:3].cpu() of a large tensor transfer the element or the
    slice, not the storage; the values are CPU's (bit-exact)."""
    cpu = make(dtype, (1 << 18,), seed=3)
    x = cpu.to("tpu")
    item = cpu.element_size()
    got, moved = _bytes_to_host(lambda: x[5].item())
    assert moved == item
    assert got == cpu[5].item() or (got != got and cpu[5].item() != cpu[5].item())
    got, moved = _bytes_to_host(lambda: x[7:10].cpu())
    assert moved == 3 * item
    assert torch.equal(bits(got), bits(cpu[7:10]))
    # A column of a matrix spans its rows: the rows from the first to the last.
    m, mc = x.view(512, -1), cpu.view(512, -1)
    got, moved = _bytes_to_host(lambda: m[3:5, 2].cpu())
    assert moved == (mc.stride(0) + 1) * item
    assert torch.equal(bits(got), bits(mc[3:5, 2]))
    # The result of an op, read through a view, and an expanded scalar.
    got, moved = _bytes_to_host(lambda: (x[:10].clone())[4].item())
    assert moved == item
    e = x[9].expand(6, 6)
    got, moved = _bytes_to_host(lambda: e.cpu())
    assert moved == item
    assert torch.equal(bits(got), bits(cpu[9].expand(6, 6)))
