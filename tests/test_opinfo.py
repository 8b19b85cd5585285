"""OpInfo conformance (conformance/): the fast subset (first float32 sample of
every OpInfo op) against the committed floors, and the driver's crash and
hang isolation. The full sweep is `make conformance`."""
import json
import os
import subprocess
import sys

from conftest import ROOT

FLOORS = os.path.join(ROOT, "conformance", "floors.json")


def run_sweep(out_dir, *args, timeout=600):
    r = subprocess.run([sys.executable, "-m", "conformance.run", "--out", str(out_dir), *args],
                       capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    with open(os.path.join(out_dir, "opinfo.json")) as f:
        return json.load(f), r.stdout.strip().splitlines()


def test_fast_subset_meets_floors(tmp_path):
    doc, lines = run_sweep(tmp_path, "--fast")
    assert lines[-1].startswith("opinfo: ") and "ops use CPU fallback" in lines[-1]
    got = doc["totals"]["float32/fwd"]
    with open(FLOORS) as f:
        floor = json.load(f)["fast"]["float32/fwd"]
    crashes = [line for line in lines if line.startswith("crash:")]
    assert got["crash"] == 0, crashes
    native = got["pass"] - got["pass_fallback"]
    assert got["pass"] >= floor["pass"], (
        f"fast subset: {got['pass']} samples pass, floor {floor['pass']}: " + lines[-1])
    assert native >= floor["pass_native"], (
        f"fast subset: {native} pass without CPU fallback, floor {floor['pass_native']}")
    if got["pass"] > floor["pass"] or native > floor["pass_native"]:
        print(f"fast subset above floors ({got['pass']}, {native} native): raise {FLOORS}")


def test_abort_is_pinned_on_its_sample_and_the_sweep_goes_on(tmp_path):
    doc, lines = run_sweep(tmp_path, "--ops", "add,sub,mul", "--dtypes", "float32",
                           "--modes", "fwd", "--max-samples", "4", "--no-recheck",
                           "--sample-timeout", "10", "--inject-fault", "mul:1:abort,sub:2:hang")
    ops = doc["ops"]
    assert ops["mul"]["float32/fwd"]["codes"] == "PCPP"
    crash, = [f for f in ops["mul"]["float32/fwd"]["failures"] if f["status"] == "crash"]
    assert crash["samples"] == [1]
    assert "SIGABRT" in crash["msg"] and "reproduces alone" in crash["msg"], crash
    assert ops["sub"]["float32/fwd"]["codes"] == "PPEP"
    hang, = [f for f in ops["sub"]["float32/fwd"]["failures"] if f["status"] == "error"]
    assert hang["msg"].startswith("timeout") and hang["samples"] == [2], hang
    assert ops["add"]["float32/fwd"]["codes"] == "PPPP"
    assert lines[-1] == ("opinfo: 10 passed, 0 mismatched, 1 errored, 1 crashed of 12 samples; "
                         "0 ops use CPU fallback")
