#include "hostffi.h"

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "hlo/signature.h"

static atomic_bool g_wide_off;

bool tpu_hostffi_wide(void) {
  static atomic_int supported = -1; /* every thread finds the same */
  if (supported < 0)
    supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                __builtin_cpu_supports("fma");
  return supported && !atomic_load_explicit(&g_wide_off, memory_order_relaxed);
}

void tpu_hostffi_set_wide(bool allowed) { atomic_store(&g_wide_off, !allowed); }

XLA_FFI_Error* tpu_hostffi_error(const XLA_FFI_CallFrame* frame, const char* message) {
  XLA_FFI_Error_Create_Args args = {.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE,
                                    .message = message,
                                    .errc = XLA_FFI_Error_Code_INTERNAL};
  return frame->api->XLA_FFI_Error_Create(&args);
}

/* XLA drops a registration, silently, whose version is newer than its
 * own: the handlers use nothing past version 0.1, so they claim the older
 * of the header's and the plugin's. */
bool tpu_hostffi_answer_metadata(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Extension_Base* e = frame->extension_start;
  if (!e || e->type != XLA_FFI_Extension_Metadata) return false;
  int minor = XLA_FFI_API_MINOR;
  if (frame->api && frame->api->api_version.major_version == XLA_FFI_API_MAJOR &&
      frame->api->api_version.minor_version < minor)
    minor = frame->api->api_version.minor_version;
  XLA_FFI_Metadata* md = ((XLA_FFI_Metadata_Extension*)e)->metadata;
  md->api_version = (XLA_FFI_Api_Version){.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE,
                                          .major_version = XLA_FFI_API_MAJOR,
                                          .minor_version = minor};
  md->traits = 0;
  return true;
}

#define HAS_FFI_SLOT(api, slot) \
  ((api)->struct_size >= offsetof(XLA_FFI_Api, slot) + sizeof((api)->slot) && (api)->slot)

static void drop_error(const XLA_FFI_Api* api, XLA_FFI_Error* e) {
  XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE,
                                  .error = e};
  api->XLA_FFI_Error_Destroy(&d);
}

int tpu_hostffi_threads(const XLA_FFI_CallFrame* frame) {
  const XLA_FFI_Api* api = frame->api;
  if (!HAS_FFI_SLOT(api, XLA_FFI_ThreadPool_NumThreads) ||
      !HAS_FFI_SLOT(api, XLA_FFI_ThreadPool_Schedule))
    return 1;
  int64_t n = 1;
  XLA_FFI_ThreadPool_NumThreads_Args args = {
      .struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE,
      .ctx = frame->ctx,
      .num_threads = &n};
  XLA_FFI_Error* e = api->XLA_FFI_ThreadPool_NumThreads(&args);
  if (e) {
    drop_error(api, e);
    return 1;
  }
  return n < 1 ? 1 : n > TPU_HOSTFFI_MAX_PARTS ? TPU_HOSTFFI_MAX_PARTS : (int)n;
}

/* On the heap and counted: a pool task may start after the call returned
 * (it then finds no part left and only drops its reference). */
typedef struct {
  void (*work)(void* ctx, int part);
  void* ctx;
  int parts;
  atomic_int next, done, refs;
} job_t;

static void job_release(job_t* j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) free(j);
}

static void job_work(job_t* j) {
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->parts;) {
    j->work(j->ctx, i);
    atomic_fetch_add(&j->done, 1);
  }
}

static void job_task(void* data) {
  job_work(data);
  job_release(data);
}

void tpu_hostffi_parallel(const XLA_FFI_CallFrame* frame, int parts,
                          void (*work)(void* ctx, int part), void* ctx) {
  job_t* j = parts >= 2 ? malloc(sizeof *j) : NULL;
  if (!j) { /* one part, or no memory for the job: all of it here */
    for (int i = 0; i < parts; i++) work(ctx, i);
    return;
  }
  j->work = work;
  j->ctx = ctx;
  j->parts = parts;
  atomic_init(&j->next, 0);
  atomic_init(&j->done, 0);
  atomic_init(&j->refs, parts); /* ours, and one per task offered */
  for (int i = 1; i < parts; i++) {
    XLA_FFI_ThreadPool_Schedule_Args args = {
        .struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE,
        .ctx = frame->ctx,
        .task = job_task,
        .data = j};
    XLA_FFI_Error* e = frame->api->XLA_FFI_ThreadPool_Schedule(&args);
    if (e) { /* not offered: this thread computes its part */
      drop_error(frame->api, e);
      job_release(j);
    }
  }
  job_work(j);
  /* Parts a pool thread started are being finished. */
  while (atomic_load(&j->done) < parts) sched_yield();
  job_release(j);
}

