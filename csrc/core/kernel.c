#include "kernel.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/signature.h"
#include "hlo/strbuf.h"
#include "lower/emit.h"

#define MAX_KERNEL_IO 64

struct tpu_kernel_s {
  char* name;
  char* functions; /* renamed, all private */
  char entry[48];  /* "k<id>_main" */
  int num_params, num_results;
  tpu_hlo_type_t params[MAX_KERNEL_IO];
  tpu_hlo_type_t results[MAX_KERNEL_IO];
};

static atomic_int g_next_id = 1;

static tpu_status_t bad(const char* name, const char* why) {
  return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "kernel '%s': %s", name, why);
}

static bool ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '.';
}

/* The end of the bracketed item starting at p (p points at an opening
 * '(' '<' '{' or '['); quotes skipped. NULL if unbalanced. */
static const char* match_close(const char* p, const char* end) {
  int depth = 0;
  for (; p < end; p++) {
    char c = *p;
    if (c == '"') {
      for (p++; p < end && *p != '"'; p++)
        if (*p == '\\') p++;
      continue;
    }
    if (c == '(' || c == '<' || c == '{' || c == '[') depth++;
    if (c == ')' || c == '>' || c == '}' || c == ']') {
      if (--depth == 0) return p;
    }
  }
  return NULL;
}

/* One "tensor<...>" at p (after spaces); sets *next past it. */
static tpu_status_t parse_one_type(const char* name, const char* p, const char* end,
                                   tpu_hlo_type_t* out, const char** next) {
  while (p < end && isspace((unsigned char)*p)) p++;
  if ((size_t)(end - p) < 7 || strncmp(p, "tensor<", 7) != 0)
    return bad(name, "@main's results must be static tensors");
  const char* close = match_close(p + 6, end);
  if (!close) return bad(name, "unbalanced result type");
  TPU_RETURN_IF_ERROR(tpu_hlo_parse_type(p, (size_t)(close - p + 1), out));
  *next = close + 1;
  return NULL;
}

/* Result types of @main: "-> tensor<...>" or "-> (tensor<...> {attrs}, ...)". */
static tpu_status_t parse_results(tpu_kernel_t* k, const char* main, const char* end) {
  const char* open = strchr(main, '(');
  if (!open || open >= end) return bad(k->name, "@main has no parameter list");
  const char* close = match_close(open, end);
  if (!close) return bad(k->name, "@main's parameter list is unbalanced");
  const char* p = close + 1;
  while (p < end && isspace((unsigned char)*p)) p++;
  if (end - p < 2 || p[0] != '-' || p[1] != '>') return bad(k->name, "@main returns nothing");
  p += 2;
  while (p < end && isspace((unsigned char)*p)) p++;
  if (p < end && *p == '(') {
    const char* list_end = match_close(p, end);
    if (!list_end) return bad(k->name, "@main's result list is unbalanced");
    p++;
    while (p < list_end) {
      if (k->num_results == MAX_KERNEL_IO) return bad(k->name, "too many results");
      TPU_RETURN_IF_ERROR(parse_one_type(k->name, p, list_end, &k->results[k->num_results], &p));
      k->num_results++;
      while (p < list_end && isspace((unsigned char)*p)) p++;
      if (p < list_end && *p == '{') { /* result attributes */
        p = match_close(p, list_end);
        if (!p) return bad(k->name, "unbalanced result attributes");
        p++;
      }
      while (p < list_end && (isspace((unsigned char)*p) || *p == ',')) p++;
    }
  } else {
    TPU_RETURN_IF_ERROR(parse_one_type(k->name, p, end, &k->results[0], &p));
    k->num_results = 1;
  }
  return NULL;
}

/* Symbols defined by func.func in [text, end). */
typedef struct {
  char names[32][128];
  int n;
} symbols_t;

static void collect_symbols(const char* text, const char* end, symbols_t* syms) {
  for (const char* p = text; (p = strstr(p, "func.func")) && p < end; p += 9) {
    const char* at = strchr(p, '@');
    if (!at || at >= end) break;
    size_t n = 0;
    while (at + 1 + n < end && ident_char(at[1 + n])) n++;
    if (n && n < 128 && syms->n < 32) {
      memcpy(syms->names[syms->n], at + 1, n);
      syms->names[syms->n][n] = 0;
      syms->n++;
    }
  }
}

