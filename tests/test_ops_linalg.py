"""Linalg family on tpu vs CPU: bmm/addmm/baddbmm/addbmm/dot/vdot/mv/addmv,
and the composites that decompose into them (matmul, linear, einsum,
tensordot, outer), with gradients and no CPU fallback."""
import pytest
import torch
import torch.nn.functional as F

from op_testing import check, check_host_kernel_switch, make

FLOATS = [torch.float32, torch.bfloat16]
LAYOUTS = [False, True]  # noncontiguous


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("nc", LAYOUTS)
def test_bmm(dtype, nc):
    a = make((3, 4, 5), dtype, noncontiguous=nc)
    b = make((3, 5, 6), dtype, seed=1, noncontiguous=nc)
    check(torch.bmm, a, b, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("nc", LAYOUTS)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, -1.5)])
def test_addmm(dtype, nc, beta, alpha):
    bias = make((6,), dtype)
    a = make((4, 5), dtype, seed=1, noncontiguous=nc)
    b = make((5, 6), dtype, seed=2, noncontiguous=nc)
    check(lambda s, p, q: torch.addmm(s, p, q, beta=beta, alpha=alpha), bias, a, b, grad=True)
    check(lambda s, p, q: torch.addmm(s, p, q, beta=beta, alpha=alpha),
          make((4, 6), dtype, seed=3), a, b, grad=True)


def test_addmm_beta_zero_ignores_nan():
    bias = torch.full((4, 6), float("nan"))
    check(lambda s, p, q: torch.addmm(s, p, q, beta=0), bias, make((4, 5)), make((5, 6), seed=1))


