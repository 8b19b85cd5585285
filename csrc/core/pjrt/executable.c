#include "executable.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct tpu_executable_s {
  tpu_client_t* client; /* borrowed */
  PJRT_LoadedExecutable* executable;
  /* Portable executables run wherever execute_device says; others only on
   * the device they were compiled for. */
  bool portable;
  int bound_device_index; /* -1 when portable or on several devices */
  /* The client devices a bound program runs on, in PJRT's order (that of
   * its addressable devices, which Execute's argument lists follow). */
  int num_devices; /* 0 when portable */
  int* device_indices;
  /* Whether the program may alias a parameter to a result (donation). When
   * it cannot, executions pass no non-donatable indices: the plugin builds
   * a set of them on every call, a few percent of a small execution. */
  bool may_alias;
  int num_outputs;
  tpu_dtype_t* output_dtypes;
  int* output_ranks;
  int64_t (*output_dims)[TPU_MAX_RANK];
};

/* ---- helpers ----------------------------------------------------------------- */

static void destroy_loaded(const PJRT_Api* api, PJRT_LoadedExecutable* exe) {
  if (!exe) return;
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args);
  args.executable = exe;
  tpu_status_free(TPU_PJRT_CALL(api, PJRT_LoadedExecutable_Destroy, &args));
}

static void destroy_unloaded(const PJRT_Api* api, PJRT_Executable* exe) {
  if (!exe) return;
  TPU_PJRT_ARGS(PJRT_Executable_Destroy_Args, args);
  args.executable = exe;
  tpu_status_free(TPU_PJRT_CALL(api, PJRT_Executable_Destroy, &args));
}

static tpu_status_t get_unloaded(const PJRT_Api* api, PJRT_LoadedExecutable* exe,
                                 PJRT_Executable** out) {
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, args);
  args.loaded_executable = exe;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(api, PJRT_LoadedExecutable_GetExecutable, &args));
  *out = args.executable;
  return NULL;
}

static tpu_status_t oom(void) {
  return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                         "out of memory describing an executable");
}

/* Reads output count, element types and dimensions. */
static tpu_status_t read_outputs(tpu_executable_t* exe, PJRT_Executable* unloaded) {
  const PJRT_Api* api = exe->client->api;
  TPU_PJRT_ARGS(PJRT_Executable_NumOutputs_Args, count);
  count.executable = unloaded;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, PJRT_Executable_NumOutputs, &count));
  if (count.num_outputs > 1u << 20) {
    return tpu_status_make(TPU_STATUS_INTERNAL, "executable reports %zu outputs",
                           count.num_outputs);
  }
  size_t n = count.num_outputs;
  exe->num_outputs = (int)n;
  exe->output_dtypes = calloc(n ? n : 1, sizeof *exe->output_dtypes);
  exe->output_ranks = calloc(n ? n : 1, sizeof *exe->output_ranks);
  exe->output_dims = calloc(n ? n : 1, sizeof *exe->output_dims);
  if (!exe->output_dtypes || !exe->output_ranks || !exe->output_dims) return oom();
  if (n == 0) return NULL;

  TPU_PJRT_ARGS(PJRT_Executable_OutputElementTypes_Args, types);
  types.executable = unloaded;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(api, PJRT_Executable_OutputElementTypes, &types));
  if (types.num_output_types != n || !types.output_types) {
    return tpu_status_make(TPU_STATUS_INTERNAL,
                           "executable has %zu outputs but %zu output types", n,
                           types.num_output_types);
  }
  for (size_t i = 0; i < n; i++) {
    exe->output_dtypes[i] = tpu_pjrt_dtype(types.output_types[i]);
    if (exe->output_dtypes[i] == TPU_DTYPE_INVALID) {
      /* Its results could not be wrapped as tpu_buffer_t: refuse now rather
       * than after an execution has consumed donated inputs. */
      return tpu_status_make(
          TPU_STATUS_UNIMPLEMENTED,
          "output %zu has element type %s, which torchtpu does not support", i,
          tpu_pjrt_buffer_type_name(types.output_types[i]));
    }
  }

  TPU_PJRT_ARGS(PJRT_Executable_OutputDimensions_Args, dims);
  dims.executable = unloaded;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(api, PJRT_Executable_OutputDimensions, &dims));
  if (dims.num_outputs != n || !dims.dim_sizes) {
    return tpu_status_make(TPU_STATUS_INTERNAL,
                           "executable has %zu outputs but %zu output shapes",
                           n, dims.num_outputs);
  }
  const int64_t* next = dims.dims;
  for (size_t i = 0; i < n; i++) {
    size_t rank = dims.dim_sizes[i];
    if (rank > TPU_MAX_RANK) {
      return tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                             "output %zu has rank %zu, more than %d", i, rank,
                             TPU_MAX_RANK);
    }
    exe->output_ranks[i] = (int)rank;
    if (rank) memcpy(exe->output_dims[i], next, rank * sizeof(int64_t));
    next += rank;
  }
  return NULL;
}

