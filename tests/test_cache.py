"""The persistent executable caches (tiers 2 and 3): each test runs a small
workload in fresh interpreters sharing a cache directory and reads their
metrics and results (checked against CPU torch inside the workload)."""
import json
import os
import re
import subprocess
import sys

import pytest

import torchtpu
from torchtpu import _C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COUNTERS = ["compiles", "cache_hits::local", "cache_hits::shared", "cache_misses::disk",
            "compile_ns_saved", "cache_entries_rejected", "cache_evictions"]

# A few ops on tpu, each compared with the same ops on CPU; prints one JSON line.
WORKLOAD = r"""
import json, torch, torchtpu
torch.manual_seed(0)
x, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
def f(x, w, b):
    h = torch.nn.functional.gelu(x @ w + b)
    return [h, h.softmax(dim=1), h.sum(dim=0), (x * 2.5).mean(), torch.cat([h, -h], dim=1).amax(1)]
got = [t.cpu() for t in f(x.to("tpu"), w.to("tpu"), b.to("tpu"))]
want = f(x, w, b)
err = max((g - r).abs().max().item() for g, r in zip(got, want))
ok = all(torch.allclose(g, r, rtol=1e-4, atol=1e-5) for g, r in zip(got, want))
m = torchtpu.metrics.metrics()
print(json.dumps({"ok": ok, "err": err, "metrics": {k: m.get(k, 0) for k in %r}}))
""" % COUNTERS


