# torchtpu build. `make test` and `make demo` work on a fresh machine with
# only this repository: they create .venv, install pinned deps and build.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-stamp
BUILD := build

# The PJRT header and default plugin come from the installed xla-cpu-pjrt
# wheel. Override PJRT_INCLUDE_DIR to build against a newer header (needed
# for plugins newer than it, e.g. a recent libtpu or CUDA plugin).
PJRT_PKG_DIR = $(shell $(PY) -c 'import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.dirname(m.__file__))')
PJRT_INCLUDE_DIR ?= $(PJRT_PKG_DIR)/include
PJRT_DEFAULT_PLUGIN ?= $(PJRT_PKG_DIR)/xla_cpu_pjrt.so
# XLA's FFI C API (xla/ffi/api/c_api.h, for csrc/core/hostgemm.c's custom
# call handlers) from the installed jaxlib wheel.
FFI_INCLUDE_DIR ?= $(shell $(PY) -c 'import os, jaxlib; print(os.path.join(os.path.dirname(jaxlib.__file__), "include"))')

CC ?= gcc
CFLAGS_COMMON := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -fPIC -Icsrc
CFLAGS ?= -O2 -g
CORE_SRCS := $(filter-out %_test.c,$(wildcard csrc/core/*.c csrc/core/*/*.c))
CORE_TESTS := $(wildcard csrc/core/*_test.c csrc/core/*/*_test.c)
LDLIBS := -ldl -lpthread -lm

# Keep test objects between runs (they are intermediates of the test rule).
.SECONDARY:

.PHONY: all deps core ctest ctest-asan install test pytest pytest-debug test-debug test-shadow pytest-defer test-defer demo bench info conformance models fuzz titan clean

all: install

