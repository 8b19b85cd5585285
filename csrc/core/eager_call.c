#include "eager_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- slots --------------------------------------------------------------- */

static int slot_of(tpu_eager_slots_t* s, const tpu_eager_tensor_t* t) {
  for (int i = 0; i < s->count; i++) {
    if (s->storages[i] == t->storage) {
      if (s->dtypes[i] != t->view.dtype) s->conflict = true;
      return i;
    }
  }
  s->storages[s->count] = t->storage;
  s->dtypes[s->count] = t->view.dtype;
  s->numels[s->count] = t->storage_numel;
  return s->count++;
}

/* Empty slots with room for every tensor of the call. */
static tpu_status_t slots_init(tpu_eager_slots_t* s, const tpu_eager_call_t* call) {
  int max = call->num_args + call->num_list + 1;
  s->count = 0;
  s->conflict = false;
  if (max <= TPU_EAGER_SLOTS_INLINE) {
    s->storages = s->inline_storages;
    s->dtypes = s->inline_dtypes;
    s->numels = s->inline_numels;
    return NULL;
  }
  s->storages = malloc(sizeof *s->storages * (size_t)max);
  s->dtypes = malloc(sizeof *s->dtypes * (size_t)max);
  s->numels = malloc(sizeof *s->numels * (size_t)max);
  return s->storages && s->dtypes && s->numels ? NULL : tpu_status_oom(NULL);
}

void tpu_eager_slots_free(tpu_eager_slots_t* s) {
  if (s->storages == s->inline_storages) return;
  free(s->storages);
  free(s->dtypes);
  free(s->numels);
}

tpu_status_t tpu_eager_call_slots(const tpu_eager_call_t* call, tpu_eager_slots_t* s,
                                  int* out_arg_slot, int* out_list_slot) {
  TPU_RETURN_IF_ERROR(slots_init(s, call));
  for (int i = 0; i < call->num_args; i++) {
    const tpu_eager_arg_t* a = &call->args[i];
    int slot = -1;
    if (a->lower.kind == TPU_ARG_TENSOR) {
      slot = slot_of(s, &a->tensor);
    } else if (a->lower.kind == TPU_ARG_TENSORS) {
      for (int j = 0; j < a->lower.num_tensors; j++) {
        int k = a->list_start + j, list_slot = slot_of(s, &call->list[k]);
        if (out_list_slot) out_list_slot[k] = list_slot;
      }
    }
    if (out_arg_slot) out_arg_slot[i] = slot;
  }
  return NULL;
}

/* ---- keys ---------------------------------------------------------------- */

static void key_grow_put(tpu_eager_key_t* k, const void* p, size_t n);

/* Appends bytes to the key; the common case (room left) stays inline. */
static inline void key_put(tpu_eager_key_t* k, const void* p, size_t n) {
  if (k->len + n <= k->cap) {
    memcpy(k->data + k->len, p, n);
    k->len += n;
    return;
  }
  key_grow_put(k, p, n);
}

static void key_grow_put(tpu_eager_key_t* k, const void* p, size_t n) {
  if (k->failed) return;
  size_t cap = k->cap ? k->cap * 2 : 512;
  while (cap < k->len + n) cap *= 2;
  uint8_t* grown = k->on_heap ? realloc(k->data, cap) : malloc(cap);
  if (!grown) {
    k->failed = true;
    return;
  }
  if (!k->on_heap && k->len) memcpy(grown, k->data, k->len);
  k->on_heap = true;
  k->data = grown;
  k->cap = cap;
  memcpy(k->data + k->len, p, n);
  k->len += n;
}
#define KEY_PUT(k, v) key_put((k), &(v), sizeof(v))

static void key_tensor(tpu_eager_key_t* k, tpu_eager_slots_t* s, const tpu_eager_tensor_t* t) {
  int slot = slot_of(s, t);
  KEY_PUT(k, slot);
  KEY_PUT(k, t->storage_numel);
  KEY_PUT(k, t->view.dtype);
  KEY_PUT(k, t->view.rank);
  key_put(k, t->view.sizes, sizeof(int64_t) * (size_t)t->view.rank);
  key_put(k, t->view.strides, sizeof(int64_t) * (size_t)t->view.rank);
  KEY_PUT(k, t->view.offset);
}