/* Decides portability from the devices the executable is bound to (a
 * portable executable is bound to none) and maps them to client devices. */
static tpu_status_t read_devices(tpu_executable_t* exe) {
  const PJRT_Api* api = exe->client->api;
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, args);
  args.executable = exe->executable;
  TPU_RETURN_IF_ERROR(
      TPU_PJRT_CALL(api, PJRT_LoadedExecutable_AddressableDevices, &args));
  size_t n = args.addressable_devices ? args.num_addressable_devices : 0;
  exe->portable = n == 0;
  exe->bound_device_index = -1;
  if (n == 0) return NULL;
  if (n > (size_t)exe->client->device_count) {
    return tpu_status_make(TPU_STATUS_UNIMPLEMENTED,
                           "executable spans %zu devices; the client shows %d",
                           n, exe->client->device_count);
  }
  exe->device_indices = calloc(n, sizeof *exe->device_indices);
  if (!exe->device_indices) return oom();
  exe->num_devices = (int)n;
  for (size_t d = 0; d < n; d++) {
    exe->device_indices[d] = -1;
    for (int i = 0; i < exe->client->device_count; i++)
      if (exe->client->devices[i].device == args.addressable_devices[d])
        exe->device_indices[d] = i;
    if (exe->device_indices[d] < 0)
      return tpu_status_make(TPU_STATUS_INTERNAL,
                             "executable is bound to a device the client does "
                             "not list");
  }
  if (n == 1) exe->bound_device_index = exe->device_indices[0];
  return NULL;
}

/* Takes ownership of `loaded` and describes it. */
static tpu_status_t wrap_loaded(tpu_client_t* client,
                                PJRT_LoadedExecutable* loaded,
                                tpu_executable_t** out_executable) {
  const PJRT_Api* api = client->api;
  tpu_executable_t* exe = calloc(1, sizeof *exe);
  if (!exe) {
    destroy_loaded(api, loaded);
    return oom();
  }
  exe->client = client;
  exe->executable = loaded;
  exe->may_alias = true; /* until the program text says otherwise */
  tpu_pjrt_track(TPU_PJRT_HANDLE_EXECUTABLE, 1);

  PJRT_Executable* unloaded = NULL;
  tpu_status_t status = get_unloaded(api, loaded, &unloaded);
  if (!status) status = read_outputs(exe, unloaded);
  destroy_unloaded(api, unloaded);
  if (!status) status = read_devices(exe);
  if (status) {
    tpu_executable_destroy(exe);
    return status;
  }
  *out_executable = exe;
  return NULL;
}

/* ---- compile / deserialize --------------------------------------------------- */

/* The CPU plugin reports programs that do not parse or verify as INTERNAL.
 * Such failures carry MLIR diagnostics ("<loc>: error: <what>"): report
 * them as the caller's INVALID_ARGUMENT, keeping the message. */
static tpu_status_t classify_compile_error(tpu_status_t status) {
  tpu_status_code_t code = tpu_status_code(status);
  if (code != TPU_STATUS_INTERNAL) return status;
  const char* message = tpu_status_message(status);
  if (!strstr(message, ": error: ")) return status;
  tpu_status_t reclassified =
      tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "%s", message);
  tpu_status_free(status);
  return reclassified;
}

