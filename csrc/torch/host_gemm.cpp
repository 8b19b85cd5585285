// The host gemm of the CPU plugin's dots (core/hostgemm.h): the BLAS that
// PyTorch CPU's own matmuls call (MKL in the x86 wheels), found in
// libtorch_cpu by its standard Fortran name. On one thread it computes the
// training step's skinny products about twice as fast as XLA:CPU's own
// dots do on two. Without the symbols the dots simply stay XLA's.
#include <dlfcn.h>

extern "C" {
#include "core/hostgemm.h"
}

namespace torchtpu {
namespace {

// Fortran BLAS: column-major, every argument by pointer, 32-bit ints (the
// LP64 interface PyTorch itself uses).
using sgemm_t = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const float*, const float*, const int*, const float*, const int*,
                         const float*, float*, const int*);
using dgemm_t = void (*)(const char*, const char*, const int*, const int*, const int*,
                         const double*, const double*, const int*, const double*, const int*,
                         const double*, double*, const int*);
sgemm_t g_sgemm = nullptr;
// MKL's per-thread thread count (its C interface; returns the previous
// setting, 0 = the global one).
using threads_t = int (*)(int);
threads_t g_local_threads = nullptr;
dgemm_t g_dgemm = nullptr;

// Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: the
// operands swap and the transposes stay with them.
void host_gemm(const tpu_hostgemm_t* g) {
  // One thread for this call: XLA runs custom calls on its pool threads,
  // several at once, and BLAS threads of their own would oversubscribe the
  // cores and spin against XLA's (measured: a fused training step no
  // faster than with XLA's own dots). Restored after, since a small
  // program runs on the thread that launched it (e.g. Python's).
  const int previous = g_local_threads(1);
  const char ta = g->trans_a ? 'T' : 'N', tb = g->trans_b ? 'T' : 'N';
  const int m = static_cast<int>(g->n), n = static_cast<int>(g->m), k = static_cast<int>(g->k);
  const int lda = static_cast<int>(g->ldb), ldb = static_cast<int>(g->lda);
  const int ldc = static_cast<int>(g->ldc);
  if (g->dtype == TPU_DTYPE_FLOAT32) {
    const float one = 1, zero = 0;
    g_sgemm(&tb, &ta, &m, &n, &k, &one, static_cast<const float*>(g->b), &lda,
            static_cast<const float*>(g->a), &ldb, &zero, static_cast<float*>(g->c), &ldc);
  } else {
    const double one = 1, zero = 0;
    g_dgemm(&tb, &ta, &m, &n, &k, &one, static_cast<const double*>(g->b), &lda,
            static_cast<const double*>(g->a), &ldb, &zero, static_cast<double*>(g->c), &ldc);
  }
  g_local_threads(previous);
}

}  // namespace

void install_host_gemm() {
  // Already loaded (this extension links it); RTLD_NOLOAD only looks it up.
  void* lib = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return;
  g_sgemm = reinterpret_cast<sgemm_t>(dlsym(lib, "sgemm_"));
  g_dgemm = reinterpret_cast<dgemm_t>(dlsym(lib, "dgemm_"));
  g_local_threads = reinterpret_cast<threads_t>(dlsym(lib, "MKL_Set_Num_Threads_Local"));
  // Without a way to keep the BLAS on the calling thread, XLA's dots are
  // the better choice (see host_gemm).
  if (g_sgemm && g_dgemm && g_local_threads) tpu_hostgemm_install(host_gemm);
}

}  // namespace torchtpu