tpu_status_t tpu_eager_call_key(const tpu_eager_call_t* call, void* buf, size_t cap,
                                tpu_eager_key_t* k) {
  *k = (tpu_eager_key_t){.data = buf, .cap = buf ? cap : 0};
  tpu_eager_slots_t s; /* numbered as the program's parameters will be */
  tpu_status_t status = slots_init(&s, call);
  if (status) {
    tpu_eager_slots_free(&s);
    return status;
  }
  key_put(k, call->op_name, strlen(call->op_name) + 1);
  KEY_PUT(k, call->state);
  KEY_PUT(k, call->precision);
  KEY_PUT(k, call->num_args);
  for (int i = 0; i < call->num_args; i++) {
    const tpu_eager_arg_t* a = &call->args[i];
    const tpu_lower_arg_t* l = &a->lower;
    KEY_PUT(k, l->kind);
    switch (l->kind) {
      case TPU_ARG_TENSOR: key_tensor(k, &s, &a->tensor); break;
      case TPU_ARG_TENSORS:
        KEY_PUT(k, l->num_tensors);
        for (int j = 0; j < l->num_tensors; j++) key_tensor(k, &s, &call->list[a->list_start + j]);
        /* An optional list's positions (x[a] vs x[:, a]) change the program. */
        KEY_PUT(k, l->num_ints);
        key_put(k, l->ints, sizeof(int64_t) * (size_t)l->num_ints);
        break;
      case TPU_ARG_SCALAR:
        KEY_PUT(k, l->type.dtype);
        KEY_PUT(k, l->wrapped_number);
        break;
      case TPU_ARG_SCALARS: KEY_PUT(k, l->num_tensors); break;
      case TPU_ARG_INT:
      case TPU_ARG_BOOL: KEY_PUT(k, l->i); break;
      case TPU_ARG_FLOAT: KEY_PUT(k, l->f); break;
      case TPU_ARG_INTS:
        KEY_PUT(k, l->num_ints);
        key_put(k, l->ints, sizeof(int64_t) * (size_t)l->num_ints);
        break;
      case TPU_ARG_DTYPE: KEY_PUT(k, l->dtype); break;
      case TPU_ARG_STRING: key_put(k, l->str, strlen(l->str) + 1); break;
      default: break;
    }
  }
  tpu_eager_slots_free(&s);
  return k->failed ? tpu_status_oom("building an eager cache key") : NULL;
}

void tpu_eager_key_free(tpu_eager_key_t* k) {
  if (k->on_heap) free(k->data);
  k->data = NULL;
  k->on_heap = false;
}

/* ---- the key as text ----------------------------------------------------- */

/* Writes "[a,b,c]" into out (truncated to cap). */
static void ints_text(char* out, size_t cap, const int64_t* values, int count) {
  size_t n = (size_t)snprintf(out, cap, "[");
  for (int i = 0; i < count && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, i ? ",%lld" : "%lld", (long long)values[i]);
  if (n < cap) snprintf(out + n, cap - n, "]");
}

static void tensor_text(char* out, size_t cap, const tpu_eager_tensor_t* t) {
  char sizes[160], strides[160];
  ints_text(sizes, sizeof sizes, t->view.sizes, t->view.rank);
  ints_text(strides, sizeof strides, t->view.strides, t->view.rank);
  snprintf(out, cap, "%s%s strides %s offset %lld of %lld", tpu_dtype_name(t->view.dtype), sizes,
           strides, (long long)t->view.offset, (long long)t->storage_numel);
}

char* tpu_eager_call_describe(const tpu_eager_call_t* call, const char** parts, int* out_num) {
  enum { kMaxParts = TPU_EAGER_CALL_MAX_PARTS, kPart = 400 };
  int n = call->num_args < kMaxParts ? call->num_args : kMaxParts;
  char* texts = calloc((size_t)n + 1, kPart);
  *out_num = 0;
  if (!texts) return NULL;
  for (int i = 0; i < n; i++) {
    char* out = texts + (size_t)i * kPart;
    const tpu_eager_arg_t* a = &call->args[i];
    const tpu_lower_arg_t* l = &a->lower;
    char body[kPart - 16];
    body[0] = 0;
    switch (l->kind) {
      case TPU_ARG_TENSOR: tensor_text(body, sizeof body, &a->tensor); break;
      case TPU_ARG_TENSORS: {
        size_t m = (size_t)snprintf(body, sizeof body, "%d tensors", l->num_tensors);
        for (int j = 0; j < l->num_tensors && m < sizeof body; j++) {
          char one[200];
          tensor_text(one, sizeof one, &call->list[a->list_start + j]);
          m += (size_t)snprintf(body + m, sizeof body - m, "; %s", one);
        }
        break;
      }
      case TPU_ARG_SCALAR:
        snprintf(body, sizeof body, "scalar %s", tpu_dtype_name(l->type.dtype));
        break;
      case TPU_ARG_SCALARS: snprintf(body, sizeof body, "%d scalars", l->num_tensors); break;
      case TPU_ARG_INT:
      case TPU_ARG_BOOL: snprintf(body, sizeof body, "%lld", (long long)l->i); break;
      case TPU_ARG_FLOAT: snprintf(body, sizeof body, "%.17g", l->f); break;
      case TPU_ARG_INTS: ints_text(body, sizeof body, l->ints, l->num_ints); break;
      case TPU_ARG_DTYPE: snprintf(body, sizeof body, "dtype %s", tpu_dtype_name(l->dtype)); break;
      case TPU_ARG_STRING: snprintf(body, sizeof body, "'%s'", l->str); break;
      case TPU_ARG_NONE: snprintf(body, sizeof body, "None"); break;
      default: snprintf(body, sizeof body, "-"); break;
    }
    snprintf(out, kPart, "arg %d: %s", i, body);
    parts[i] = out;
  }
  /* The global settings of the key (texts has room for one more part). */
  static const char* const kPrecision[] = {"unset", "medium", "high", "highest"};
  char* settings = texts + (size_t)n * kPart;
  snprintf(settings, kPart, "settings: matmul precision %s, state 0x%x",
           (unsigned)call->precision < 4 ? kPrecision[call->precision] : "?", (unsigned)call->state);
  parts[n < kMaxParts ? n : kMaxParts - 1] = settings;
  *out_num = n < kMaxParts ? n + 1 : n;
  return texts;
}