def _env(local, shared=None, **extra):
    env = dict(os.environ)
    env["TORCHTPU_CACHE_DIR"] = str(local)
    env.pop("TORCHTPU_SHARED_CACHE_DIR", None)
    env.pop("TORCHTPU_CACHE", None)
    env.pop("TORCHTPU_CACHE_MAX_BYTES", None)
    # The counts below are per op program: strict mode, whatever mode the
    # suite itself runs in (defer_and_fuse would fuse the workload).
    env["TORCHTPU_EAGER_MODE"] = "strict"
    if shared is not None:
        env["TORCHTPU_SHARED_CACHE_DIR"] = str(shared)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _parse(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"], out  # device results match CPU torch
    return out["metrics"]


def run_workload(local, shared=None, **extra):
    """Runs WORKLOAD in a fresh interpreter; returns its metrics."""
    proc = subprocess.run([sys.executable, "-c", WORKLOAD], capture_output=True, text=True,
                          env=_env(local, shared, **extra), timeout=300, cwd=ROOT)
    return _parse(proc)


def entries(directory):
    """{name: size} of the cache entries in `directory`."""
    if not os.path.isdir(directory):
        return {}
    return {n: os.path.getsize(os.path.join(directory, n))
            for n in os.listdir(directory) if n.endswith(".entry")}


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """One cold run: its cache directory and metrics (the reference count of
    programs the workload compiles)."""
    directory = tmp_path_factory.mktemp("cold")
    metrics = run_workload(directory)
    return directory, metrics


def test_version_matches_c_header():
    with open(os.path.join(ROOT, "csrc", "core", "version.h")) as f:
        c_version = re.search(r'#define TPU_VERSION "([^"]+)"', f.read()).group(1)
    assert c_version == torchtpu.__version__


def test_cold_run_compiles_and_writes_one_entry_per_program(cold):
    directory, m = cold
    assert m["compiles"] >= 5
    assert m["cache_misses::disk"] == m["compiles"]
    assert m["cache_hits::local"] == 0
    files = entries(directory)
    assert len(files) == m["compiles"]
    assert all(size > 80 for size in files.values())
    assert not [n for n in os.listdir(directory) if n.endswith((".lock", ".tmp"))]


def test_second_process_loads_everything_from_disk(cold):
    directory, first = cold
    m = run_workload(directory)
    assert m["compiles"] == 0
    assert m["cache_misses::disk"] == 0
    assert m["cache_hits::local"] == first["compiles"]
    assert m["compile_ns_saved"] > 0
    assert len(entries(directory)) == first["compiles"]


def test_other_xla_flags_do_not_reuse_entries(tmp_path, cold):
    """XLA_FLAGS change what the plugin's compiler emits: entries written
    under other flags are another program, compiled anew (and then reused
    under those flags)."""
    import shutil
    directory, first = tmp_path / "cache", cold[1]
    shutil.copytree(cold[0], directory)
    flags = "--xla_cpu_enable_fast_min_max=false"
    m = run_workload(directory, XLA_FLAGS=flags)
    assert m["compiles"] == first["compiles"]
    assert m["cache_hits::local"] == 0
    assert len(entries(directory)) == 2 * first["compiles"]
    m = run_workload(directory, XLA_FLAGS=flags)
    assert m["compiles"] == 0 and m["cache_hits::local"] == first["compiles"]


def test_damaged_entries_are_rejected_and_recompiled(tmp_path, cold):
    _, first = cold
    run_workload(tmp_path)
    names = sorted(entries(tmp_path))
    corrupted, truncated = (os.path.join(tmp_path, n) for n in names[:2])
    with open(corrupted, "r+b") as f:  # flip one payload byte
        f.seek(os.path.getsize(corrupted) // 2 + 40)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) // 2)

    m = run_workload(tmp_path)
    assert m["cache_entries_rejected"] == 2
    assert m["compiles"] == 2
    assert m["cache_hits::local"] == first["compiles"] - 2
    # Both were replaced by good entries: the next process compiles nothing.
    m = run_workload(tmp_path)
    assert m["compiles"] == 0 and m["cache_entries_rejected"] == 0
    assert m["cache_hits::local"] == first["compiles"]


def test_cold_processes_started_together_compile_each_program_once(tmp_path, cold):
    _, first = cold
    procs = [subprocess.Popen([sys.executable, "-c", WORKLOAD], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(tmp_path), cwd=ROOT)
             for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append(_parse(subprocess.CompletedProcess(p.args, p.returncode, out, err)))
    n = first["compiles"]
    assert sum(m["compiles"] for m in results) == n
    assert sum(m["cache_hits::local"] for m in results) == n
    assert len(entries(tmp_path)) == n


def test_shared_tier_serves_a_new_host_and_fills_its_local_cache(tmp_path, cold):
    _, first = cold
    n = first["compiles"]
    shared, host_a, host_b = tmp_path / "shared", tmp_path / "a", tmp_path / "b"
    m = run_workload(host_a, shared)
    assert m["compiles"] == n
    assert len(entries(shared)) == n and len(entries(host_a)) == n
    m = run_workload(host_b, shared)
    assert m["compiles"] == 0 and m["cache_hits::shared"] == n
    assert entries(host_b) == entries(shared)
    m = run_workload(host_b, shared)
    assert m["cache_hits::local"] == n and m["cache_hits::shared"] == 0


def test_directory_stays_under_the_size_cap(tmp_path, cold):
    directory, first = cold
    sizes = sorted(entries(directory).values())
    cap = sum(sizes) // 3
    assert cap >= sizes[-1]  # every entry fits on its own
    for _ in range(2):
        m = run_workload(tmp_path, TORCHTPU_CACHE_MAX_BYTES=cap)
        assert sum(entries(tmp_path).values()) <= cap
    assert m["cache_evictions"] > 0
    # What is left is still good: those programs load instead of compiling.
    assert m["cache_hits::local"] + m["compiles"] == first["compiles"]


def test_cache_off_writes_nothing(tmp_path, cold):
    _, first = cold
    m = run_workload(tmp_path / "off", TORCHTPU_CACHE=0)
    assert m["compiles"] == first["compiles"]
    assert m["cache_misses::disk"] == 0
    assert not os.path.exists(tmp_path / "off")


def test_info_reports_the_cache_directories(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torchtpu.info"], capture_output=True,
                          text=True, env=_env(tmp_path / "local", tmp_path / "shared"),
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("cache:"))
    assert f"local {tmp_path / 'local'}" in line and f"shared {tmp_path / 'shared'}" in line


@pytest.mark.skipif(os.environ.get("TORCHTPU_CACHE") == "0", reason="caches off")
def test_this_session_uses_the_directory_conftest_chose():
    local, _, max_bytes = _C._cache_dirs()
    assert local == os.environ["TORCHTPU_CACHE_DIR"]  # a temp dir unless set explicitly
    assert max_bytes == 10 << 30 or "TORCHTPU_CACHE_MAX_BYTES" in os.environ


# Many shapes through every eager mode and compiled graphs, with a cap of 16
# loaded executables: each result as on CPU, the cap held, programs
# unloaded and loaded again (a process compiling without end would run out
# of memory maps, each executable holding its own).
CAPPED = r"""
import json, torch, torchtpu
from torchtpu import _C
torch.manual_seed(0)
bad, peak = [], 0
g = torch.compile(lambda a, b: (a * b).sin().sum(0), backend="tpu", dynamic=False)
for rnd in range(2):  # the second round loads again what the cap unloaded
    for mode in ("strict", "defer_and_fuse", "debug"):
        _C._set_eager_mode(mode)
        for n in range(1, 13):
            x, y = torch.randn(n, 3), torch.randn(3)
            want = [(x * y + 1).relu().sum(1), x.t() @ x, g(x, y)]
            xt, yt = x.to("tpu"), y.to("tpu")
            got = [t.cpu() for t in [(xt * yt + 1).relu().sum(1), xt.t() @ xt, g(xt, yt)]]
            if not all(torch.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(got, want)):
                bad.append((rnd, mode, n))
            peak = max(peak, _C._program_cache_size())
m = torchtpu.metrics.metrics()
print(json.dumps({"bad": bad, "peak": peak, "evicted": m.get("program_cache_evictions", 0)}))
"""


def test_loaded_executables_stay_under_the_cap(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CAPPED], capture_output=True, text=True,
                          env=_env(tmp_path, TORCHTPU_PROGRAM_CACHE_MAX=16), timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["bad"] == []
    assert out["peak"] <= 16
    assert out["evicted"] > 0


_M = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                           0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _xxh64(data, seed=0):
    """XXH64, the entry format's checksum: what a tool forging an entry computes."""
    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & _M

    def rnd(acc, v):
        return rotl((acc + v * _P2) & _M, 31) * _P1 & _M

    def merge(acc, v):
        return ((acc ^ rnd(0, v)) * _P1 + _P4) & _M

    n, p = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        while p + 32 <= n:
            for i in range(4):
                v[i] = rnd(v[i], int.from_bytes(data[p + 8 * i:p + 8 * i + 8], "little"))
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & _M
        for x in v:
            h = merge(h, x)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 8 <= n:
        h = (rotl(h ^ rnd(0, int.from_bytes(data[p:p + 8], "little")), 27) * _P1 + _P4) & _M
        p += 8
    if p + 4 <= n:
        h = (rotl(h ^ (int.from_bytes(data[p:p + 4], "little") * _P1 & _M), 23) * _P2 + _P3) & _M
        p += 4
    while p < n:
        h = rotl(h ^ (data[p] * _P5 & _M), 11) * _P1 & _M
        p += 1
    h ^= h >> 33
    h = h * _P2 & _M
    h ^= h >> 29
    h = h * _P3 & _M
    return h ^ (h >> 32)


def _forge(entry, payload):
    """entry's header with another payload, both checksums made valid."""
    head = bytearray(entry[:80])
    head[48:56] = len(payload).to_bytes(8, "little")
    head[56:64] = _xxh64(payload).to_bytes(8, "little")
    head[72:80] = _xxh64(bytes(head[:72])).to_bytes(8, "little")
    return bytes(head) + payload


SWAPPED = r"""
import json, torch, torchtpu
x = torch.tensor([0.5, 1.0, 2.0])
got = {"exp": torch.exp(x.to("tpu")).cpu().tolist(), "sin": torch.sin(x.to("tpu")).cpu().tolist()}
m = torchtpu.metrics.metrics()
print(json.dumps({"got": got, "want": {"exp": torch.exp(x).tolist(), "sin": torch.sin(x).tolist()},
                  "foreign": m.get("cache_entries_foreign", 0),
                  "rejected": m.get("cache_entries_rejected", 0), "compiles": m.get("compiles", 0)}))
"""


def _run(code, directory, timeout=120):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(directory), timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entry_of(op, directory):
    """The name of the entry holding `op`'s program (its only one)."""
    code = ("import torch, torchtpu\nx = torch.tensor([0.5, 1.0, 2.0])\n"
            f"print(torch.{op}(x.to('tpu')).cpu().tolist())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(directory), timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(entries(directory))


def test_entries_with_swapped_payloads_are_foreign_and_recompiled(tmp_path):
    # Swapping the payloads of exp's and sin's entries (headers and
    # checksums made valid) made exp return sin(x). Each payload starts with
    # an independent hash of its key, compared on load: such an entry is
    # foreign, counted, recompiled and replaced.
    exp_names, sin_names = _entry_of("exp", tmp_path / "e"), _entry_of("sin", tmp_path / "s")
    (exp_name,), (sin_name,) = exp_names - sin_names, sin_names - exp_names
    d = tmp_path / "shared"
    first = _run(SWAPPED, d)
    assert first["got"] == first["want"]
    e, s = (d / exp_name).read_bytes(), (d / sin_name).read_bytes()
    assert _xxh64(e[:72]) == int.from_bytes(e[72:80], "little")  # the format's own XXH64
    (d / exp_name).write_bytes(_forge(e, s[80:]))
    (d / sin_name).write_bytes(_forge(s, e[80:]))
    second = _run(SWAPPED, d)
    assert second["got"] == second["want"]
    assert second["foreign"] == 2 and second["rejected"] == 2 and second["compiles"] == 2
    third = _run(SWAPPED, d)  # the replacements are sound
    assert third["got"] == third["want"] and third["foreign"] == 0 and third["compiles"] == 0


def test_special_file_at_an_entry_path_is_rejected_without_blocking(tmp_path):
    # A FIFO at an entry's path blocked the process in open()
    first = _run(SWAPPED, tmp_path)
    names = list(entries(tmp_path))
    for name in names:
        (tmp_path / name).unlink()
        os.mkfifo(tmp_path / name)
    second = _run(SWAPPED, tmp_path, timeout=60)  # a hang fails here
    assert second["got"] == second["want"] == first["want"]
    assert second["rejected"] >= len(names)
    assert all((tmp_path / n).is_file() for n in names)  # replaced by sound entries
