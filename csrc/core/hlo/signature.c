#include "signature.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char* find(const char* s, const char* end, const char* needle) {
  size_t n = strlen(needle);
  for (; s + n <= end; s++)
    if (memcmp(s, needle, n) == 0) return s;
  return NULL;
}

tpu_status_t tpu_hlo_parse_type(const char* text, size_t len,
                                tpu_hlo_type_t* out_type) {
  const char* end = text + len;
  while (text < end && isspace((unsigned char)*text)) text++;
  while (end > text && isspace((unsigned char)end[-1])) end--;
  if (end - text < 8 || memcmp(text, "tensor<", 7) != 0 || end[-1] != '>')
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "'%.*s' is not a ranked tensor type", (int)(end - text), text);
  const char* p = text + 7;
  const char* body_end = end - 1;
  tpu_hlo_type_t type = {.dtype = TPU_DTYPE_INVALID, .rank = 0};
  /* Dims: digits followed by 'x', until the element type. */
  while (p < body_end && isdigit((unsigned char)*p)) {
    char* after = NULL;
    long long d = strtoll(p, &after, 10);
    if (after >= body_end || *after != 'x') break; /* e.g. "i64" has no digits first */
    if (type.rank == TPU_HLO_MAX_RANK)
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "rank exceeds %d",
                             TPU_HLO_MAX_RANK);
    type.dims[type.rank++] = d;
    p = after + 1;
  }
  size_t elem_len = (size_t)(body_end - p);
  for (int d = 0; d < TPU_DTYPE_COUNT; d++) {
    const char* name = tpu_dtype_mlir((tpu_dtype_t)d);
    if (strlen(name) == elem_len && memcmp(name, p, elem_len) == 0)
      type.dtype = (tpu_dtype_t)d;
  }
  if (type.dtype == TPU_DTYPE_INVALID)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "unsupported element type '%.*s' in '%.*s'", (int)elem_len, p,
                           (int)(end - text), text);
  *out_type = type;
  return NULL;
}

tpu_status_t tpu_hlo_parse_main_params(const char* text, size_t len,
                                       tpu_hlo_type_t* out_params,
                                       size_t capacity, size_t* out_num_params) {
  const char* end = text + len;
  const char* p = find(text, end, "@main(");
  if (!p)
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "the module has no @main function");
  p += 6;
  size_t count = 0;
  /* Each parameter: %name: tensor<...> [{attrs}] separated by commas at
   * depth 0; ')' at depth 0 ends the list. */
  while (p < end) {
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p < end && *p == ')') break;
    const char* colon = memchr(p, ':', (size_t)(end - p));
    if (!colon) break;
    const char* t = colon + 1;
    while (t < end && isspace((unsigned char)*t)) t++;
    const char* q = t;
    int depth = 0;
    while (q < end) {
      if (*q == '<') depth++;
      if (*q == '>' && --depth == 0) {
        q++;
        break;
      }
      if (depth == 0 && (*q == ',' || *q == ')')) break;
      q++;
    }
    tpu_hlo_type_t type;
    tpu_status_t s = tpu_hlo_parse_type(t, (size_t)(q - t), &type);
    if (s) return tpu_status_annotate(s, "@main argument %zu: ", count);
    if (count < capacity) out_params[count] = type;
    count++;
    /* Skip an attribute dict, then the separator. */
    depth = 0;
    while (q < end) {
      if (*q == '{') depth++;
      else if (*q == '}') depth--;
      else if (depth == 0 && (*q == ',' || *q == ')')) break;
      q++;
    }
    if (q >= end)
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "unterminated @main signature");
    p = *q == ',' ? q + 1 : q;
  }
  *out_num_params = count;
  return NULL;
}

int64_t tpu_hlo_largest_tensor_bytes(const char* text, size_t len) {
  const char* end = text + len;
  int64_t largest = 0;
  for (const char* p = find(text, end, "tensor<"); p; p = find(p + 7, end, "tensor<")) {
    const char* q = p + 7;
    int depth = 1;
    while (q < end && depth > 0) {
      if (*q == '<') depth++;
      if (*q == '>') depth--;
      q++;
    }
    tpu_hlo_type_t type;
    tpu_status_t s = tpu_hlo_parse_type(p, (size_t)(q - p), &type);
    if (s) {
      tpu_status_free(s);
      continue;
    }
    int64_t bytes = (int64_t)tpu_dtype_size(type.dtype);
    for (int d = 0; d < type.rank; d++) bytes *= type.dims[d];
    if (bytes > largest) largest = bytes;
  }
  return largest;
}
