#include "recompile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "metrics.h"

/* name -> the parts of its last key, '\n'-joined. Few names (ops), so a
 * list is enough. */
typedef struct seen_s {
  struct seen_s* next;
  char* name;
  char* parts;
} seen_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static seen_t* g_seen;

bool tpu_recompile_logging(void) {
  static int enabled = -1;
  if (enabled < 0) {
    enabled = tpu_env_log_enabled("recompiles");
  }
  return enabled == 1;
}

static char* join(const char* const* parts, int n) {
  size_t len = 1;
  for (int i = 0; i < n; i++) len += strlen(parts[i]) + 1;
  char* out = malloc(len);
  if (!out) return NULL;
  char* p = out;
  for (int i = 0; i < n; i++) {
    size_t m = strlen(parts[i]);
    memcpy(p, parts[i], m);
    p += m;
    *p++ = '\n';
  }
  *p = 0;
  return out;
}

/* Line k of a '\n'-joined text (length in *len), or NULL past the end. */
static const char* line_at(const char* text, int k, size_t* len) {
  for (int i = 0; i < k && text; i++) {
    text = strchr(text, '\n');
    if (text) text++;
  }
  if (!text || !*text) return NULL;
  *len = strcspn(text, "\n");
  return text;
}

static char* describe_change(const char* before, const char* const* parts, int n) {
  for (int k = 0; k < n; k++) {
    size_t len = 0;
    const char* old = line_at(before, k, &len);
    if (old && strlen(parts[k]) == len && memcmp(old, parts[k], len) == 0) continue;
    /* "arg 0: f32[4,5]" -> "arg 0: f32[4,5] -> f32[4,7]" when both share
     * the label before ':'. */
    const char* colon = strchr(parts[k], ':');
    size_t label = colon ? (size_t)(colon - parts[k]) + 1 : 0;
    size_t need = (old ? len : 6) + strlen(parts[k]) + 8;
    char* out = malloc(need);
    if (!out) return NULL;
    if (old && label && len > label && memcmp(old, parts[k], label) == 0)
      snprintf(out, need, "%.*s ->%s", (int)len, old, parts[k] + label);
    else if (old)
      snprintf(out, need, "%.*s -> %s", (int)len, old, parts[k]);
    else
      snprintf(out, need, "new %s", parts[k]);
    return out;
  }
  return strdup("same key (the cache was cleared)");
}

char* tpu_recompile_note(const char* name, const char* const* parts, int num_parts) {
  char* joined = join(parts, num_parts);
  if (!joined) return NULL;
  char* change = NULL;
  pthread_mutex_lock(&g_lock);
  seen_t* s = g_seen;
  while (s && strcmp(s->name, name) != 0) s = s->next;
  if (s) {
    change = describe_change(s->parts, parts, num_parts);
    free(s->parts);
    s->parts = joined;
  } else {
    s = calloc(1, sizeof *s);
    if (s) s->name = strdup(name);
    if (s && s->name) {
      s->parts = joined;
      s->next = g_seen;
      g_seen = s;
    } else {
      if (s) free(s);
      free(joined);
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (change) tpu_metrics_add("recompiles", 1);
  return change;
}

void tpu_recompile_reset(void) {
  pthread_mutex_lock(&g_lock);
  while (g_seen) {
    seen_t* next = g_seen->next;
    free(g_seen->name);
    free(g_seen->parts);
    free(g_seen);
    g_seen = next;
  }
  pthread_mutex_unlock(&g_lock);
}