bool tpu_hostffi_register(tpu_client_t* client, const char* const* targets,
                          XLA_FFI_Handler* const* handlers, int n, const char* probe,
                          const char* what) {
  for (int i = 0; i < n; i++) {
    tpu_status_t s = tpu_plugin_register_ffi_handler(tpu_client_plugin(client), targets[i],
                                                     "Host", (void*)handlers[i]);
    if (s) { /* XLA's own ops then: slower, never wrong */
      tpu_status_free(s);
      return false;
    }
  }
  tpu_compile_options_t options = {.portable = true};
  tpu_executable_t* executable = NULL;
  tpu_status_t s = tpu_executable_compile(client, probe, strlen(probe), &options, &executable);
  tpu_executable_destroy(executable);
  if (!s) return true;
  if (tpu_env_log_enabled("programs"))
    fprintf(stderr, "torchtpu: %s off, its probe failed: %s\n", what, tpu_status_message(s));
  tpu_status_free(s);
  return false;
}

/* The call's attribute `name` of kind `type`, or NULL. */
static const void* find_attr(const XLA_FFI_CallFrame* frame, const char* name,
                             XLA_FFI_AttrType type) {
  for (int64_t i = 0; i < frame->attrs.size; i++) {
    const XLA_FFI_ByteSpan* key = frame->attrs.names[i];
    if (frame->attrs.types[i] == type && key->len == strlen(name) &&
        memcmp(key->ptr, name, key->len) == 0)
      return frame->attrs.attrs[i];
  }
  return NULL;
}

bool tpu_hostffi_scalar_attr(const XLA_FFI_CallFrame* frame, const char* name,
                             XLA_FFI_DataType dtype, void* out) {
  const XLA_FFI_Scalar* v = find_attr(frame, name, XLA_FFI_AttrType_SCALAR);
  if (!v || v->dtype != dtype) return false;
  memcpy(out, v->value, dtype == XLA_FFI_DataType_F32 ? 4 : 8);
  return true;
}

int tpu_hostffi_int_array_attr(const XLA_FFI_CallFrame* frame, const char* name, int64_t* out,
                               int max) {
  const XLA_FFI_Array* a = find_attr(frame, name, XLA_FFI_AttrType_ARRAY);
  if (!a || a->dtype != XLA_FFI_DataType_S64 || a->size > (size_t)max) return -1;
  memcpy(out, a->data, a->size * sizeof(int64_t));
  return (int)a->size;
}

int tpu_hostffi_marker_words(const char* p, const char* eol, const char** word, size_t* len,
                             int max) {
  const char* quote = memchr(p, '"', (size_t)(eol - p));
  if (!quote) return -1;
  int n = 0;
  while (p < quote) {
    const char* e = memchr(p, ' ', (size_t)(quote - p));
    if (!e) e = quote;
    if (e == p || n == max) return -1;
    word[n] = p;
    len[n++] = (size_t)(e - p);
    p = e < quote ? e + 1 : e;
  }
  return n;
}

void tpu_hostffi_append_layout(tpu_strbuf_t* sb, int rank) {
  tpu_strbuf_append(sb, "dense<[");
  for (int d = rank - 1; d >= 0; d--) tpu_strbuf_appendf(sb, "%d%s", d, d ? ", " : "");
  tpu_strbuf_appendf(sb, "]> : tensor<%dxindex>", rank);
}

bool tpu_hostffi_result_type(const char* line, const char* eol, tpu_hlo_type_t* t) {
  const char* arrow = NULL;
  for (const char* p = line; (p = memmem(p, (size_t)(eol - p), ") -> ", 5)); p += 5) arrow = p;
  if (!arrow) return false;
  tpu_status_t s = tpu_hlo_parse_type(arrow + 5, (size_t)(eol - arrow - 5), t);
  if (s) tpu_status_free(s);
  return !s;
}

