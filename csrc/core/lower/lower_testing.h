/* Test support for lowerings: build the plain program for one call, run it
 * on the default plugin with host data, and download the outputs. Header
 * only, for *_test.c files of the lower/ directory. */
#ifndef TORCHTPU_CORE_LOWER_LOWER_TESTING_H_
#define TORCHTPU_CORE_LOWER_LOWER_TESTING_H_

#include <stdlib.h>
#include <string.h>

#include "../pjrt/pjrt.h"
#include "../program.h"
#include "../runtime.h"
#include "lowering.h"

static inline tpu_lower_arg_t tpu_test_tensor_arg(tpu_dtype_t dtype, int rank,
                                                  const int64_t* dims) {
  tpu_lower_arg_t a = {.kind = TPU_ARG_TENSOR};
  a.type = tpu_hlo_type_make(dtype, rank, dims);
  return a;
}

static inline tpu_lower_arg_t tpu_test_scalar_arg(tpu_dtype_t dtype, bool wrapped) {
  tpu_lower_arg_t a = {.kind = TPU_ARG_SCALAR, .wrapped_number = wrapped};
  a.type = tpu_hlo_type_scalar(dtype);
  return a;
}

static inline size_t tpu_test_type_bytes(const tpu_hlo_type_t* t) {
  size_t n = tpu_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

/* data[k]: host bytes for the k-th program parameter, in parameter order:
 * TENSOR args (and TENSORS members, via list_types) in arg order, then
 * SCALAR and SCALARS (n x f64) args in arg order, then (for RNG ops) the 2 x int64 state.
 * out_data[i] receives malloc'd output bytes (caller frees). */
static inline tpu_status_t tpu_test_run_op(const char* op, const tpu_lower_arg_t* args,
                                           int nargs, const tpu_hlo_type_t* list_types,
                                           const void* const* data,
                                           const tpu_hlo_type_t* outs, int nouts,
                                           void** out_data) {
  TPU_RETURN_IF_ERROR(tpu_runtime_init(NULL));
  char* text = NULL;
  size_t len = 0;
  TPU_RETURN_IF_ERROR(
      tpu_lower_program_plain(op, args, nargs, list_types, outs, nouts, &text, &len));
  tpu_program_t* program = NULL;
  tpu_status_t s = tpu_program_get(text, len, &program);
  free(text);
  TPU_RETURN_IF_ERROR(s);
  tpu_hlo_type_t params[64];
  int np = 0, nl = 0;
  for (int i = 0; i < nargs; i++) {
    if (args[i].kind == TPU_ARG_TENSOR) params[np++] = args[i].type;
    if (args[i].kind == TPU_ARG_TENSORS)
      for (int k = 0; k < args[i].num_tensors; k++) params[np++] = list_types[nl++];
  }
  for (int i = 0; i < nargs; i++)
    if (args[i].kind == TPU_ARG_SCALAR || args[i].kind == TPU_ARG_SCALARS)
      params[np++] = args[i].type;
  const tpu_lowering_t* row = tpu_lowering_find_row(op);
  if (row && (row->flags & TPU_LOWER_NEEDS_RNG)) {
    int64_t two = 2;
    params[np++] = tpu_hlo_type_make(TPU_DTYPE_INT64, 1, &two);
  }
  tpu_buffer_t* in[64] = {0};
  tpu_buffer_t* res[16] = {0};
  for (int k = 0; k < np && !s; k++)
    s = tpu_buffer_from_host(tpu_runtime_client(), 0, data[k], params[k].dtype, params[k].dims,
                             params[k].rank, NULL, &in[k]);
  if (!s) s = tpu_program_execute(program, 0, in, np, res);
  for (int i = 0; i < nouts; i++) {
    size_t nbytes = tpu_test_type_bytes(&outs[i]);
    out_data[i] = malloc(nbytes ? nbytes : 1);
    if (!s) s = tpu_buffer_to_host(res[i], out_data[i], nbytes);
  }
  for (int k = 0; k < np; k++) tpu_buffer_destroy(in[k]);
  for (int i = 0; i < 16; i++) tpu_buffer_destroy(res[i]);
  return s;
}

/* Argument descriptors of the non-tensor kinds. */
static inline tpu_lower_arg_t int_arg(int64_t v) { return (tpu_lower_arg_t){.kind = TPU_ARG_INT, .i = v}; }
static inline tpu_lower_arg_t bool_arg(bool v) { return (tpu_lower_arg_t){.kind = TPU_ARG_BOOL, .i = v}; }
static inline tpu_lower_arg_t float_arg(double v) { return (tpu_lower_arg_t){.kind = TPU_ARG_FLOAT, .f = v}; }
static inline tpu_lower_arg_t none_arg(void) { return (tpu_lower_arg_t){.kind = TPU_ARG_NONE}; }
static const tpu_lower_arg_t kNone = {.kind = TPU_ARG_NONE};
static inline tpu_lower_arg_t ints_arg(int n, const int64_t* v) {
  tpu_lower_arg_t a = {.kind = TPU_ARG_INTS, .num_ints = n};
  if (n > 0) memcpy(a.ints, v, sizeof(int64_t) * (size_t)n); /* v may be NULL for [] */
  return a;
}

/* float32 <-> bfloat16 bits, rounding to nearest even as PyTorch does. */
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (f != f) return 0x7fc0;
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#endif