tpu_status_t tpu_executable_compile(tpu_client_t* client, const char* mlir,
                                    size_t mlir_len,
                                    const tpu_compile_options_t* options,
                                    tpu_executable_t** out_executable) {
  if (!out_executable || !client || !mlir) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "client, mlir and out_executable must not be NULL");
  }
  *out_executable = NULL;
  if (mlir_len == 0) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "empty program");
  }
  TPU_RETURN_IF_ERROR(tpu_compile_options_check(options));
  /* Single-device options fit on the stack; device lists may not. */
  uint8_t stack_encoded[64];
  size_t encoded_len = tpu_compile_options_encode(options, NULL, 0);
  uint8_t* encoded =
      encoded_len <= sizeof stack_encoded ? stack_encoded : malloc(encoded_len);
  if (!encoded) return oom();
  tpu_compile_options_encode(options, encoded, encoded_len);

  static const char kFormat[] = "mlir";
  TPU_PJRT_ARGS(PJRT_Program, program);
  program.code = (char*)mlir; /* not written by Compile */
  program.code_size = mlir_len;
  program.format = kFormat;
  program.format_size = sizeof kFormat - 1;

  TPU_PJRT_ARGS(PJRT_Client_Compile_Args, args);
  args.client = client->client;
  args.program = &program;
  args.compile_options = (const char*)encoded;
  args.compile_options_size = encoded_len;
  tpu_status_t status = TPU_PJRT_CALL(client->api, PJRT_Client_Compile, &args);
  if (encoded != stack_encoded) free(encoded);
  if (status) {
    return tpu_status_annotate(classify_compile_error(status),
                               "compiling StableHLO: ");
  }
  TPU_RETURN_IF_ERROR(wrap_loaded(client, args.executable, out_executable));
  tpu_executable_note_text(*out_executable, mlir, mlir_len);
  return NULL;
}

/* The argument attributes through which StableHLO asks XLA to alias or
 * donate a parameter ("tf.aliasing_output", "jax.buffer_donor", and the
 * module-level "mhlo.input_output_alias"). Any mention keeps the
 * conservative path. */
static bool text_may_alias(const char* mlir, size_t len) {
  static const char* const kMarks[] = {"aliasing_output", "buffer_donor", "input_output_alias"};
  for (size_t m = 0; m < sizeof kMarks / sizeof kMarks[0]; m++)
    if (memmem(mlir, len, kMarks[m], strlen(kMarks[m]))) return true;
  return false;
}

void tpu_executable_note_text(tpu_executable_t* executable, const char* mlir, size_t len) {
  if (executable && mlir) executable->may_alias = text_may_alias(mlir, len);
}

bool tpu_executable_portable(const tpu_executable_t* executable) {
  return executable->portable;
}

bool tpu_executable_may_alias(const tpu_executable_t* executable) {
  return executable->may_alias;
}

tpu_status_t tpu_executable_deserialize(tpu_client_t* client,
                                        const void* bytes, size_t len,
                                        tpu_executable_t** out_executable) {
  if (!out_executable || !client || !bytes || len == 0) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "client, bytes (non-empty) and out_executable "
                           "must not be NULL");
  }
  *out_executable = NULL;
  TPU_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, args);
  args.client = client->client;
  args.serialized_executable = bytes;
  args.serialized_executable_size = len;
  /* No overridden options: use those stored in the serialized executable. */
  TPU_RETURN_IF_ERROR(tpu_status_annotate(
      TPU_PJRT_CALL(client->api, PJRT_Executable_DeserializeAndLoad, &args),
      "deserializing an executable: "));
  return wrap_loaded(client, args.loaded_executable, out_executable);
}

tpu_status_t tpu_executable_serialize(const tpu_executable_t* executable,
                                      void** out_bytes, size_t* out_len) {
  if (!executable || !out_bytes || !out_len) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "executable, out_bytes and out_len must not be NULL");
  }
  *out_bytes = NULL;
  *out_len = 0;
  const PJRT_Api* api = executable->client->api;
  PJRT_Executable* unloaded = NULL;
  TPU_RETURN_IF_ERROR(get_unloaded(api, executable->executable, &unloaded));

  TPU_PJRT_ARGS(PJRT_Executable_Serialize_Args, args);
  args.executable = unloaded;
  tpu_status_t status = TPU_PJRT_CALL(api, PJRT_Executable_Serialize, &args);
  if (!status) {
    size_t len = args.serialized_bytes ? args.serialized_bytes_size : 0;
    void* copy = malloc(len ? len : 1);
    if (copy) {
      if (len) memcpy(copy, args.serialized_bytes, len);
      *out_bytes = copy;
      *out_len = len;
    } else {
      status = tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                               "out of memory copying %zu serialized bytes", len);
    }
    if (args.serialized_executable_deleter)
      args.serialized_executable_deleter(args.serialized_executable);
  }
  destroy_unloaded(api, unloaded);
  return tpu_status_annotate(status, "serializing an executable: ");
}