@pytest.mark.parametrize("dtype", FLOATS)
def test_baddbmm_addbmm(dtype):
    a = make((3, 4, 5), dtype, seed=1, noncontiguous=True)
    b = make((3, 5, 2), dtype, seed=2)
    check(lambda s, p, q: torch.baddbmm(s, p, q, beta=0.5, alpha=2), make((3, 4, 2), dtype), a, b,
          grad=True)
    check(lambda s, p, q: torch.baddbmm(s, p, q), make((4, 2), dtype), a, b, grad=True)
    check(lambda s, p, q: torch.addbmm(s, p, q, beta=2, alpha=0.5), make((4, 2), dtype), a, b,
          grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dot_vdot_mv_addmv(dtype):
    x, y = make((7,), dtype), make((7,), dtype, seed=1)
    m = make((5, 7), dtype, seed=2, noncontiguous=True)
    check(torch.dot, x, y, grad=True)
    check(torch.vdot, x, y, grad=True)
    check(torch.mv, m, x, grad=True)
    check(lambda s, p, q: torch.addmv(s, p, q, beta=0.5, alpha=-1), make((5,), dtype), m, x,
          grad=True)
    check(lambda s, p, q: torch.addmv(s, p, q), make((1,), dtype), m, x, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_addr(dtype):
    u, w = make((3,), dtype), make((4,), dtype, seed=1)
    check(lambda s, p, q: torch.addr(s, p, q, beta=0.5, alpha=2), make((3, 4), dtype, seed=2), u, w,
          grad=True)
    check(torch.addr, make((4,), dtype, seed=3), u, w, grad=True)


def test_integer_products():
    a, b = make((3, 4), torch.int64), make((4, 2), torch.int64, seed=1)
    check(lambda s, p, q: torch.addmm(s, p, q, beta=2, alpha=3), make((2,), torch.int64), a, b)
    check(torch.bmm, make((2, 3, 4), torch.int32), make((2, 4, 5), torch.int32, seed=1))
    check(torch.dot, make((6,), torch.int64), make((6,), torch.int64, seed=1))
    check(torch.mv, a, make((4,), torch.int64, seed=2))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_decompositions(dtype):
    check(torch.matmul, make((2, 3, 4), dtype), make((4, 5), dtype, seed=1), grad=True)
    check(torch.matmul, make((2, 3, 4), dtype), make((2, 4, 5), dtype, seed=1), grad=True)
    check(torch.matmul, make((4,), dtype), make((4, 5), dtype, seed=1), grad=True)
    check(torch.matmul, make((3, 4), dtype), make((4,), dtype, seed=1), grad=True)
    check(torch.matmul, make((2, 1, 3, 4), dtype), make((5, 4, 2), dtype, seed=1), grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear(dtype):
    x = make((2, 3, 4), dtype)
    w, b = make((5, 4), dtype, seed=1), make((5,), dtype, seed=2)
    check(F.linear, x, w, b, grad=True)
    check(F.linear, make((3, 4), dtype), w, b, grad=True)
    check(F.linear, x, w, grad=True)


def test_einsum_tensordot_outer():
    a, b = make((2, 3, 4)), make((2, 4, 5), seed=1)
    check(lambda p, q: torch.einsum("bij,bjk->bik", p, q), a, b, grad=True)
    check(lambda p, q: torch.einsum("bij,bjk->ik", p, q), a, b, grad=True)
    check(lambda p, q: torch.tensordot(p, q, dims=([0, 2], [0, 1])), a, b, grad=True)
    check(torch.outer, make((3,)), make((4,), seed=1), grad=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_products_accumulate_in_float32(dtype):
    a = make((2, 3, 4096), dtype, low=0, high=1)
    b = make((2, 4096, 2), dtype, seed=1, low=0, high=1)
    check(torch.bmm, a, b)
    check(torch.dot, a[0, 0], b[0, :, 0])
    check(lambda s, p, q: torch.addmm(s, p, q, beta=0.5), make((2,), dtype), a[0], b[0])


def test_zero_size_products():
    check(torch.mm, make((3, 0)), make((0, 4)))
    check(lambda s, p, q: torch.addmm(s, p, q, beta=2), make((3, 4)), make((3, 0)), make((0, 4)))
    check(torch.bmm, make((0, 2, 3)), make((0, 3, 4)))
    check(torch.dot, make((0,)), make((0,)))


def test_out_and_inplace_variants():
    s, a, b = make((3, 4)), make((3, 5), seed=1), make((5, 4), seed=2)
    check(lambda s, p, q: s.clone().addmm_(p, q, beta=0.5, alpha=2), s, a, b)
    check(lambda s, p, q: torch.addmm(s, p, q, out=torch.empty(3, 4, device=s.device)), s, a, b)
    check(lambda p, q: torch.bmm(p, q, out=torch.empty(2, 3, 4, device=p.device)),
          make((2, 3, 5)), make((2, 5, 4), seed=1))
    check(lambda s, p, q: s.clone().baddbmm_(p, q, alpha=0.5), make((2, 3, 4)),
          make((2, 3, 5), seed=1), make((2, 5, 4), seed=2))


def test_mv_addr_run_as_lowered_ops():
    # mv and addr are CompositeExplicitAutograd: the engine may run them as
    # one lowered op or through PyTorch's composite; either way on device.
    check(torch.mv, make((3, 4), torch.int64), make((4,), torch.int64, seed=1))
    check(torch.addr, make((3, 4), torch.int64), make((3,), torch.int64, seed=1),
          make((4,), torch.int64, seed=2))


def test_more_shapes_and_beta_zero():
    check(lambda s, p, q: torch.addmm(s, p, q), torch.tensor(2.0), make((3, 4)), make((4, 5)))
    check(lambda s, p, q: torch.baddbmm(s, p, q, beta=0), torch.full((2, 3, 5), float("nan")),
          make((2, 3, 4)), make((2, 4, 5), seed=1))
    check(torch.vdot, make((5,), torch.int64), make((5,), torch.int64, seed=2))
    check(torch.matmul, make((7,)), make((7,), seed=1), grad=True)
    check(lambda p, q: torch.einsum("i,i->", p, q), make((7,)), make((7,), seed=1), grad=True)
    check(torch.inner, make((3, 7)), make((2, 7), seed=1), grad=True)


# --- Found by the random-program fuzzer (tests/fuzz_programs.py); xfail
# until fixed, then the tag leaves KNOWN_MISMATCH_TAGS there.

def test_fuzz_matmul_of_two_dtypes_raises_like_cpu():
    x, y = torch.ones(2, 3), torch.ones(3, dtype=torch.int64)
    with pytest.raises(RuntimeError):
        torch.matmul(x, y)
    with pytest.raises(RuntimeError):
        torch.matmul(x.to("tpu"), y.to("tpu")).cpu()


def test_fuzz_matmul_keeps_negative_zero():
    # fuzz binary.atan2: a bmm of one -0.0 product per element is +0.0 on
    # CPU (a zeroed accumulator); atan2 turns the sign into pi or -pi
    a = torch.tensor([[[2.0], [-1.0], [-1.75], [2.0]], [[-0.25], [1.75], [0.25], [0.0]]])
    want = torch.atan2(a @ a.mT, a)
    t = a.to("tpu")
    got = torch.atan2(t @ t.mT, t).cpu()
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1, 2, 5, 19, 20, 30])
def test_single_product_sums_have_cpus_signed_zeros(n, dtype):
    # Contraction size 1, every product -0.0: CPU gives +0.0 where its
    # kernel sums into a zeroed accumulator (dot, mv, small or batched
    # bmm, one row or column, every half-type product) and -0.0 where it
    # calls float32 gemm (mm, a single bmm of >= 400 outputs); the sign
    # shows in signbit/copysign/atan2 (fuzz seed 1230705: bfloat16 mm).
    a, b = torch.zeros(n, 1, dtype=dtype), -torch.ones(1, n, dtype=dtype)
    cases = {
        "mm": lambda a, b: a @ b,
        "bmm": lambda a, b: torch.bmm(a[None], b[None]),
        "bmm_batched": lambda a, b: torch.bmm(a[None].expand(4, n, 1).contiguous(),
                                              b[None].expand(4, 1, n).contiguous()),
        "mv": lambda a, b: b.t() @ a[:1, 0],
        "dot": lambda a, b: torch.dot(a[0], b[:, 0]),
        "linear": lambda a, b: torch.nn.functional.linear(a, b.t()),
        "einsum": lambda a, b: torch.einsum("ik,kj->ij", a, b),
        "matmul_3d": lambda a, b: a[None] @ b,
        "matmul_batched": lambda a, b: a[None].expand(3, n, 1) @ b[None].expand(3, 1, n),
        "outer": lambda a, b: torch.outer(a[:, 0], b[0]),
    }
    for name, f in cases.items():
        want = torch.signbit(f(a, b))
        got = torch.signbit(f(a.to("tpu"), b.to("tpu"))).cpu()
        assert torch.equal(got, want), name
        if n in (5, 20) and dtype != torch.float16:  # the same lowerings under torch.compile
            got = torch.signbit(torch.compile(f, backend="tpu")(a.to("tpu"), b.to("tpu"))).cpu()
            assert torch.equal(got, want), f"compiled {name}"


# ---- solvers XLA has as HLO ------------------------------------------------

def _triangular(n, batch=(), upper=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, n, n, generator=g)
    # A well-conditioned triangle (a dominant diagonal) with junk in the
    # other triangle, which the solvers must not read.
    a = a + torch.diag_embed(torch.full((*batch, n), 4.0))
    return a


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("shapes", [((4,), (4, 3)), ((2, 4), (1, 4, 2)), ((0,), (0, 3)), ((3,), (3, 0))])
def test_linalg_solve_triangular(upper, left, unit, shapes):
    """linalg.solve_triangular ran on the CPU fallback (1088 sweep samples);
    now stablehlo.triangular_solve, with batch broadcasting and gradients."""
    a_shape, b_shape = shapes
    n = a_shape[-1]
    a = _triangular(n, a_shape[:-1])
    b = torch.randn(*b_shape) if left else torch.randn(*b_shape).transpose(-2, -1)
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit),
          a, b, grad=n > 0)


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(transpose):
    a, b = _triangular(4, (2,), seed=1), torch.randn(2, 4, 3)
    check(lambda b, a: torch.triangular_solve(b, a, upper=False, transpose=transpose).solution, b, a,
          grad=True)
    check(lambda b, a: torch.triangular_solve(b, a, upper=False, transpose=transpose).cloned_coefficient,
          b, a)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_and_its_info(upper):
    """linalg.cholesky / cholesky_ex on the device: the factor with its other
    triangle zero, and LAPACK's info (XLA fills a failed factorization with
    NaN, so the pivots are recomputed): 0, or the order of the first
    leading minor that is not positive-definite; linalg.cholesky raises
    CPU's error for it."""
    from op_testing import no_fallback, same_as_cpu

    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 5, generator=g)
    spd = x @ x.mT + 5 * torch.eye(5)
    check(lambda a: torch.linalg.cholesky(a, upper=upper), spd, grad=True)
    bad = spd.clone()
    bad[1, 2, 2] = -50.0  # third leading minor of the second matrix
    bad[2, 0, 0] = float("nan")

    def ex(d):
        return torch.linalg.cholesky_ex(bad.to(d), upper=upper).info
    with no_fallback():
        same_as_cpu(ex)
    assert same_as_cpu(ex).tolist() == [0, 3, 1]
    err = same_as_cpu(lambda d: torch.linalg.cholesky(bad.to(d)))
    assert "leading minor of order 3" in str(err)


