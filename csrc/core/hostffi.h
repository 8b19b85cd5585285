/* Plumbing shared by the CPU plugin's host kernels (hostgemm, hostrow):
 * typed-FFI errors and metadata, and work cut in parts on the thread pool
 * XLA runs the program on. */
#ifndef TORCHTPU_CORE_HOSTFFI_H_
#define TORCHTPU_CORE_HOSTFFI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hlo/strbuf.h"
#include "hlo/type.h"
#include "pjrt/pjrt.h"
#include "status.h"
#include "xla/ffi/api/c_api.h"

/* Most parts a handler cuts its work into. */
enum { TPU_HOSTFFI_MAX_PARTS = 16 };

/* An INTERNAL error carrying message (a literal: XLA copies it). */
XLA_FFI_Error* tpu_hostffi_error(const XLA_FFI_CallFrame* frame, const char* message);

/* XLA asks a handler which FFI version it was built against (a call frame
 * carrying the metadata extension) when it is registered; true when this
 * frame was that question, answered. */
bool tpu_hostffi_answer_metadata(XLA_FFI_CallFrame* frame);

/* Threads of the pool XLA runs this program's work on, in
 * [1, TPU_HOSTFFI_MAX_PARTS]; 1 when unknown. */
int tpu_hostffi_threads(const XLA_FFI_CallFrame* frame);

/* Whether the host kernels may use their AVX-512 forms: the CPU has
 * AVX-512F (and AVX2+FMA) and tests have not turned them off
 * (tpu_hostffi_set_wide(false) runs the AVX2 forms, to test both). */
bool tpu_hostffi_wide(void);
void tpu_hostffi_set_wide(bool allowed);

/* Runs work(ctx, i) for every i in [0, parts): parts are offered to the
 * pool's threads, and this thread takes whichever no pool thread has
 * started (all of them when the pool is busy: no thread is ever added).
 * Returns when every part is done. parts <= TPU_HOSTFFI_MAX_PARTS. */
void tpu_hostffi_parallel(const XLA_FFI_CallFrame* frame, int parts,
                          void (*work)(void* ctx, int part), void* ctx);

/* Registers handlers[i] as typed-FFI custom call targets[i] with the
 * client's plugin, then compiles `probe` (a module calling one of them):
 * XLA drops a handler whose metadata it rejects without a word, and then
 * every program with the call would fail to compile. true when both
 * worked; else the calls stay off (`what` names them in the programs log). */
bool tpu_hostffi_register(tpu_client_t* client, const char* const* targets,
                          XLA_FFI_Handler* const* handlers, int n, const char* probe,
                          const char* what);

/* The float32 scalar or int64 attribute `name` of the call (its
 * backend_config dictionary) into *out; false when absent or of another
 * type. */
bool tpu_hostffi_scalar_attr(const XLA_FFI_CallFrame* frame, const char* name,
                             XLA_FFI_DataType dtype, void* out);

/* The int64 array attribute `name` (array<i64: ...>) into out: its
 * length, or -1 when absent, of another type or longer than max. */
int tpu_hostffi_int_array_attr(const XLA_FFI_CallFrame* frame, const char* name, int64_t* out,
                               int max);

/* ---- the program-text rewrites' pieces ---- */

/* A marker's space-separated words, from p (just after its opening quote)
 * to the closing quote before eol: up to max, each [word[i], word[i] +
 * len[i]). The count, or -1 when it is not one (no closing quote, an empty
 * word, more than max). */
int tpu_hostffi_marker_words(const char* p, const char* eol, const char** word, size_t* len,
                             int max);

/* "dense<[r-1, ..., 0]> : tensor<rxindex>": row-major, for a handler. */
void tpu_hostffi_append_layout(tpu_strbuf_t* sb, int rank);

/* The result type of line [line, eol) ("... -> T" at its end). */
bool tpu_hostffi_result_type(const char* line, const char* eol, tpu_hlo_type_t* t);

/* The lines naming results 0..n-1 of call `%<prefix><call>` (call the
 * marked line's name without its %): `<names[i]> =
 * "stablehlo.reshape"(%<prefix><call>#i)`, identities XLA folds; indent
 * spaces before each, lines joined by newlines, none after the last. */
void tpu_hostffi_append_results(tpu_strbuf_t* sb, int indent, const char* prefix,
                                const char* call, int call_len, const char* const* names,
                                const size_t* lens, const tpu_hlo_type_t* const* types, int n);

/* The integers in [p, end) up to the character `close` ("1, 2]" of
 * "[1, 2]", " 1, 2>" of "array<i64: 1, 2>"), separated by commas and
 * spaces, into out: their count, or -1 when something else comes first,
 * there are more than cap, or `close` never comes. */
int tpu_hostffi_int_list(const char* p, const char* end, char close, int64_t* out, int cap);

/* Whether line [line, eol) defines the value [name, name + len). */
bool tpu_hostffi_defines(const char* line, const char* eol, const char* name, size_t len);

/* A rewrite of marked lines (hostrow's, hostattn's), function by function
 * (SSA names are per function: a fused program has one function per op).
 * Each line holding `mark` is offered to plan_line, which fills a plan of
 * plan_size bytes (its line first: `const char* line` must be the plan's
 * first member) or declines; each planned line is replaced by append's
 * text, and a line that `drops` says defines a result of a plan still
 * ahead (a call defining several results) is left out. */
typedef struct tpu_hostffi_rewriter_s {
  const char* mark;
  size_t plan_size;
  bool (*plan_line)(void* plan, const char* fn, const char* fn_end, const char* line,
                    const char* eol);
  bool (*drops)(const void* plan, const char* line, const char* eol); /* may be NULL */
  void (*append)(tpu_strbuf_t* sb, const void* plan);
  const char* what; /* the out-of-memory error's words: "rewriting ..." */
} tpu_hostffi_rewriter_t;

/* The text rewritten by r: *out_text NULL when no line was; else a
 * malloc'ed copy (*out_len bytes, NUL-terminated) the caller frees. */
tpu_status_t tpu_hostffi_rewrite(const tpu_hostffi_rewriter_t* r, const char* text, size_t len,
                                 char** out_text, size_t* out_len);

#endif