/* ---- outputs ------------------------------------------------------------------- */

int tpu_executable_num_outputs(const tpu_executable_t* executable) {
  return executable->num_outputs;
}

tpu_dtype_t tpu_executable_output_dtype(const tpu_executable_t* executable,
                                        int i) {
  if (i < 0 || i >= executable->num_outputs) return TPU_DTYPE_INVALID;
  return executable->output_dtypes[i];
}

int tpu_executable_output_rank(const tpu_executable_t* executable, int i) {
  if (i < 0 || i >= executable->num_outputs) return -1;
  return executable->output_ranks[i];
}

const int64_t* tpu_executable_output_dims(const tpu_executable_t* executable,
                                          int i) {
  if (i < 0 || i >= executable->num_outputs) return NULL;
  return executable->output_dims[i];
}

/* ---- execute ------------------------------------------------------------------- */

int tpu_executable_num_devices(const tpu_executable_t* executable) {
  return executable->num_devices;
}

int tpu_executable_device_index(const tpu_executable_t* executable, int d) {
  return d >= 0 && d < executable->num_devices ? executable->device_indices[d] : -1;
}

/* Argument i of an execution on device_index; `list` is its device list
 * in a multi-device execution, -1 in a single-device one. */
static tpu_status_t check_arg(const tpu_executable_t* exe, const tpu_buffer_t* arg, int i,
                              int list, int device_index) {
  if (!arg) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "argument %d is NULL", i);
  }
  if (arg->client != exe->client) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "argument %d belongs to another client", i);
  }
  if (arg->device_index != device_index && list < 0) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "argument %d is on device %d, execution on "
                           "device %d",
                           i, arg->device_index, device_index);
  }
  if (arg->device_index != device_index) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "argument %d of device list %d is on device %d, but the "
                           "program's device assignment runs list %d on device %d",
                           i, list, arg->device_index, list, device_index);
  }
  /* A queued execution's result: wait for it (its failure fails us). */
  tpu_status_t unfilled = tpu_buffer_wait_filled((tpu_buffer_t*)arg);
  if (unfilled) return tpu_status_annotate(unfilled, "argument %d: ", i);
  if (tpu_buffer_is_deleted(arg)) {
    return tpu_status_make(TPU_STATUS_FAILED_PRECONDITION,
                           "argument %d was deleted or donated to an earlier "
                           "execution",
                           i);
  }
  return NULL;
}

static tpu_status_t check_execute_args(const tpu_executable_t* exe,
                                       int device_index,
                                       tpu_buffer_t* const* args, int nargs,
                                       tpu_buffer_t** out_results) {
  const tpu_client_t* client = exe->client;
  if (device_index < 0 || device_index >= client->device_count) {
    return tpu_status_make(TPU_STATUS_OUT_OF_RANGE,
                           "device index %d out of range: the client has %d "
                           "device(s)",
                           device_index, client->device_count);
  }
  if (exe->num_devices > 1) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "executable runs on %d devices at once; use "
                           "tpu_executable_execute_multi",
                           exe->num_devices);
  }
  if (!exe->portable && device_index != exe->bound_device_index) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "executable was compiled for device %d only (not "
                           "portable); cannot run it on device %d",
                           exe->bound_device_index, device_index);
  }
  if (nargs < 0 || (nargs > 0 && !args)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "bad argument list (nargs = %d)", nargs);
  }
  if (exe->num_outputs > 0 && !out_results) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "out_results is NULL");
  }
  for (int i = 0; i < nargs; i++)
    TPU_RETURN_IF_ERROR(check_arg(exe, args[i], i, -1, device_index));
  return NULL;
}

