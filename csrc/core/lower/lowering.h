/* The lowering table's interface: how one ATen op becomes StableHLO.
 *
 * A lowering is a small function that, given a context, reads its operands
 * as StableHLO values, emits ops with the builder, and sets its outputs. It
 * never sees storages, views, in-place or out= plumbing: the engine reads
 * every tensor operand as its logical value (views already folded in), and
 * writes the outputs wherever they go (fresh tensors, in-place targets, out=
 * tensors). So "add", "add_" and "add.out" share one lowering, and Strict,
 * Debug, DeferAndFuse and torch.compile all share the table.
 *
 * Arguments arrive in schema order (out= tensors included, last). Outputs
 * are the op's returns in order (a Tensor[] return counts one output per
 * element), followed by every argument the op mutates that no return
 * aliases, in schema order (e.g. _foreach_add_ returns nothing: its outputs
 * are the new values of the list's elements; native_batch_norm in training
 * returns 3 tensors, then outputs 3 and 4 are the new running_mean and
 * running_var). Output
 * types come from PyTorch's meta kernels, so a lowering need not re-derive
 * shapes or result dtypes: it must produce values of exactly those types.
 * A lowering that cannot handle a particular call returns
 * tpu_lower_decline(...): the op then runs on the CPU fallback. */
#ifndef TORCHTPU_CORE_LOWER_LOWERING_H_
#define TORCHTPU_CORE_LOWER_LOWERING_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../hlo/builder.h"
#include "../status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_arg_kind_e {
  TPU_ARG_NONE = 0, /* None, or an optional left out */
  TPU_ARG_TENSOR,   /* a tpu tensor: tpu_lower_tensor() */
  TPU_ARG_TENSORS,  /* a list of tpu tensors (cat, stack, _foreach_*) */
  TPU_ARG_SCALARS,  /* a list of run-time scalars (ScalarList, float[] of
                       _foreach ops): one program argument of type
                       tensor<n x f64>; tpu_lower_scalar_at() */
  TPU_ARG_SCALAR,   /* a run-time scalar (Scalar, or a 0-dim CPU tensor):
                       its value is a program argument, so new values never
                       recompile; only its dtype is known when lowering */
  TPU_ARG_INT,      /* structural: part of the program */
  TPU_ARG_INTS,
  TPU_ARG_FLOAT,
  TPU_ARG_BOOL,
  TPU_ARG_DTYPE,    /* a ScalarType argument */
  TPU_ARG_STRING,
  TPU_ARG_OTHER,    /* layout, device, memory_format, generator, ... */
} tpu_arg_kind_t;

#define TPU_LOWER_MAX_INTS 16

typedef struct tpu_lower_arg_s {
  tpu_arg_kind_t kind;
  /* TENSOR: its logical type (dtype, sizes). SCALAR: rank 0 and its dtype
   * (float64 for a Python float, int64 for an int, bool, complex64, or the
   * 0-dim tensor's dtype). */
  tpu_hlo_type_t type;
  /* SCALAR: true when it came from a Python number (PyTorch's "wrapped
   * number"), which does not take part in type promotion like tensors do. */
  bool wrapped_number;
  /* TENSORS: how many tensors. SCALARS: how many scalars. For an optional
   * tensor list (Tensor?[], e.g. index.Tensor's indices) the TENSORS arg
   * holds only the present tensors and ints[k] gives the list position of
   * the k-th present tensor, num_ints the full list length. */
  int num_tensors;
  /* INT / BOOL (0/1). */
  int64_t i;
  /* FLOAT. */
  double f;
  /* INTS. */
  int num_ints;
  int64_t ints[TPU_LOWER_MAX_INTS];
  /* DTYPE (TPU_DTYPE_INVALID for dtypes we do not support). */
  tpu_dtype_t dtype;
  /* STRING (borrowed for the duration of lowering). */
  const char* str;
} tpu_lower_arg_t;

typedef struct tpu_lower_ctx_s tpu_lower_ctx_t;

tpu_hlo_builder_t* tpu_lower_builder(tpu_lower_ctx_t* ctx);
/* Full ATen name with overload, e.g. "add.Tensor", "add_.Tensor", "add.out". */
const char* tpu_lower_op_name(const tpu_lower_ctx_t* ctx);
int tpu_lower_num_args(const tpu_lower_ctx_t* ctx);
/* The data word of the row being lowered (tpu_lowering_t.data). */
intptr_t tpu_lower_data(const tpu_lower_ctx_t* ctx);
/* Argument i; a static NONE argument when i is out of range. */
const tpu_lower_arg_t* tpu_lower_arg(const tpu_lower_ctx_t* ctx, int i);

/* The value of TENSOR argument i (invalid value, with a sticky builder error,
 * if argument i is not a tensor). */
tpu_hlo_value_t tpu_lower_tensor(tpu_lower_ctx_t* ctx, int i);
/* Tensor k of TENSORS argument i. Its type: tpu_lower_list_type. */
tpu_hlo_value_t tpu_lower_list_tensor(tpu_lower_ctx_t* ctx, int i, int k);
tpu_hlo_type_t tpu_lower_list_type(const tpu_lower_ctx_t* ctx, int i, int k);
/* Argument i as a rank-0 value of `dtype`: SCALAR args are program
 * arguments; INT / FLOAT / BOOL args become constants; a rank-0 TENSOR is
 * converted. */
