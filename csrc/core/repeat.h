/* The loop-boundary heuristic of DeferAndFuse: watches the sequence of ops
 * a deferred run records and says when it ends with the same stretch of ops
 * twice in a row. A training loop without host syncs repeats its step's
 * ops, so cutting there makes every later run the same program.
 *
 * Where the square may sit: a model's layers repeat too, so a square
 * anywhere ("W X X") would cut a step between two layers. Until the
 * sequence is `any_after` long only the whole sequence counts ("X X": the
 * run began on a step boundary, or on any fixed phase of a periodic loop);
 * after that, a square anywhere does (a run that began with a one-off
 * warm-up, e.g. an optimizer's first step, still finds the loop).
 *
 * Each op is a 64-bit symbol (its engine entry: same op, same signature).
 * A push costs O(1) amortised: prefix hashes compare two stretches in
 * constant time, candidates are the last few earlier positions of the same
 * symbol, and a hash match is confirmed symbol by symbol. */
#ifndef TORCHTPU_CORE_REPEAT_H_
#define TORCHTPU_CORE_REPEAT_H_

#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_repeat_s tpu_repeat_t;

/* Repeats shorter than min_period symbols are ignored: a loop over a few
 * parameters is not a step boundary. */
tpu_status_t tpu_repeat_create(int min_period, int any_after, tpu_repeat_t** out);
void tpu_repeat_destroy(tpu_repeat_t* r);
/* Forgets the sequence (after a flush). */
void tpu_repeat_reset(tpu_repeat_t* r);
/* Appends a symbol. Returns L > 0 when the sequence now ends with two
 * equal stretches of L symbols (L >= min_period; the shortest such L) that
 * are the whole sequence or, once it is any_after long, anywhere; else 0
 * (also on allocation failure: the heuristic is advisory). */
int tpu_repeat_push(tpu_repeat_t* r, uint64_t symbol);
int tpu_repeat_length(const tpu_repeat_t* r);

#ifdef __cplusplus
}
#endif
#endif