# ---- LU (csrc/core/lower/factor.c, csrc/torch/linalg_ops.cpp) -------------

_LU_SHAPES = [(4, 4), (2, 5, 5), (5, 3), (3, 6), (2, 0, 3, 3)]


@pytest.mark.parametrize("shape", _LU_SHAPES)
def test_lu_factor_and_unpack(shape):
    """LU with partial pivoting ran on the CPU fallback (lu_factor, lu,
    lu_unpack, lu_solve, det, solve, inv: about 1,500 sweep samples); now a
    while loop over the columns on the device, pivoting as LAPACK does (the
    first row of largest magnitude), so LU and pivots are CPU's own."""
    a = make(shape, seed=3)
    check(lambda a: torch.linalg.lu_factor_ex(a), a)
    check(lambda a: torch.linalg.lu(a), a)
    check(lambda a: torch.cat([x.flatten() for x in torch.linalg.lu(a)[1:]]), a, grad=a.numel() > 0)
    lu, piv = torch.linalg.lu_factor(a)
    check(lambda lu, piv: torch.lu_unpack(lu, piv), lu, piv)
    check(lambda lu, piv: torch.lu_unpack(lu, piv, unpack_data=False), lu, piv)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(left, adjoint):
    a = make((2, 4, 4), seed=4)
    lu, piv = torch.linalg.lu_factor(a)
    b = make((2, 4, 3) if left else (2, 3, 4), seed=5)
    check(lambda lu, piv, b: torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint),
          lu, piv, b, grad=True)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_det_slogdet_solve_inv(layout):
    """CPU factorizes A^T for det / slogdet when A is contiguous (A
    otherwise) and returns that LU, which their backward formulas read: the
    device does the same, so values, LU outputs and gradients all match."""
    a = make((3, 4, 4), seed=6, noncontiguous=layout == "transposed")
    a[1, :, 2] = 0  # a singular matrix: det 0, slogdet (0, -inf)
    check(lambda a: torch.ops.aten._linalg_det(a), a)
    check(lambda a: torch.ops.aten._linalg_slogdet(a), a)
    good = make((3, 4, 4), seed=7, noncontiguous=layout == "transposed")
    check(lambda a: torch.linalg.det(a), good, grad=True)
    check(lambda a: torch.linalg.slogdet(a).logabsdet, good, grad=True)
    check(lambda a: torch.linalg.inv(a), good, grad=True)
    check(lambda a, b: torch.linalg.solve(a, b), good, make((3, 4, 2), seed=8), grad=True)
    check(lambda a, b: torch.linalg.solve(a, b, left=False), good, make((3, 2, 4), seed=8), grad=True)
    check(lambda a, b: torch.linalg.solve(a, b), good, make((3, 4), seed=9), grad=True)


