#include "repeat.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* How many earlier positions of the current symbol are tried as the start
 * of the second stretch: enough for an op that recurs a few dozen times in
 * a step (an add per layer) without making a push cost more than O(1). */
#define CANDIDATES 64
#define LAST_BUCKETS 1024
#define BASE 0x9E3779B97F4A7C15ull

struct tpu_repeat_s {
  int min_period;
  int any_after;
  int n, cap;
  uint64_t* symbols;
  uint64_t* prefix; /* prefix[i] = hash of symbols[0..i) */
  uint64_t* power;  /* power[i] = BASE^i */
  int* prev_same;   /* previous position with the same symbol, or -1 */
  /* Last position of each symbol, direct-mapped by hash (a collision only
   * shortens a candidate chain; matches are always confirmed). */
  uint64_t last_symbol[LAST_BUCKETS];
  int last_pos[LAST_BUCKETS];
};

tpu_status_t tpu_repeat_create(int min_period, int any_after, tpu_repeat_t** out) {
  tpu_repeat_t* r = calloc(1, sizeof *r);
  if (!r) return tpu_status_oom(NULL);
  r->min_period = min_period < 1 ? 1 : min_period;
  r->any_after = any_after < 0 ? 0 : any_after;
  tpu_repeat_reset(r);
  *out = r;
  return NULL;
}

void tpu_repeat_destroy(tpu_repeat_t* r) {
  if (!r) return;
  free(r->symbols);
  free(r->prefix);
  free(r->power);
  free(r->prev_same);
  free(r);
}

void tpu_repeat_reset(tpu_repeat_t* r) {
  r->n = 0;
  for (int i = 0; i < LAST_BUCKETS; i++) r->last_pos[i] = -1;
}

int tpu_repeat_length(const tpu_repeat_t* r) { return r->n; }

static bool grow(tpu_repeat_t* r) {
  int cap = r->cap ? r->cap * 2 : 256;
  uint64_t* s = realloc(r->symbols, sizeof *s * (size_t)cap);
  if (s) r->symbols = s;
  uint64_t* p = realloc(r->prefix, sizeof *p * (size_t)(cap + 1));
  if (p) r->prefix = p;
  uint64_t* w = realloc(r->power, sizeof *w * (size_t)(cap + 1));
  if (w) r->power = w;
  int* q = realloc(r->prev_same, sizeof *q * (size_t)cap);
  if (q) r->prev_same = q;
  if (!s || !p || !w || !q) return false;
  r->cap = cap;
  return true;
}

/* Hash of symbols[a..b). */
static uint64_t stretch(const tpu_repeat_t* r, int a, int b) {
  return r->prefix[b] - r->prefix[a] * r->power[b - a];
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

int tpu_repeat_push(tpu_repeat_t* r, uint64_t symbol) {
  if (r->n == r->cap && !grow(r)) return 0;
  if (r->n == 0) {
    r->prefix[0] = 0;
    r->power[0] = 1;
  }
  int i = r->n++;
  uint64_t h = mix(symbol);
  r->symbols[i] = symbol;
  r->prefix[i + 1] = r->prefix[i] * BASE + h;
  r->power[i + 1] = r->power[i] * BASE;
  int bucket = (int)(h % LAST_BUCKETS);
  int prev = r->last_pos[bucket] >= 0 && r->last_symbol[bucket] == symbol ? r->last_pos[bucket] : -1;
  r->prev_same[i] = prev;
  r->last_symbol[bucket] = symbol;
  r->last_pos[bucket] = i;
  /* The second stretch ends with symbol i; the first ends with an earlier
   * occurrence p of it, so the period is L = i - p. */
  int n = r->n;
  if (n < r->any_after) {
    /* Only the whole sequence: one candidate, L = n / 2. */
    int L = n / 2;
    if (n % 2 || L < r->min_period || stretch(r, 0, L) != stretch(r, L, n)) return 0;
    return memcmp(r->symbols, r->symbols + L, sizeof(uint64_t) * (size_t)L) == 0 ? L : 0;
  }
  int tries = 0;
  for (int p = prev; p >= 0 && tries < CANDIDATES; p = r->prev_same[p], tries++) {
    int L = i - p;
    if (2 * L > n) break;
    if (L < r->min_period) continue;
    if (stretch(r, n - 2 * L, n - L) != stretch(r, n - L, n)) continue;
    if (memcmp(r->symbols + n - 2 * L, r->symbols + n - L, sizeof(uint64_t) * (size_t)L) == 0)
      return L;
  }
  return 0;
}
