#include "type.h"

#include <stdio.h>
#include <string.h>

#include "strbuf.h"

tpu_hlo_type_t tpu_hlo_type_make(tpu_dtype_t dtype, int rank,
                                 const int64_t* dims) {
  tpu_hlo_type_t type;
  memset(&type, 0, sizeof type);
  type.dtype = dtype;
  type.rank = rank;
  for (int i = 0; i < rank && i < TPU_HLO_MAX_RANK; i++) {
    type.dims[i] = dims ? dims[i] : -1;
  }
  return type;
}

tpu_hlo_type_t tpu_hlo_type_scalar(tpu_dtype_t dtype) {
  return tpu_hlo_type_make(dtype, 0, NULL);
}

bool tpu_hlo_type_equal(const tpu_hlo_type_t* a, const tpu_hlo_type_t* b) {
  return a->dtype == b->dtype && a->rank == b->rank && a->rank >= 0 &&
         a->rank <= TPU_HLO_MAX_RANK &&
         memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

int64_t tpu_hlo_type_numel(const tpu_hlo_type_t* type) {
  int64_t n = 1;
  for (int d = 0; d < type->rank; d++) n *= type->dims[d];
  return n;
}

bool tpu_hlo_type_same_elements(const tpu_hlo_type_t* a, const tpu_hlo_type_t* b) {
  return a->dtype == b->dtype && tpu_hlo_type_numel(a) == tpu_hlo_type_numel(b);
}

tpu_hlo_type_t tpu_hlo_type_flat(const tpu_hlo_type_t* type) {
  int64_t n = tpu_hlo_type_numel(type);
  return tpu_hlo_type_make(type->dtype, 1, &n);
}

void tpu_hlo_type_append(tpu_strbuf_t* sb, const tpu_hlo_type_t* type) {
  if (type->rank < 0 || type->rank > TPU_HLO_MAX_RANK) {
    tpu_strbuf_appendf(sb, "<invalid rank %d>", type->rank);
    return;
  }
  tpu_strbuf_append(sb, "tensor<");
  for (int i = 0; i < type->rank; i++) {
    tpu_strbuf_appendf(sb, "%lldx", (long long)type->dims[i]);
  }
  tpu_strbuf_append(sb, tpu_dtype_mlir(type->dtype));
  tpu_strbuf_append(sb, ">");
}

void tpu_hlo_type_print(const tpu_hlo_type_t* type, char* out, size_t cap) {
  if (!out || cap == 0) return;
  tpu_strbuf_t sb = {0};
  tpu_hlo_type_append(&sb, type);
  snprintf(out, cap, "%s", sb.failed || !sb.data ? "" : sb.data);
  tpu_strbuf_free(&sb);
}