tpu_status_t tpu_kernel_create(const char* name, const char* text, size_t len,
                               tpu_kernel_t** out_kernel) {
  *out_kernel = NULL;
  if (!name) name = "?";
  if (!text || !len) return bad(name, "empty StableHLO text");
  tpu_kernel_t* k = calloc(1, sizeof *k);
  if (!k) return tpu_status_oom(NULL);
  k->name = strdup(name);
  const char* end = text + len;
  size_t nparams = 0;
  tpu_status_t s = tpu_hlo_parse_main_params(text, len, k->params, MAX_KERNEL_IO, &nparams);
  if (s) {
    tpu_status_t e = bad(name, tpu_status_message(s));
    tpu_status_free(s);
    tpu_kernel_destroy(k);
    return e;
  }
  if (nparams > MAX_KERNEL_IO) {
    tpu_kernel_destroy(k);
    return bad(name, "too many parameters");
  }
  k->num_params = (int)nparams;
  const char* main = strstr(text, "@main(");
  if (!main || main >= end) {
    tpu_kernel_destroy(k);
    return bad(name, "no func.func @main");
  }
  if ((s = parse_results(k, main, end))) {
    tpu_kernel_destroy(k);
    return s;
  }
  /* The functions: from the first func.func to the module's closing brace
   * (or the end, for bare functions). */
  const char* first = strstr(text, "func.func");
  const char* body_end = end;
  const char* mod = strstr(text, "module");
  if (mod && mod < first) {
    body_end = end;
    while (body_end > first && body_end[-1] != '}') body_end--;
    if (body_end > first) body_end--; /* drop the module's '}' */
  }
  symbols_t syms = {0};
  collect_symbols(first, body_end, &syms);
  int id = atomic_fetch_add(&g_next_id, 1);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "k%d_", id);
  snprintf(k->entry, sizeof k->entry, "k%d_main", id);
  tpu_strbuf_t sb = {0};
  for (const char* p = first; p < body_end;) {
    if (*p == '@') {
      size_t n = 0;
      while (p + 1 + n < body_end && ident_char(p[1 + n])) n++;
      bool ours = false;
      for (int i = 0; i < syms.n && !ours; i++)
        ours = strlen(syms.names[i]) == n && memcmp(syms.names[i], p + 1, n) == 0;
      tpu_strbuf_append_char(&sb, '@', 1);
      if (ours) tpu_strbuf_append(&sb, prefix);
      tpu_strbuf_append_n(&sb, p + 1, n);
      p += 1 + n;
      continue;
    }
    if (strncmp(p, "func.func public ", 17) == 0) {
      tpu_strbuf_append(&sb, "func.func private ");
      p += 17;
      continue;
    }
    if (strncmp(p, "func.func @", 11) == 0) {
      tpu_strbuf_append(&sb, "func.func private ");
      p += 10;
      continue;
    }
    tpu_strbuf_append_char(&sb, *p, 1);
    p++;
  }
  tpu_strbuf_append_char(&sb, '\n', 1);
  k->functions = tpu_strbuf_take(&sb, NULL);
  tpu_strbuf_free(&sb);
  if (!k->functions || !k->name) {
    tpu_kernel_destroy(k);
    return tpu_status_oom(NULL);
  }
  *out_kernel = k;
  return NULL;
}

void tpu_kernel_destroy(tpu_kernel_t* k) {
  if (!k) return;
  free(k->name);
  free(k->functions);
  free(k);
}

int tpu_kernel_num_params(const tpu_kernel_t* k) { return k->num_params; }
int tpu_kernel_num_results(const tpu_kernel_t* k) { return k->num_results; }
tpu_hlo_type_t tpu_kernel_param(const tpu_kernel_t* k, int i) { return k->params[i]; }
tpu_hlo_type_t tpu_kernel_result(const tpu_kernel_t* k, int i) { return k->results[i]; }
const char* tpu_kernel_functions(const tpu_kernel_t* k) { return k->functions; }
const char* tpu_kernel_entry(const tpu_kernel_t* k) { return k->entry; }

tpu_status_t tpu_kernel_flat_module(const tpu_kernel_t* k, char** out_text, size_t* out_len) {
  tpu_hlo_builder_t* b = NULL;
  TPU_RETURN_IF_ERROR(tpu_hlo_builder_create(&b));
  tpu_hlo_value_t args[MAX_KERNEL_IO], res[MAX_KERNEL_IO];
  for (int i = 0; i < k->num_params; i++)
    args[i] = tpu_hlo_arg(b, tpu_hlo_type_flat(&k->params[i]), NULL);
  for (int i = 0; i < k->num_params; i++)
    args[i] = tpu_emit_reshape(b, args[i], k->params[i].dims, k->params[i].rank);
  char attrs[80];
  snprintf(attrs, sizeof attrs, "callee = @%s", k->entry);
  tpu_hlo_op_multi(b, "func.call", args, k->num_params, k->results, k->num_results, attrs, res);
  for (int i = 0; i < k->num_results; i++) {
    int64_t n = tpu_hlo_type_numel(&k->results[i]);
    res[i] = tpu_emit_reshape(b, res[i], &n, 1);
  }
  tpu_hlo_return(b, res, k->num_results);
  tpu_hlo_add_functions(b, k->functions);
  tpu_status_t s = tpu_hlo_builder_finish(b, out_text, out_len);
  tpu_hlo_builder_destroy(b);
  return s;
}