def test_singular_inverse_raises_like_cpu():
    from op_testing import same_as_cpu
    a = torch.ones(3, 3)
    assert "singular" in str(same_as_cpu(lambda d: torch.linalg.inv(a.to(d))))
    same_as_cpu(lambda d: torch.linalg.inv_ex(a.to(d)).info)
    same_as_cpu(lambda d: torch.linalg.det(torch.ones(3, 4, device=d)))


# ---- FFT (stablehlo.fft) ---------------------------------------------------

_FFTS = {
    "fft": lambda x: torch.fft.fft(x.to(torch.complex64)),
    "ifft_ortho": lambda x: torch.fft.ifft(x.to(torch.complex64), norm="ortho"),
    "rfft": lambda x: torch.fft.rfft(x),
    "rfft_forward_dim0": lambda x: torch.fft.rfft(x, dim=0, norm="forward"),
    "irfft": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=x.shape[-1]),
    "irfft_odd_padded": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=11),
    "fft2": lambda x: torch.fft.fft2(x.to(torch.complex64)),
    "rfftn_two_sided_via_fftn": lambda x: torch.fft.fftn(x, dim=(0, 2)),
    "irfftn": lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=x.shape),
    "hfft": lambda x: torch.fft.hfft(x.to(torch.complex64)),
    "ihfft_backward_norm": lambda x: torch.fft.ihfft(x, norm="backward"),
}


