/* DeferAndFuse's run, shared by defer.c (recording, flushing) and
 * defer_text.c (the fused module's text). Not an interface. */
#ifndef TORCHTPU_CORE_DEFER_INTERNAL_H_
#define TORCHTPU_CORE_DEFER_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "defer.h"
#include "repeat.h"

/* value_t.op of a value no op of the run produced. */
enum {
  VALUE_INPUT = -1, /* a program argument: inputs[index] */
  VALUE_ZEROS = -2, /* contents never written: zeros made in the program */
};

typedef struct {
  tpu_hlo_type_t type;
  int op;    /* producing op, or VALUE_INPUT / VALUE_ZEROS */
  int index; /* result index of that op, or input index */
} value_t;

/* A program argument: a storage's contents (borrowed; the storage's member
 * entry keeps it alive) or a run-time value (owned when `owned`). */
typedef struct {
  tpu_buffer_t* buffer;
  bool owned;
} input_t;

typedef struct {
  const tpu_defer_op_t* op;
  int first_param; /* into params */
} op_rec_t;

typedef struct {
  tpu_storage_t* storage; /* retained by the run */
  bool written;
} member_t;

typedef struct {
  pthread_mutex_t lock;
  int device;
  value_t* values;
  int num_values, cap_values;
  input_t* inputs;
  int num_inputs, cap_inputs;
  op_rec_t* ops;
  int num_ops, cap_ops;
  int* params;
  int num_params, cap_params;
  member_t* members;
  int num_members, cap_members;
  int num_zeros; /* VALUE_ZEROS values */
  tpu_repeat_t* repeat;
} trace_t;

/* The fused module of the run's ops returning the values `kept`: each
 * distinct op once as a private function, @main calling them in order.
 * NULL when out of memory. */
char* tpu_defer_fused_text(const trace_t* tr, const int* kept, int num_kept, size_t* out_len);

#endif
