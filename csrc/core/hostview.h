/* The strided view behind a value of a program's text, for the CPU
 * plugin's host kernels.
 *
 * A tensor view read in a program (view.c: the storage reshaped into
 * block dims, sliced, reshaped, transposed) is, to XLA, a chain of ops
 * whose result it materialises before a custom call can read it: the
 * demo's attention read q, k and v, three strided slices of the qkv
 * projection's output, as three transposing copies, each its own
 * kernel. A host kernel can instead read the base value the chain starts
 * from, at an offset and strides. tpu_hostview_resolve walks a value's
 * defining lines back through the ops that only move elements (identity
 * and expanding broadcast_in_dim, transpose, slice, and a reshape that
 * keeps the view a view, as PyTorch's view() decides) and returns where
 * each element lives in the first value that is not one of them (an
 * argument of the function, or any other op's result). */
#ifndef TORCHTPU_CORE_HOSTVIEW_H_
#define TORCHTPU_CORE_HOSTVIEW_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hlo/type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element (i0, i1, ...) of the value is element offset + sum(ik *
 * strides[k]) of base (row-major, base_type's elements). Strides are >= 0
 * (a broadcast dim has 0). */
typedef struct tpu_hostview_s {
  const char* base;
  size_t base_len;
  tpu_hlo_type_t base_type;
  tpu_hlo_type_t type; /* the value's */
  int64_t offset;
  int64_t strides[TPU_HLO_MAX_RANK];
} tpu_hostview_t;

/* The view of value [name, name + len) of type `type`, defined (or not:
 * a function argument) in the function text [fn, limit), limit no later
 * than the line reading it. Never fails: a value nothing can be seen
 * through is its own base, row-major. */
void tpu_hostview_resolve(const char* fn, const char* limit, const char* name, size_t len,
                          const tpu_hlo_type_t* type, tpu_hostview_t* out);

/* Whether v's last dim is adjacent elements (stride 1, or one column)
 * and every element it reaches lies in its base: a host kernel may read
 * its rows with vector loads. */
bool tpu_hostview_rows_of_columns(const tpu_hostview_t* v);

/* Whether value [name, name + len) is read, in text [p, end), by a
 * stablehlo.transpose with permutation perm (rank of them). */
bool tpu_hostview_transposed_next(const char* p, const char* end, const char* name, size_t len,
                                  const int64_t* perm, int rank);

#ifdef __cplusplus
}
#endif

#endif