tpu_hlo_value_t tpu_lower_scalar(tpu_lower_ctx_t* ctx, int i, tpu_dtype_t dtype);

/* Element k of SCALARS argument i as a rank-0 value of `dtype`. */
tpu_hlo_value_t tpu_lower_scalar_at(tpu_lower_ctx_t* ctx, int i, int k, tpu_dtype_t dtype);

int tpu_lower_num_outputs(const tpu_lower_ctx_t* ctx);
/* The type PyTorch's meta kernel gives output i. */
tpu_hlo_type_t tpu_lower_output_type(const tpu_lower_ctx_t* ctx, int i);
/* Sets output i; its type must equal tpu_lower_output_type(ctx, i). */
void tpu_lower_set_output(tpu_lower_ctx_t* ctx, int i, tpu_hlo_value_t value);

/* Random bits for RNG lowerings: a fresh tensor of `shape_type`'s shape
 * holding 32 (bits_dtype int32) or 64 (int64) uniformly random bits per
 * element (signed types carrying unsigned bits), from the device generator
 * (Threefry-2x32 keyed by its state); successive calls in one op return
 * independent bits, and the op advances the state. */
tpu_hlo_value_t tpu_lower_random_bits(tpu_lower_ctx_t* ctx,
                                      const tpu_hlo_type_t* shape_type,
                                      tpu_dtype_t bits_dtype);

/* PyTorch's result_type over a call's TENSOR / SCALAR args (listed by
 * index): dim>0 tensors first, then 0-dim tensors, then wrapped numbers;
 * within a tier the higher category (bool < int < float < complex) wins,
 * and among tensors of one category the wider dtype. */
tpu_dtype_t tpu_lower_result_type(const tpu_lower_ctx_t* ctx, const int* arg_indices,
                                  int n);

/* Tensor argument i (matrices in its last two dims) broadcast to `batch`'s
 * leading dims (all but its last two), keeping its own last two dims. */
tpu_hlo_value_t tpu_lower_batched_matrix(tpu_lower_ctx_t* ctx, int i, const tpu_hlo_type_t* batch);

/* Returns an UNIMPLEMENTED status that makes the engine run the op on the
 * CPU fallback (counted like any fallback). */
tpu_status_t tpu_lower_decline(tpu_lower_ctx_t* ctx, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef tpu_status_t (*tpu_lower_fn_t)(tpu_lower_ctx_t* ctx);

/* Row flags. */
enum {
  /* The lowering calls tpu_lower_random_bits: the engine threads the
   * device generator's state through the program. */
  TPU_LOWER_NEEDS_RNG = 1u << 0,
  /* Graphs only (torch.compile): ops that eager mode runs as views (view,
   * permute, expand, slice, ...) or through its copy path (_to_copy). In a
   * functional graph they are values like any other; in eager, PyTorch's
   * own kernels must keep them aliasing, so eager lookups never see these
   * rows. */
  TPU_LOWER_GRAPH_ONLY = 1u << 1,
};

/* One table row: the ATen base name ("add": also serves "add_" and every
 * overload of both), its lowering and a data word the lowering reads with
 * tpu_lower_data (which comparison, which reduction, which dimension
 * count), so one function serves a family of rows. */
typedef struct tpu_lowering_s {
  const char* name;
  tpu_lower_fn_t fn;
  unsigned flags;
  intptr_t data;
} tpu_lowering_t;

/* The row for an op name, or NULL. Eager lookups: GRAPH_ONLY rows are not
 * found. */
/* "aten::add_.Tensor" / "add_" / "add" -> "add": the length of the base
 * name (no namespace, overload or in-place '_'), which starts at
 * *out_start. Dunder names ("__and__") keep their underscores. */
size_t tpu_lowering_base_name(const char* op_name, const char** out_start);
const tpu_lowering_t* tpu_lowering_find_row(const char* op_name);
/* The same, GRAPH_ONLY rows included (the graph builder). */
const tpu_lowering_t* tpu_lowering_find_graph_row(const char* op_name);

/* Finds the lowering for an ATen op name such as "aten::add_" or "add_"
 * (overload not included); NULL when there is none. */
tpu_lower_fn_t tpu_lowering_find(const char* op_name);
/* Testing only (Debug mode's shadow check must catch a wrong lowering):
 * makes `op`'s row lower with `with`'s function, e.g. mul as add. NULL op
 * clears every override. `with` = "!invalid_program" lowers to a module the
 * compiler rejects (how compile errors are reported). False when either
 * name has no row. Not
 * thread-safe; callers clear the eager cache after changing it. */
bool tpu_lowering_override_for_testing(const char* op, const char* with);

/* Every row, for tests and reports. */
size_t tpu_lowering_count(void);
const tpu_lowering_t* tpu_lowering_at(size_t i);

/* ---- Building a program from one call (used by the engine and by C
 * tests). Tensor arguments become @main parameters of their logical types in
 * order, then SCALAR arguments as rank-0 parameters; the program returns the
 * outputs. The engine has its own variant that reads tensors from flat
 * storages through their views. */
tpu_status_t tpu_lower_program_plain(const char* op_name,
                                     const tpu_lower_arg_t* args, int num_args,
                                     const tpu_hlo_type_t* list_types,
                                     const tpu_hlo_type_t* output_types,
                                     int num_outputs, char** out_text,
                                     size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
