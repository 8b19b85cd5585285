/* StableHLO text builder: emits one module with one public function @main in
 * MLIR's generic op form ("stablehlo.add"(%a, %b) : (T, T) -> T), which every
 * StableHLO consumer accepts and which needs no per-op printing rules.
 *
 * Errors are sticky: any call that fails (bad operand, allocation failure,
 * unsupported dtype) records the first error and returns an invalid value;
 * later calls become no-ops, and tpu_hlo_builder_finish returns that error.
 * So call sites stay flat and check once at the end. */
#ifndef TORCHTPU_CORE_HLO_BUILDER_H_
#define TORCHTPU_CORE_HLO_BUILDER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../status.h"
#include "type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An SSA value of the function being built. id < 0 = invalid. Ids are
 * opaque: they encode the builder (a value of another builder is rejected,
 * best effort: 255 builder tags) and are not dense indices. */
typedef struct tpu_hlo_value_s {
  int id;
} tpu_hlo_value_t;

typedef struct tpu_hlo_builder_s tpu_hlo_builder_t;

tpu_status_t tpu_hlo_builder_create(tpu_hlo_builder_t** out_builder);
void tpu_hlo_builder_destroy(tpu_hlo_builder_t* builder); /* NULL is fine */

/* The precision of float32 products: StableHLO's precision_config, put on
 * every stablehlo.dot_general and stablehlo.convolution the builder emits
 * from now on. A TPU computes DEFAULT as one bfloat16 pass, HIGH as three,
 * HIGHEST as six (float32-exact); CPU and GPU plugins compute float32 in
 * every case. UNSET (a new builder) emits no attribute: XLA's default. */
typedef enum tpu_hlo_precision_e {
  TPU_HLO_PRECISION_UNSET = 0,
  TPU_HLO_PRECISION_DEFAULT, /* torch.set_float32_matmul_precision("medium") */
  TPU_HLO_PRECISION_HIGH,    /* "high" */
  TPU_HLO_PRECISION_HIGHEST, /* "highest", PyTorch's default */
} tpu_hlo_precision_t;
void tpu_hlo_builder_set_precision(tpu_hlo_builder_t* b, tpu_hlo_precision_t precision);

/* Appends a parameter of @main. `attrs` is an attribute-dict body or NULL,
 * e.g. "tf.aliasing_output = 0 : i32" to donate it to output 0. Arguments
 * must all be added before the first op. */
tpu_hlo_value_t tpu_hlo_arg(tpu_hlo_builder_t* b, tpu_hlo_type_t type,
                            const char* attrs);

/* Whether some op or return took the value as an operand so far (every
 * reference to a value goes through an operand list). After the return:
 * false for an argument the program never reads. */
bool tpu_hlo_value_used(const tpu_hlo_builder_t* b, tpu_hlo_value_t value);

/* The type of a value (dtype INVALID for an invalid value). */
tpu_hlo_type_t tpu_hlo_value_type(const tpu_hlo_builder_t* b,
                                  tpu_hlo_value_t value);

/* The value's SSA name as the module text prints it ("%12", "%arg0"),
 * truncated to cap bytes with the NUL; "" for a value not of b. */
void tpu_hlo_value_name(const tpu_hlo_builder_t* b, tpu_hlo_value_t value, char* out,
                        size_t cap);

/* Emits %r = "<name>"(operands) {attrs} : (operand types) -> result_type.
 * `name` is the full op name ("stablehlo.add"); `attrs` is the attribute-dict
 * body or NULL, e.g. "comparison_direction = #stablehlo<comparison_direction
 * LT>". Returns the single result. */
tpu_hlo_value_t tpu_hlo_op(tpu_hlo_builder_t* b, const char* name,
                           const tpu_hlo_value_t* operands, int num_operands,
                           tpu_hlo_type_t result_type, const char* attrs);