void tpu_hostffi_append_results(tpu_strbuf_t* sb, int indent, const char* prefix,
                                const char* call, int call_len, const char* const* names,
                                const size_t* lens, const tpu_hlo_type_t* const* types, int n) {
  for (int i = 0; i < n; i++) {
    tpu_strbuf_appendf(sb, "%*s%.*s = \"stablehlo.reshape\"(%%%s%.*s#%d) : (", indent, "",
                       (int)lens[i], names[i], prefix, call_len, call, i);
    tpu_hlo_type_append(sb, types[i]);
    tpu_strbuf_append(sb, ") -> ");
    tpu_hlo_type_append(sb, types[i]);
    if (i < n - 1) tpu_strbuf_append(sb, "\n");
  }
}

int tpu_hostffi_int_list(const char* p, const char* end, char close, int64_t* out, int cap) {
  int n = 0;
  while (p < end && *p != close) {
    if (*p == ' ' || *p == ',') {
      p++;
      continue;
    }
    char* next;
    long long v = strtoll(p, &next, 10);
    if (next == p || n == cap) return -1;
    out[n++] = v;
    p = next;
  }
  return p < end ? n : -1;
}

bool tpu_hostffi_defines(const char* line, const char* eol, const char* name, size_t len) {
  while (line < eol && *line == ' ') line++;
  return (size_t)(eol - line) > len + 3 && memcmp(line, name, len) == 0 &&
         memcmp(line + len, " = ", 3) == 0;
}

/* One function [fn, fn_end) into sb; whether a line of it was rewritten. */
static bool rewrite_function(const tpu_hostffi_rewriter_t* r, tpu_strbuf_t* sb, const char* fn,
                             const char* fn_end) {
  enum { kMaxPlans = 256 };
  char* plans = NULL;
  int np = 0;
  size_t mark_len = strlen(r->mark);
  for (const char* line = fn; line < fn_end;) {
    const char* eol = memchr(line, '\n', (size_t)(fn_end - line));
    if (!eol) eol = fn_end;
    if (np < kMaxPlans && memmem(line, (size_t)(eol - line), r->mark, mark_len)) {
      if (!plans) plans = malloc(kMaxPlans * r->plan_size);
      if (plans && r->plan_line(plans + (size_t)np * r->plan_size, fn, fn_end, line, eol)) np++;
    }
    line = eol + 1;
  }
  if (!np) {
    free(plans);
    return false;
  }
#define PLAN(i) (plans + (size_t)(i) * r->plan_size)
  const char* copied = fn;
  int next = 0;
  for (const char* line = fn; line < fn_end;) {
    const char* eol = memchr(line, '\n', (size_t)(fn_end - line));
    if (!eol) eol = fn_end;
    bool drop = false;
    for (int i = next; i < np && !drop && r->drops; i++) drop = r->drops(PLAN(i), line, eol);
    bool planned = next < np && *(const char* const*)PLAN(next) == line;
    if (drop || planned) {
      tpu_strbuf_append_n(sb, copied, (size_t)(line - copied));
      if (drop) {
        copied = eol < fn_end ? eol + 1 : eol;
      } else {
        r->append(sb, PLAN(next++));
        copied = eol;
      }
    }
    line = eol + 1;
  }
#undef PLAN
  tpu_strbuf_append_n(sb, copied, (size_t)(fn_end - copied));
  free(plans);
  return true;
}

tpu_status_t tpu_hostffi_rewrite(const tpu_hostffi_rewriter_t* r, const char* text, size_t len,
                                 char** out_text, size_t* out_len) {
  *out_text = NULL;
  *out_len = 0;
  const char* end = text + len;
  if (!memmem(text, len, r->mark, strlen(r->mark))) return NULL;
  tpu_strbuf_t sb = {0};
  bool changed = false;
  for (const char* fn = text; fn < end;) {
    const char* next = memmem(fn + 1, (size_t)(end - fn - 1), "\n  func.func", 12);
    const char* fn_end = next ? next + 1 : end;
    if (rewrite_function(r, &sb, fn, fn_end)) changed = true;
    else tpu_strbuf_append_n(&sb, fn, (size_t)(fn_end - fn));
    fn = fn_end;
  }
  if (!changed) {
    tpu_strbuf_free(&sb);
    return NULL;
  }
  char* out = tpu_strbuf_take(&sb, out_len);
  if (!out) return tpu_status_oom(r->what);
  *out_text = out;
  return NULL;
}