static void destroy_raw(const PJRT_Api* api, PJRT_Buffer** list, int n) {
  for (int i = 0; i < n; i++) {
    if (!list[i]) continue;
    TPU_PJRT_ARGS(PJRT_Buffer_Destroy_Args, d);
    d.buffer = list[i];
    tpu_status_free(TPU_PJRT_CALL(api, PJRT_Buffer_Destroy, &d));
    list[i] = NULL;
  }
}

/* Wraps one device's outputs (taking them) as buffers on device_index. On
 * failure nothing is left: what was wrapped is destroyed, the rest too. */
static tpu_status_t wrap_outputs(tpu_executable_t* exe, int device_index,
                                 PJRT_Buffer** out_list, tpu_buffer_t** out_results) {
  const int nout = exe->num_outputs;
  tpu_status_t status = NULL;
  int wrapped = 0;
  for (; wrapped < nout && !status; wrapped++) {
    /* The declared output types, queried once at compile time. */
    status = tpu_buffer_wrap_typed(exe->client, device_index, out_list[wrapped],
                                   exe->output_dtypes[wrapped], exe->output_dims[wrapped],
                                   exe->output_ranks[wrapped], &out_results[wrapped]);
    out_list[wrapped] = NULL; /* wrap took ownership, even on failure */
  }
  if (!status) return NULL;
  for (int i = 0; i < nout; i++) {
    if (i < wrapped - 1) tpu_buffer_destroy(out_results[i]);
    out_results[i] = NULL;
  }
  destroy_raw(exe->client->api, out_list + wrapped, nout - wrapped);
  return status;
}

/* `fill`: out_results holds pending buffers to fill (execute_into). */
static tpu_status_t run(tpu_executable_t* executable, int device_index,
                        tpu_buffer_t* const* args, int nargs, const bool* donatable,
                        tpu_buffer_t** out_results, tpu_event_t** out_done, bool fill) {
  if (out_done) *out_done = NULL;
  if (!executable) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "executable is NULL");
  }
  TPU_RETURN_IF_ERROR(
      check_execute_args(executable, device_index, args, nargs, out_results));
  tpu_client_t* client = executable->client;
  const PJRT_Api* api = client->api;
  const int nout = executable->num_outputs;

  /* One allocation for the argument list, the non-donatable indices and
   * the output list. */
  size_t n_in = nargs > 0 ? (size_t)nargs : 1;
  size_t n_out = nout > 0 ? (size_t)nout : 1;
  size_t bytes = n_in * sizeof(PJRT_Buffer*) + n_in * sizeof(int64_t) +
                 n_out * sizeof(PJRT_Buffer*);
  /* Small calls (nearly all) use the stack: this is the dispatch path. */
  char stack_scratch[512];
  char* scratch = bytes <= sizeof stack_scratch ? memset(stack_scratch, 0, bytes)
                                                : calloc(1, bytes);
  if (!scratch) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of memory preparing an execution");
  }
  int64_t* keep = (int64_t*)scratch;
  PJRT_Buffer** arg_list = (PJRT_Buffer**)(scratch + n_in * sizeof(int64_t));
  PJRT_Buffer** out_list = arg_list + n_in;
  size_t num_keep = 0;
  for (int i = 0; i < nargs; i++) {
    arg_list[i] = args[i]->buffer;
    if (!executable->may_alias) continue; /* nothing can be donated */
    if (!donatable || !donatable[i]) keep[num_keep++] = i;
    else atomic_store_explicit(&args[i]->offered, true, memory_order_relaxed);
  }

  TPU_PJRT_ARGS(PJRT_ExecuteOptions, options);
  options.non_donatable_input_indices = keep;
  options.num_non_donatable_input_indices = num_keep;

  PJRT_Buffer* const* argument_lists[1] = {arg_list};
  PJRT_Buffer** const output_lists[1] = {out_list};
  PJRT_Event* done = NULL;

  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, exec);
  exec.executable = executable->executable;
  exec.options = &options;
  exec.argument_lists = argument_lists;
  exec.num_devices = 1;
  exec.num_args = (size_t)nargs;
  exec.output_lists = output_lists;
  exec.device_complete_events = out_done ? &done : NULL;
  exec.execute_device =
      executable->portable ? client->devices[device_index].device : NULL;
  tpu_status_t status = tpu_status_annotate(
      TPU_PJRT_CALL(api, PJRT_LoadedExecutable_Execute, &exec), "executing: ");
  if (status) {
    if (scratch != stack_scratch) free(scratch);
    return status;
  }

  if (fill) {
    for (int i = 0; i < nout; i++) tpu_buffer_fill_raw(out_results[i], out_list[i]);
    if (scratch != stack_scratch) free(scratch);
    if (out_done) return tpu_event_wrap(api, done, out_done);
    return NULL;
  }
  status = wrap_outputs(executable, device_index, out_list, out_results);
  if (status) {
    /* The execution still runs; let it finish before reporting. */
    tpu_status_free(tpu_pjrt_event_await_destroy(api, done, "execution"));
    if (scratch != stack_scratch) free(scratch);
    return tpu_status_annotate(status, "wrapping execution results: ");
  }
  if (scratch != stack_scratch) free(scratch);
  if (out_done) return tpu_event_wrap(api, done, out_done);
  return NULL;
}