/* As tpu_hlo_op with several results (sort, reduce of tuples, while). */
void tpu_hlo_op_multi(tpu_hlo_builder_t* b, const char* name,
                      const tpu_hlo_value_t* operands, int num_operands,
                      const tpu_hlo_type_t* result_types, int num_results,
                      const char* attrs, tpu_hlo_value_t* out_results);

/* Ops with regions (reduce, scatter, sort, select_and_scatter, while ...):
 *   tpu_hlo_region_op_begin(b, "stablehlo.reduce", operands, n,
 *                           result_types, nres, "dimensions = array<i64: 1>");
 *   tpu_hlo_block_begin(b, block_arg_types, 2, args);   // ^bb0(...)
 *     ... ops using args ...
 *   tpu_hlo_block_return(b, &sum, 1);                    // stablehlo.return
 *   tpu_hlo_region_op_end(b, out_results);
 * Several blocks in a row make several regions (while: cond then body).
 * Region ops nest. Values defined inside a block are not visible after it. */
void tpu_hlo_region_op_begin(tpu_hlo_builder_t* b, const char* name,
                             const tpu_hlo_value_t* operands, int num_operands,
                             const tpu_hlo_type_t* result_types,
                             int num_results, const char* attrs);
void tpu_hlo_block_begin(tpu_hlo_builder_t* b, const tpu_hlo_type_t* arg_types,
                         int num_args, tpu_hlo_value_t* out_args);
void tpu_hlo_block_return(tpu_hlo_builder_t* b, const tpu_hlo_value_t* values,
                          int num_values);
void tpu_hlo_region_op_end(tpu_hlo_builder_t* b, tpu_hlo_value_t* out_results);

/* Constants, printed exactly: integers in decimal, floats with round-trip
 * precision, non-finite floats (and f16/bf16 always) as hex bit patterns.
 * A scalar constant of `type` splats the value over every element.
 * Values are converted to type.dtype with one round-to-nearest-even; an
 * integer that does not fit an integral/bool dtype is OUT_OF_RANGE, a float
 * given to an integral dtype must be an exact integer, and _complex needs a
 * complex dtype. */
tpu_hlo_value_t tpu_hlo_constant_int(tpu_hlo_builder_t* b, tpu_hlo_type_t type,
                                     int64_t value);
tpu_hlo_value_t tpu_hlo_constant_uint(tpu_hlo_builder_t* b,
                                      tpu_hlo_type_t type, uint64_t value);
tpu_hlo_value_t tpu_hlo_constant_float(tpu_hlo_builder_t* b,
                                       tpu_hlo_type_t type, double value);
/* Parts rounded to the dtype's part type (f32 for complex64, f64 for
 * complex128). */
tpu_hlo_value_t tpu_hlo_constant_complex(tpu_hlo_builder_t* b,
                                         tpu_hlo_type_t type, double real,
                                         double imag);
tpu_hlo_value_t tpu_hlo_constant_bool(tpu_hlo_builder_t* b,
                                      tpu_hlo_type_t type, bool value);
/* A dense constant from host bytes in `type.dtype`'s layout, row-major
 * (bool: one byte per element, nonzero = true). data may be NULL for a
 * zero-element type. Printed as the raw bytes (dense<"0x...">), so every bit
 * pattern, NaN payloads included, is kept. */
tpu_hlo_value_t tpu_hlo_constant_dense(tpu_hlo_builder_t* b,
                                       tpu_hlo_type_t type, const void* data);

/* Ends @main returning these values (its result types). */
void tpu_hlo_return(tpu_hlo_builder_t* b, const tpu_hlo_value_t* values,
                    int num_values);

/* Appends whole functions (func.func ... text) to the module after @main:
 * private functions that @main calls with "func.call" (custom kernels). */
void tpu_hlo_add_functions(tpu_hlo_builder_t* b, const char* text);

/* The module text. *out_text is malloc'd (caller frees with free()),
 * NUL-terminated; out_len excludes the NUL. Returns the first recorded
 * error instead, if any. */
tpu_status_t tpu_hlo_builder_finish(tpu_hlo_builder_t* b, char** out_text,
                                    size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