@pytest.mark.parametrize("case", sorted(_FFTS))
def test_fft_on_the_device(case):
    """torch.fft ran on the CPU fallback (_fft_r2c/_c2c/_c2r, 785 sweep
    samples); now stablehlo.fft with PyTorch's normalizations, gradients
    included."""
    x = make((3, 4, 8))
    check(lambda x: torch.view_as_real(_FFTS[case](x).resolve_conj()) if _FFTS[case](x.detach()).is_complex()
          else _FFTS[case](x), x, grad=True)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_inverse_and_old_api(upper):
    """cholesky (the old API), cholesky_solve and cholesky_inverse ran on the
    CPU fallback (about 100 sweep samples): now linalg_cholesky_ex with
    CPU's error, two triangular solves, and potri's triangle mirrored (an
    exactly symmetric inverse, as CPU's)."""
    import warnings
    from op_testing import same_as_cpu
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 4, generator=g)
    a = x @ x.mT + 4 * torch.eye(4)
    l = torch.linalg.cholesky(a, upper=upper)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.cholesky's deprecation, on both
        check(lambda a: torch.cholesky(a, upper=upper), a, grad=True)
    check(lambda b, l: torch.cholesky_solve(b, l, upper=upper), make((3, 4, 2), seed=1), l, grad=True)
    check(lambda b, l: torch.cholesky_solve(b, l, upper=upper), make((4, 2), seed=1), l)
    check(lambda l: torch.cholesky_inverse(l, upper=upper), l, grad=True)
    inv = torch.cholesky_inverse(l.to("tpu"), upper=upper).cpu()
    assert torch.equal(inv, inv.mT)
    bad = a.clone()
    bad[1, 2, 2] = -50.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert "Batch element 1" in str(same_as_cpu(lambda d: torch.cholesky(bad.to(d))))


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5), (4, 4)])
def test_lstsq_drivers(driver, shape):
    """linalg.lstsq ran on the CPU fallback (about 150 sweep samples): now
    the minimum-norm solution from the device SVD, with each driver's
    outputs as CPU gives them (rank but for gels, singular values for
    gelsd / gelss, residuals for a tall A but with gelsy)."""
    from op_testing import no_fallback
    a = make(shape, seed=2)
    b = make(shape[:-1] + (2,), seed=3)
    with no_fallback():
        got = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"), driver=driver)
    want = torch.linalg.lstsq(a, b, driver=driver)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, atol=1e-4, rtol=1e-4)
    check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver).solution, a, b, grad=True)


def test_lstsq_rank_deficient_drops_residuals_like_cpu():
    from op_testing import same_as_cpu
    a = make((5, 2), seed=4) @ make((2, 3), seed=5)
    b = make((5, 2), seed=6)
    for driver in ("gelsd", "gelsy"):
        r = same_as_cpu(lambda d: torch.linalg.lstsq(a.to(d), b.to(d), driver=driver).residuals)
        assert r.numel() == 0
        same_as_cpu(lambda d: torch.linalg.lstsq(a.to(d), b.to(d), driver=driver).rank)


def test_silent_out_resizes_like_cpu():
    """addbmm, log_sigmoid, multinomial and bernoulli resize a wrong-sized
    out= silently on the CPU (resize_); their meta kernels warned."""
    from op_testing import same_as_cpu
    b1, b2, m = make((2, 4, 5), seed=1), make((2, 5, 4), seed=2), make((4, 4), seed=3)
    same_as_cpu(lambda d: torch.addbmm(m.to(d), b1.to(d), b2.to(d), out=torch.full((20,), 7.0, device=d)),
                exact=False, warns=True)
    same_as_cpu(lambda d: torch._C._nn.log_sigmoid(m.to(d), out=torch.full((20,), 7.0, device=d)),
                exact=False, warns=True)
    same_as_cpu(lambda d: torch.bernoulli(torch.ones(3, 4, device=d), out=torch.full((20,), 7.0, device=d)),
                warns=True)


