/* A growable, always NUL-terminated string for the HLO printer. Allocation
 * failure is remembered (`failed`) instead of reported per call, so printing
 * code stays flat and the owner checks once. */
#ifndef TORCHTPU_CORE_HLO_STRBUF_H_
#define TORCHTPU_CORE_HLO_STRBUF_H_

#include <stdbool.h>
#include <stddef.h>

typedef struct tpu_strbuf_s {
  char* data; /* NULL until the first append; then NUL-terminated */
  size_t len;
  size_t cap;
  bool failed; /* an allocation failed; contents are incomplete */
} tpu_strbuf_t;

void tpu_strbuf_append(tpu_strbuf_t* sb, const char* text);
void tpu_strbuf_append_n(tpu_strbuf_t* sb, const char* text, size_t n);
void tpu_strbuf_appendf(tpu_strbuf_t* sb, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tpu_strbuf_append_char(tpu_strbuf_t* sb, char c, size_t count);
/* Hands the text to the caller (malloc'd, "" when empty) and resets sb.
 * NULL if sb failed or allocation fails. */
char* tpu_strbuf_take(tpu_strbuf_t* sb, size_t* out_len);
void tpu_strbuf_free(tpu_strbuf_t* sb);

#endif
