#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Makes room for `extra` more characters plus the NUL. */
static bool reserve(tpu_strbuf_t* sb, size_t extra) {
  if (sb->failed) return false;
  if (extra > (size_t)-1 / 2 - sb->len) {
    sb->failed = true;
    return false;
  }
  size_t need = sb->len + extra + 1;
  if (need <= sb->cap) return true;
  size_t cap = sb->cap ? sb->cap : 256;
  while (cap < need) cap *= 2;
  char* data = realloc(sb->data, cap);
  if (!data) {
    sb->failed = true;
    return false;
  }
  sb->data = data;
  sb->cap = cap;
  return true;
}

void tpu_strbuf_append_n(tpu_strbuf_t* sb, const char* text, size_t n) {
  if (!reserve(sb, n)) return;
  memcpy(sb->data + sb->len, text, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void tpu_strbuf_append(tpu_strbuf_t* sb, const char* text) {
  tpu_strbuf_append_n(sb, text, strlen(text));
}

void tpu_strbuf_append_char(tpu_strbuf_t* sb, char c, size_t count) {
  if (!reserve(sb, count)) return;
  memset(sb->data + sb->len, c, count);
  sb->len += count;
  sb->data[sb->len] = '\0';
}

void tpu_strbuf_appendf(tpu_strbuf_t* sb, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) {
    sb->failed = true;
  } else if (reserve(sb, (size_t)n)) {
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, args);
    sb->len += (size_t)n;
  }
  va_end(args);
}

char* tpu_strbuf_take(tpu_strbuf_t* sb, size_t* out_len) {
  if (!reserve(sb, 0)) return NULL;
  char* text = sb->data;
  if (out_len) *out_len = sb->len;
  sb->data = NULL;
  sb->len = sb->cap = 0;
  return text;
}

void tpu_strbuf_free(tpu_strbuf_t* sb) {
  free(sb->data);
  sb->data = NULL;
  sb->len = sb->cap = 0;
  sb->failed = false;
}
