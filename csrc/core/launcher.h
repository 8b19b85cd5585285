/* The launch queue: Strict eager executions handed to one host thread that
 * calls PJRT, so the thread running the user's Python prepares the next op
 * while the plugin executes this one.
 *
 * Why: on a cache hit, PJRT's Execute (argument holds, events, output
 * allocation; for the CPU plugin also the computation itself) is half an
 * op's host time. Queued, the caller gets pending result buffers at once
 * (type and shape are known from the program) and goes on; the worker
 * fills them in order. Anything that needs a result's contents (a copy to
 * the host, a direct execution, synchronize) waits for that result only.
 *
 * The queue is used only while ops arrive back to back (the worker stays
 * awake for a short while after its last item): a lone op followed by a
 * synchronize runs directly, with no thread hand-off in its latency.
 * Off with TORCHTPU_LAUNCHER=0, and on hosts with one CPU. Errors of a
 * queued execution fail its results (readers get the error, naming the
 * op) and are reported by the device's next synchronize.
 *
 * Layering: the launcher sits above program.h and runtime.h and calls down
 * only; they wait for or stop the queue through the hooks it registers
 * (tpu_runtime_set_queue_hooks) before its first queued item. */
#ifndef TORCHTPU_CORE_LAUNCHER_H_
#define TORCHTPU_CORE_LAUNCHER_H_

#include <stdbool.h>

#include "program.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `program` like tpu_program_execute (borrowed args, new buffers in
 * out_results), queued when the queue is in use (results then pending,
 * see tpu_buffer_make_pending), directly otherwise. `op_name` names the op
 * in a queued execution's error; it must outlive the execution (a static
 * or interned string). */
tpu_status_t tpu_launcher_execute(tpu_program_t* program, int device_index,
                                  tpu_buffer_t* const* args, int nargs,
                                  tpu_buffer_t** out_results, const char* op_name);

/* Waits until everything queued so far has executed. */
void tpu_launcher_drain(void);

/* Whether queued launches are allowed (TORCHTPU_LAUNCHER, CPU count), and
 * a switch for tests and benchmarks; switching off drains first. */
bool tpu_launcher_enabled(void);
void tpu_launcher_set_enabled(bool enabled);

/* Testing: queue every execution, not only those arriving back to back of
 * programs the plugin has shown to run inside its execute call. */
void tpu_launcher_set_always_queue(bool always);

/* Items queued and executions done through the queue since start-up. */
long tpu_launcher_queued(void);

/* Drains and stops the worker (runtime shutdown); it restarts on demand. */
void tpu_launcher_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
