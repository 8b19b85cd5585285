#include "env.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const tpu_env_var_t kEnvVars[] = {
    {"TORCHTPU_PJRT_PLUGIN", "",
     "Path to the PJRT plugin .so that serves the tpu device (libtpu, "
     "xla_cuda_plugin.so, ...). Default: the installed xla-cpu-pjrt plugin.",
     "stable"},
    {"TORCHTPU_NUM_DEVICES", "1",
     "Number of devices the CPU plugin creates (its cpu_device_count; at "
     "least the largest TORCHTPU_VISIBLE_DEVICES index + 1). Ignored by "
     "other plugins.",
     "stable"},
    {"TORCHTPU_VISIBLE_DEVICES", "",
     "Comma-separated indices of the plugin's addressable devices this "
     "process uses, in that order: tpu:i is the i-th listed (e.g. '2,3'). "
     "Unset: all of them. When set, LOCAL_RANK does not pick the default "
     "device.",
     "stable"},
    {"TORCHTPU_FALLBACK", "warn",
     "Ops without a device lowering run on CPU: 'warn' (once per op), "
     "'silent', or 'error' (raise, naming the op).",
     "stable"},
    {"TORCHTPU_EAGER_MODE", "strict",
     "Eager mode at start-up: 'strict' (asynchronous, one cached program per "
     "op), 'debug' (synchronous, errors at the op, indices checked on the "
     "host) or 'defer_and_fuse' (runs of ops recorded and run as one fused "
     "program). torchtpu.set_eager_mode / torchtpu.eager_mode change it.",
     "experimental"},
    {"TORCHTPU_DEFER_MAX_OPS", "4096",
     "defer_and_fuse: a run is flushed once it holds this many ops.",
     "experimental"},
    {"TORCHTPU_DEFER_MIN_REPEAT", "32",
     "defer_and_fuse: a run that ends with the same stretch of at least this "
     "many ops twice in a row is flushed there (a loop boundary).",
     "experimental"},
    {"TORCHTPU_GRAPH_FUSION", "1",
     "1: torch.compile graphs called one after another (a training step's "
     "forward, backward and optimizer step) join the device's run and "
     "execute as one fused program when a result is read (item, cpu, an "
     "eager op on it, synchronize), in Strict as in defer_and_fuse mode; a "
     "graph called again starts the next run. Debug mode and 0: each graph "
     "executes when called.",
     "experimental"},
    {"TORCHTPU_DEBUG_SHADOW", "0",
     "1: in debug mode, also run every op on the CPU and raise at the first "
     "whose result differs beyond tolerance (op, shapes, dtypes, errors).",
     "experimental"},
    {"TORCHTPU_HOST_HEAP", "1",
     "CPU plugin only (its device memory is host memory): 1 keeps freed "
     "buffers in the process's malloc heap for the next ones (no mmap'ed "
     "chunks, no trimming, 64 MiB top pad; csrc/core/hostheap.h), instead "
     "of glibc's default of unmapping them and page-faulting the next; "
     "torch.tpu.empty_cache() returns free memory to the OS. 0 leaves malloc "
     "alone, as does any GLIBC_TUNABLES glibc.malloc.* or MALLOC_*_ setting.",
     "experimental"},
    {"TORCHTPU_HOST_GEMM", "1",
     "CPU plugin only: 1 computes a single-device program's float32 and "
     "float64 matrix products (plain or batched, one contracting dim) with "
     "the BLAS of PyTorch CPU (MKL), one thread per product, as an XLA "
     "custom call (csrc/core/hostgemm.h): about twice as fast as XLA:CPU's "
     "own dots on a training step's shapes. 0 leaves every dot to XLA.",
     "experimental"},
    {"TORCHTPU_HOST_ATTN", "1",
     "CPU plugin only: 1 computes a single-device program's float32 "
     "scaled_dot_product_attention (forward and backward) in host code, one "
     "(batch, head) at a time with its scores in cache, as XLA custom calls "
     "(csrc/core/hostattn.h). 0 (or TORCHTPU_HOST_GEMM=0) leaves it to XLA.",
     "experimental"},
    {"TORCHTPU_HOST_ROW", "1",
     "CPU plugin only: 1 computes a single-device program's float32 "
     "softmax, log_softmax, _safe_softmax and their gradients over the last "
     "dim, and layer_norm and its backward, in host code (AVX2, one pass a "
     "row) as XLA custom calls (csrc/core/hostrow.h, hostnorm.h): 2-4x "
     "faster than XLA:CPU's forms. 0 (or "
     "TORCHTPU_HOST_GEMM=0) leaves them to XLA.",
     "experimental"},
    {"TORCHTPU_LOG", "",
     "Comma-separated logs to stderr. 'recompiles': each eager op compiled "
     "again with the part of its key that changed (shape, dtype, strides, "
     "scalar kind, structural value), and each torch.compile recompile with "
     "Dynamo's reason (a failed guard: new shape, new dtype, ...). "
     "'programs': the StableHLO text of every program compiled (a cache "
     "miss), e.g. to see the precision_config of the matmuls.",
     "stable"},
    {"TORCHTPU_DYNAMIC_BUCKETS", "1",
     "torch.compile graphs with dynamic sizes: 1 runs each size in a "
     "program of its power-of-two bucket, the padding masked "
     "(torchtpu/_buckets.py; a graph the analysis cannot prove exact is "
     "specialised per size, metric bucket_declined::<reason>); 0 specialises "
     "every new size.",
     "experimental"},
    {"TORCHTPU_BUCKET_MAX", "4096",
     "Largest bucket: a size beyond it gets a program of its own exact size.",
     "experimental"},
    {"TORCHTPU_LAUNCHER", "1",
     "0: Strict eager ops call PJRT on the thread that runs them. 1 (and "
     "more than one CPU): while ops arrive back to back, a host thread "
     "calls PJRT for them in order, so the next op is prepared meanwhile.",
     "stable"},
    {"TORCHTPU_CACHE", "1",
     "0: turn off the persistent executable caches (local and shared "
     "directories); the in-process cache stays on.",
     "stable"},
    {"TORCHTPU_CACHE_DIR", "",
     "Directory of this host's persistent executable cache (serialized "
     "compiled programs). Default: $XDG_CACHE_HOME/torchtpu, else "
     "~/.cache/torchtpu.",
     "stable"},
    {"TORCHTPU_SHARED_CACHE_DIR", "",
     "Directory of an executable cache shared by many hosts (e.g. an NFS or "
     "gcsfuse mount), looked up after the local one; hits are copied to the "
     "local cache and new compiles written to both. Unset: off.",
     "stable"},
    {"TORCHTPU_CACHE_MAX_BYTES", "10737418240",
     "Size cap of each executable cache directory; least recently used "
     "entries are evicted beyond it. 0: no cap.",
     "stable"},
    {"TORCHTPU_MEMORY_LIMIT", "0",
     "Bytes of device memory this process may allocate on each device; an "
     "allocation beyond it raises torch.OutOfMemoryError. 0: what the device "
     "has (the plugin's limit; the host's memory for the CPU plugin).",
     "stable"},
    {"TORCHTPU_PROGRAM_CACHE_MAX", "4096",
     "Most executables kept loaded in a process; those unused longest are "
     "unloaded beyond it (each holds code and memory maps: a process that "
     "compiles without end would run out). 0: no cap. Whatever the cap, "
     "they are also unloaded when the process holds 60% of "
     "vm.max_map_count memory maps.",
     "stable"},
    {"TORCHTPU_DTYPE_PLATFORM", "",
     "Testing: answer which dtypes the device holds as this PJRT platform "
     "would ('tpu': no complex128) instead of the plugin's own platform.",
     "experimental"},
    /* Other programs' variables that torchtpu reads or sets: listed so that
     * `python -m torchtpu.info` shows everything that changes what we do. */
    {"LOCAL_RANK", "",
     "torchrun's: unless TORCHTPU_VISIBLE_DEVICES is set, each thread's "
     "current device starts as LOCAL_RANK % device_count().",
     "external"},
    {"XLA_FLAGS", "",
     "XLA's compiler flags, read by the plugin; part of the executable cache "
     "key (entries compiled under other flags are never reused).",
     "external"},
    {"LIBTPU_INIT_ARGS", "",
     "libtpu's flags, read by the plugin; part of the executable cache key.",
     "external"},
    {"TPU_SKIP_MDS_QUERY", "",
     "libtpu's: skip the Cloud metadata query. Set to 1 when libtpu is loaded "
     "off a Google Cloud VM (where the query would hang), unless already set.",
     "external"},
    {"TF_CPP_MIN_LOG_LEVEL", "",
     "XLA's log level; set to 1 at start-up unless already set (hides XLA's "
     "INFO lines).",
     "external"},
    {"GLIBC_TUNABLES", "",
     "glibc's: naming any glibc.malloc.* tunable keeps TORCHTPU_HOST_HEAP "
     "from changing malloc's policy (yours stands).",
     "external"},
    {"MALLOC_TOP_PAD_", "", "glibc's; when set, TORCHTPU_HOST_HEAP leaves malloc alone.",
     "external"},
    {"MALLOC_MMAP_MAX_", "", "glibc's; when set, TORCHTPU_HOST_HEAP leaves malloc alone.",
     "external"},
    {"MALLOC_MMAP_THRESHOLD_", "",
     "glibc's; when set, TORCHTPU_HOST_HEAP leaves malloc alone.", "external"},
    {"MALLOC_TRIM_THRESHOLD_", "",
     "glibc's; when set, TORCHTPU_HOST_HEAP leaves malloc alone.", "external"},
    {"MALLOC_ARENA_MAX", "", "glibc's; when set, TORCHTPU_HOST_HEAP leaves malloc alone.",
     "external"},
    {"XDG_CACHE_HOME", "",
     "Where TORCHTPU_CACHE_DIR defaults to ($XDG_CACHE_HOME/torchtpu).",
     "external"},
    {"HOME", "",
     "Without XDG_CACHE_HOME, TORCHTPU_CACHE_DIR defaults to "
     "$HOME/.cache/torchtpu.",
     "external"},
    {"TORCH_DEVICE_BACKEND_AUTOLOAD", "",
     "PyTorch's: 0 stops `import torch` from loading torchtpu (default 1).",
     "external"},
    {"TORCHINDUCTOR_CACHE_DIR", "",
     "PyTorch's: where AOTAutograd's cache keeps compiled graphs, torchtpu's "
     "included (default /tmp/torchinductor_$USER).",
     "external"},
};