deps: $(DEPS_STAMP)
$(DEPS_STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

# --- C core (no Python, no PyTorch) -------------------------------------
# build/<variant>/libtorchtpu_core.a; variant "asan" adds sanitizers.
define core_rules
$(BUILD)/$(1)/obj/%.o: csrc/%.c $(wildcard csrc/core/*.h csrc/core/*/*.h) | $(DEPS_STAMP)
	@mkdir -p $$(dir $$@)
	$(CC) $(CFLAGS_COMMON) $(2) -I$$(PJRT_INCLUDE_DIR) -I$$(FFI_INCLUDE_DIR) \
	  -DTPU_DEFAULT_PLUGIN_PATH='"$$(PJRT_DEFAULT_PLUGIN)"' -c $$< -o $$@
$(BUILD)/$(1)/libtorchtpu_core.a: $(patsubst csrc/%.c,$(BUILD)/$(1)/obj/%.o,$(CORE_SRCS))
	ar rcs $$@ $$^
$(BUILD)/$(1)/tests/%: $(BUILD)/$(1)/obj/%.o $(BUILD)/$(1)/libtorchtpu_core.a
	@mkdir -p $$(dir $$@)
	$(CC) $(2) -o $$@ $$^ $(LDLIBS)
endef
$(eval $(call core_rules,release,$(CFLAGS)))
# In a variable: a literal comma inside $(call ...) would split the argument.
ASAN_CFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer
$(eval $(call core_rules,asan,$(ASAN_CFLAGS)))

CTEST_BINS = $(patsubst csrc/%.c,$(BUILD)/$(1)/tests/%,$(CORE_TESTS))

core: $(BUILD)/release/libtorchtpu_core.a

# Runs every *_test.c binary; no Python involved at run time.
ctest: $(call CTEST_BINS,release)
	@set -e; for t in $^; do echo "== $$t"; $$t; done

# The same tests under AddressSanitizer + LeakSanitizer (leaks inside the
# uninstrumented plugin are suppressed; ours are not).
ctest-asan: $(call CTEST_BINS,asan)
	@set -e; for t in $^; do echo "== $$t (asan)"; \
	  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp:print_suppressions=0 $$t; done

# --- Python package -------------------------------------------------------
install: $(DEPS_STAMP) core
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 TORCHTPU_CORE_LIB=$(CURDIR)/$(BUILD)/release/libtorchtpu_core.a \
	  $(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .

pytest: install
	$(PY) -m pytest -q tests

# The strict suites again in debug mode (synchronous, host-checked indices).
# `make test` runs a subset to stay inside CI's time; test-debug runs them all.
DEBUG_SUITES := tests/test_views.py tests/test_ops.py tests/test_training.py tests/test_placement.py
pytest-debug: install
	TORCHTPU_EAGER_MODE=debug $(PY) -m pytest -q -p no:cacheprovider $(DEBUG_SUITES)

test-debug: install
	TORCHTPU_EAGER_MODE=debug $(PY) -m pytest -q -p no:cacheprovider $(MODE_SUITES)

# The op suites in debug mode with the CPU shadow check on (every op run
# again on the CPU and compared): finds the first op that diverges. About
# 8 minutes on 2 cores, so not in `make test`. (test_copy.py counts the
# bytes reads move, which the shadow's own host copies add to.)
SHADOW_SUITES := $(addprefix tests/test_,ops_nn.py ops_reduce.py ops_pointwise.py ops_shape.py \
  ops_index.py ops_factory.py ops_conv.py ops_linalg.py ops_foreach.py views.py training.py amp.py \
  dtypes.py ops.py)
test-shadow: install
	TORCHTPU_EAGER_MODE=debug TORCHTPU_DEBUG_SHADOW=1 $(PY) -m pytest -q -p no:cacheprovider \
	  $(SHADOW_SUITES)

# The same in defer_and_fuse (ops recorded and flushed as fused programs).
# Run once (strict), to keep CI inside its time: test_compile.py,
# test_precompile.py and test_dynamic_buckets.py (compiled graphs join the
# device's run alike in strict and defer_and_fuse; test_compile.py runs the
# eager ops between graphs in both modes itself), test_device.py (device
# selection in subprocesses), test_precision.py (it picks each mode itself),
# and test_distributed.py's worlds of 4 and its
# torchrun examples (the backend stages tensors the same way in every mode).
DEFER_SUITES = $(filter-out tests/test_distributed.py tests/test_compile.py tests/test_device.py \
  tests/test_precompile.py tests/test_dynamic_buckets.py tests/test_precision.py,$(MODE_SUITES))
pytest-defer: install
	TORCHTPU_EAGER_MODE=defer_and_fuse $(PY) -m pytest -q -p no:cacheprovider $(DEFER_SUITES)
	TORCHTPU_EAGER_MODE=defer_and_fuse $(PY) -m pytest -q -p no:cacheprovider \
	  tests/test_distributed.py -k "not example and not -4]"

test-defer: install
	TORCHTPU_EAGER_MODE=defer_and_fuse $(PY) -m pytest -q -p no:cacheprovider $(MODE_SUITES)

# Every suite that is not about one mode (test_modes.py tests the modes
# themselves; test_opinfo.py is the conformance subset, run once in strict;
# test_cache.py runs its workloads in strict subprocesses whatever the mode).
# test_fuzz.py switches modes itself, and test_structure.py reads the sources
# and the build, so they run once, in the strict pass.
MODE_SUITES = $(filter-out tests/test_modes.py tests/test_opinfo.py tests/test_cache.py tests/test_fuzz.py tests/test_structure.py,$(wildcard tests/test_*.py))

test: install ctest ctest-asan pytest pytest-debug pytest-defer

# The long random-program fuzz campaign: FUZZ_PROGRAMS programs per mode
# (FUZZ_MODES, comma-separated), tpu against CPU; prints programs run and
# mismatches per mode, and a minimized repro of each class. FUZZ_EXCLUDE=known
# leaves out the known classes (tests/fuzz_programs.py KNOWN_*), as
# tests/test_fuzz.py's short run does.
FUZZ_PROGRAMS ?= 5000
FUZZ_MODES ?= strict,debug,defer_and_fuse,compiled,compiled_dynamic
FUZZ_SEED ?= 0
fuzz: install
	FUZZ_EXCLUDE=$(FUZZ_EXCLUDE) $(PY) tests/fuzz_programs.py --programs $(FUZZ_PROGRAMS) \
	  --modes $(FUZZ_MODES) --seed $(FUZZ_SEED)

# Every Hugging Face architecture of the suite (make test runs a handful).
models: install
	TORCHTPU_HF_ALL=1 $(PY) -m pytest -q -p no:cacheprovider tests/models

demo: install
	$(PY) examples/demo.py

# TorchTitan's llama3 debug model trained with torchtitan's own entry point
# (torchrun -m torchtitan.train) on tpu: eager, torch.compile, 2-rank FSDP2
# and a DCP checkpoint resume (examples/titan/run_titan.py). torchtitan and
# the packages it imports are installed --no-deps into their own directory
# (requirements-titan.txt), put on PYTHONPATH by the script, so torch is
# never replaced and the venv `make test` uses is unchanged.
TITAN_SITE := $(BUILD)/titan-site
TITAN_STAMP := $(TITAN_SITE)/.deps-stamp
TITAN_STEPS ?= 8
$(TITAN_STAMP): requirements-titan.txt | $(DEPS_STAMP)
	rm -rf $(TITAN_SITE)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --target $(TITAN_SITE) -r requirements-titan.txt
	touch $@

titan: install $(TITAN_STAMP)
	$(PY) examples/titan/run_titan.py --steps $(TITAN_STEPS) --site $(TITAN_SITE)

$(BUILD)/bench/runtime_bench: bench/runtime_bench.c $(BUILD)/release/libtorchtpu_core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -o $@ $^ $(LDLIBS)

# Every benchmark of bench/ beside its peers (PyTorch CPU eager and Inductor,
# PyTorch/XLA in its own venv); writes bench/RESULTS.md, bench/results.json
# and bench/*.png. The PyTorch/XLA venv is best effort: if it cannot be
# made, RESULTS.md says why and the rest still runs.
XLA_VENV := .venv-xla
XLA_PY := $(XLA_VENV)/bin/python
XLA_STAMP := $(XLA_VENV)/.deps-stamp
BENCH_STAMP := $(VENV)/.bench-deps-stamp

$(BENCH_STAMP): bench/requirements.txt | $(DEPS_STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	touch $@

$(XLA_STAMP):
	@mkdir -p $(BUILD)/bench
	-( test -x $(XLA_PY) || $(PYTHON) -m venv $(XLA_VENV) ) > $(BUILD)/bench/xla-install.log 2>&1 && \
	  $(XLA_PY) -m pip install -q --disable-pip-version-check torch==2.9.0 torch_xla==2.9.0 \
	    >> $(BUILD)/bench/xla-install.log 2>&1 && touch $@

bench: install $(BUILD)/bench/runtime_bench $(BENCH_STAMP) $(XLA_STAMP)
	$(PY) bench/run_all.py

info: install
	$(PY) -m torchtpu.info

# OpInfo conformance sweep: every OpInfo op x dtype x sample on tpu vs CPU,
# crash-isolated in worker subprocesses; writes conformance/results/opinfo.{json,md}.
# `make test` runs only its fast subset (tests/test_opinfo.py); this one fails
# when a section falls under its floor in conformance/floors.json ("full").
conformance: install
	$(PY) -m conformance.run --check-floors

clean:
	rm -rf $(BUILD) torchtpu/*.so *.egg-info