tpu_status_t tpu_executable_execute(tpu_executable_t* executable, int device_index,
                                    tpu_buffer_t* const* args, int nargs,
                                    const bool* donatable, tpu_buffer_t** out_results,
                                    tpu_event_t** out_done) {
  return run(executable, device_index, args, nargs, donatable, out_results, out_done, false);
}

tpu_status_t tpu_executable_execute_into(tpu_executable_t* executable, int device_index,
                                         tpu_buffer_t* const* args, int nargs,
                                         tpu_buffer_t** pending_results,
                                         tpu_event_t** out_done) {
  if (executable && pending_results) {
    for (int i = 0; i < executable->num_outputs; i++) {
      tpu_buffer_t* b = pending_results[i];
      if (!b || tpu_buffer_state(b) != TPU_BUFFER_PENDING || b->dtype != executable->output_dtypes[i] ||
          b->rank != executable->output_ranks[i] ||
          memcmp(b->dims, executable->output_dims[i], (size_t)b->rank * sizeof(int64_t)) != 0)
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "result %d is not a pending buffer of the program's output type", i);
    }
  }
  return run(executable, device_index, args, nargs, NULL, pending_results, out_done, true);
}

/* ---- multi-device execute ------------------------------------------------------ */

static tpu_status_t check_multi_args(const tpu_executable_t* exe, int num_devices,
                                     tpu_buffer_t* const* const* args, int nargs,
                                     tpu_buffer_t** out_results) {
  if (exe->portable || num_devices != exe->num_devices) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "executable runs on %d device(s) at once%s; got %d "
                           "argument list(s)",
                           exe->num_devices, exe->portable ? " (portable)" : "",
                           num_devices);
  }
  if (nargs < 0 || (nargs > 0 && !args)) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                           "bad argument lists (nargs = %d)", nargs);
  }
  if (exe->num_outputs > 0 && !out_results) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "out_results is NULL");
  }
  for (int d = 0; d < num_devices && nargs > 0; d++) {
    if (!args[d]) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "argument list %d is NULL", d);
    }
    for (int i = 0; i < nargs; i++)
      TPU_RETURN_IF_ERROR(check_arg(exe, args[d][i], i, d, exe->device_indices[d]));
  }
  return NULL;
}

/* Hands the caller one event per device, or on failure none (all
 * destroyed, `events` taken either way). */
static tpu_status_t wrap_events(const PJRT_Api* api, PJRT_Event** events, int n,
                                tpu_event_t** out_done) {
  tpu_status_t status = NULL;
  for (int d = 0; d < n; d++) {
    if (status) {
      tpu_pjrt_event_destroy(api, events[d]);
      out_done[d] = NULL;
      continue;
    }
    status = tpu_event_wrap(api, events[d], &out_done[d]);
    if (status) {
      for (int e = 0; e < d; e++) tpu_event_destroy(out_done[e]);
      for (int e = 0; e <= d; e++) out_done[e] = NULL;
    }
  }
  return status;
}