# --- products through the host gemm (CPU plugin: csrc/core/hostgemm.h) ------
# Shapes above its size threshold, so these run as the custom call; the
# small cases above stay XLA's dots.

def _host_gemm_programs():
    import torchtpu
    return torchtpu.metrics.metrics().get("host_gemm_programs", 0)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_host_gemm_every_transpose_form(ta, tb, dtype):
    a = make((40, 33), dtype) if not ta else make((33, 40), dtype).t()
    b = make((33, 50), dtype, seed=1) if not tb else make((50, 33), dtype, seed=1).t()
    before = _host_gemm_programs()
    check(torch.mm, a, b, grad=True)
    check(lambda s, p, q: torch.addmm(s, p, q, beta=0.5, alpha=2.0), make((50,), dtype, seed=2),
          a, b, grad=True)
    import torchtpu
    if torchtpu.get_eager_mode() != "defer_and_fuse":  # deferred: one fused program
        assert _host_gemm_programs() > before


@pytest.mark.parametrize("nc", LAYOUTS)
def test_host_gemm_batched_and_broadcast(nc):
    a = make((6, 40, 30), noncontiguous=nc)
    b = make((6, 30, 50), seed=1, noncontiguous=nc)
    check(torch.bmm, a, b, grad=True)
    check(torch.matmul, a, make((30, 50), seed=2), grad=True)
    check(lambda x, y: torch.baddbmm(make((6, 40, 50), seed=3).to(x.device), x, y, beta=0.25),
          a, b, grad=True)
    check(torch.matmul, make((2, 3, 40, 30), seed=4), make((3, 30, 50), seed=5), grad=True)


def test_host_gemm_linear_and_attention_shapes():
    check(F.linear, make((8, 33, 70)), make((90, 70), seed=1), make((90,), seed=2), grad=True)
    q, k, v = (make((2, 4, 64, 16), seed=s) for s in range(3))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
          grad=True)


@pytest.mark.parametrize("nc", LAYOUTS)
def test_host_gemm_big_batches_in_runs(nc):
    # Batches big as a whole (>= 2^21 multiply-adds) run as runs of whole
    # products on XLA's pool: attention's shapes, an odd count, a
    # broadcast batch, and a NaN reaching only its own product.
    q, k = make((64, 64, 16), noncontiguous=nc), make((64, 16, 64), seed=1, noncontiguous=nc)
    check(torch.bmm, q, k, grad=True)
    a, b = make((37, 40, 31), torch.float64, seed=2), make((37, 31, 52), torch.float64, seed=3)
    a[20, 3, 4] = float("nan")
    check(torch.bmm, a, b)
    check(torch.matmul, make((3, 5, 64, 48), seed=4), make((5, 48, 64), seed=5), grad=True)
    q, k, v = (make((16, 4, 64, 16), seed=s) for s in range(6, 9))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v,
          grad=True)


def test_host_gemm_non_finite_and_empty():
    a = make((40, 33))
    a[3, 4], a[5, 6] = float("nan"), float("inf")
    b = make((33, 50), seed=1)
    b[7, 1] = float("-inf")
    check(torch.mm, a, b)
    check(torch.mm, make((64, 0)), make((0, 80), seed=1))
    check(torch.mm, make((0, 64)), make((64, 80), seed=1))


def test_host_gemm_off_computes_the_same():
    """TORCHTPU_HOST_GEMM=0 leaves dots to XLA: no custom call, and the same
    products (to rounding) as with it."""
    check_host_kernel_switch(
        "import torch, torchtpu\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a = torch.randn(64, 48, generator=g); b = torch.randn(48, 80, generator=g)\n"
        "r = (a.to('tpu') @ b.to('tpu')).cpu()\n"
        "torch.testing.assert_close(r, a @ b, rtol=1e-5, atol=1e-5)\n",
        "TORCHTPU_HOST_GEMM", "host_gemm_programs")