size_t tpu_env_count(void) { return sizeof kEnvVars / sizeof kEnvVars[0]; }

const tpu_env_var_t* tpu_env_at(size_t i) {
  return i < tpu_env_count() ? &kEnvVars[i] : NULL;
}

const tpu_env_var_t* tpu_env_find(const char* name) {
  for (size_t i = 0; i < tpu_env_count(); i++)
    if (strcmp(kEnvVars[i].name, name) == 0) return &kEnvVars[i];
  return NULL;
}

const char* tpu_env_get(const char* name) {
  const tpu_env_var_t* var = tpu_env_find(name);
  if (!var) return "";
  const char* value = getenv(name);
  return value && value[0] ? value : var->default_value;
}

int64_t tpu_env_get_int(const char* name, int64_t fallback) {
  const char* text = tpu_env_get(name);
  if (!text[0]) return fallback;
  char* end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 10);
  if (errno || !end || *end) return fallback;
  return value;
}

tpu_status_t tpu_env_get_index_list(const char* name, int limit, int capacity,
                                    int* out_indices, int* out_count) {
  *out_count = 0;
  const char* text = tpu_env_get(name);
  const char* p = text;
  while (isspace((unsigned char)*p)) p++;
  if (!*p) return NULL; /* unset or blank: no list */
  int count = 0;
  for (;;) {
    char* end = NULL;
    errno = 0;
    long value = strtol(p, &end, 10);
    bool is_number = end != p && isdigit((unsigned char)end[-1]);
    while (end && isspace((unsigned char)*end)) end++;
    if (!is_number || errno || (*end && *end != ',')) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "%s must be comma-separated device indices "
                             "(e.g. '0,1'), got '%s'",
                             name, text);
    }
    if (value < 0 || value >= limit) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "%s: index %ld is out of range [0, %d), in '%s'",
                             name, value, limit, text);
    }
    for (int i = 0; i < count; i++) {
      if (out_indices[i] == value) {
        return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                               "%s lists index %ld twice, in '%s'", name,
                               value, text);
      }
    }
    if (count == capacity) {
      return tpu_status_make(TPU_STATUS_INVALID_ARGUMENT,
                             "%s lists more than %d indices, in '%s'", name,
                             capacity, text);
    }
    out_indices[count++] = (int)value;
    if (!*end) break;
    p = end + 1;
  }
  *out_count = count;
  return NULL;
}

bool tpu_env_log_enabled(const char* what) {
  size_t n = strlen(what);
  for (const char* p = tpu_env_get("TORCHTPU_LOG"); p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t m = strcspn(p, ", ");
    if (m == n && strncmp(p, what, n) == 0) return true;
    p += m;
  }
  return false;
}