tpu_status_t tpu_executable_execute_multi(tpu_executable_t* executable, int num_devices,
                                          tpu_buffer_t* const* const* args, int nargs,
                                          tpu_buffer_t** out_results,
                                          tpu_event_t** out_done) {
  if (!executable) {
    return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT, "executable is NULL");
  }
  for (int d = 0; out_done && d < num_devices; d++) out_done[d] = NULL;
  TPU_RETURN_IF_ERROR(check_multi_args(executable, num_devices, args, nargs, out_results));
  const PJRT_Api* api = executable->client->api;
  const size_t n = (size_t)num_devices, nin = (size_t)nargs, nout = (size_t)executable->num_outputs;

  /* PJRT wants a list of arguments and one of outputs per device. Not the
   * dispatch path: one allocation. */
  size_t bytes = n * nin * sizeof(PJRT_Buffer*) + n * nout * sizeof(PJRT_Buffer*) +
                 2 * n * sizeof(PJRT_Buffer**) + n * sizeof(PJRT_Event*) +
                 (nin ? nin : 1) * sizeof(int64_t);
  char* scratch = calloc(1, bytes);
  if (!scratch) {
    return tpu_status_make(TPU_STATUS_RESOURCE_EXHAUSTED,
                           "out of memory preparing an execution on %d devices",
                           num_devices);
  }
  int64_t* keep = (int64_t*)scratch;
  PJRT_Event** events = (PJRT_Event**)(keep + (nin ? nin : 1));
  PJRT_Buffer*** arg_lists = (PJRT_Buffer***)(events + n);
  PJRT_Buffer*** out_lists = arg_lists + n;
  PJRT_Buffer** arg_bufs = (PJRT_Buffer**)(out_lists + n);
  PJRT_Buffer** out_bufs = arg_bufs + n * nin;
  for (size_t d = 0; d < n; d++) {
    arg_lists[d] = arg_bufs + d * nin;
    out_lists[d] = out_bufs + d * nout;
    for (size_t i = 0; i < nin; i++) arg_lists[d][i] = args[d][i]->buffer;
  }
  for (size_t i = 0; i < nin; i++) keep[i] = (int64_t)i; /* nothing donated */

  TPU_PJRT_ARGS(PJRT_ExecuteOptions, options);
  options.non_donatable_input_indices = keep;
  options.num_non_donatable_input_indices = executable->may_alias ? nin : 0;
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, exec);
  exec.executable = executable->executable;
  exec.options = &options;
  exec.argument_lists = (PJRT_Buffer* const* const*)arg_lists;
  exec.num_devices = n;
  exec.num_args = nin;
  exec.output_lists = (PJRT_Buffer** const*)out_lists;
  exec.device_complete_events = events;
  exec.execute_device = NULL; /* every device of the assignment */
  tpu_status_t status = tpu_status_annotate(
      TPU_PJRT_CALL(api, PJRT_LoadedExecutable_Execute, &exec), "executing on %d devices: ",
      num_devices);
  if (status) {
    free(scratch);
    return status;
  }
  size_t wrapped = 0;
  for (; wrapped < n && !status; wrapped++)
    status = wrap_outputs(executable, executable->device_indices[wrapped], out_lists[wrapped],
                          out_results + wrapped * nout);
  if (status) {
    for (size_t i = 0; i < (wrapped - 1) * nout; i++) {
      tpu_buffer_destroy(out_results[i]);
      out_results[i] = NULL;
    }
    for (size_t d = wrapped; d < n; d++) destroy_raw(api, out_lists[d], (int)nout);
  }
  if (status) {
    /* The execution still runs; let it finish before reporting. */
    for (size_t d = 0; d < n; d++)
      tpu_status_free(tpu_pjrt_event_await_destroy(api, events[d], "execution"));
    free(scratch);
    return tpu_status_annotate(status, "wrapping execution results: ");
  }
  if (!out_done) { /* PJRT keeps the work alive without them */
    for (size_t d = 0; d < n; d++) tpu_pjrt_event_destroy(api, events[d]);
    free(scratch);
    return NULL;
  }
  status = wrap_events(api, events, num_devices, out_done);
  free(scratch);
  return status;
}

void tpu_executable_destroy(tpu_executable_t* executable) {
  if (!executable) return;
  destroy_loaded(executable->client->api, executable->executable);
  tpu_pjrt_track(TPU_PJRT_HANDLE_EXECUTABLE, -1);
  free(executable->output_dtypes);
  free(executable->output_ranks);
  free(executable->output_dims);
  free(executable->device_indices);
  free(executable);
}
