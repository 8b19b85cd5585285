"""Conformance worker: runs jobs sent by the driver (run.py), one JSON line
each on stdin, and reports every sample as JSON lines on its stdout.

A job is {"id", "op", "dtype", "mode": "fwd"|"bwd"|"err"|"out"|"inplace",
"start", "stop"}. For
each sample the worker first reports {"event": "start", "k"} and then
{"event": "result", ...}, so when the process dies the driver knows which
sample was in flight. Samples come from a per-job seed, so a fresh worker
regenerates the same list and can resume after the sample that crashed.
"""
import argparse
import json
import os
import resource
import sys
import time
import warnings
import zlib

os.environ.setdefault("TORCHTPU_FALLBACK", "silent")


def _protocol_stream():
    """A private copy of stdout for the protocol; fd 1 then points at stderr
    so anything an op prints cannot corrupt it."""
    fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(fd, "w", buffering=1)


def _map_count():
    """Memory mappings held: each compiled XLA program keeps some, and
    vm.max_map_count (65530 by default) makes LLVM fail past it."""
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def job_seed(job):
    return zlib.crc32(f"{job['op']}/{job['dtype']}/{job['mode']}".encode())


def samples_of(op, job):
    """The job's samples (from its seed) and, per sample, the leaf
    positions that stay on the CPU. Mode fwd / bwd: the op's samples; err:
    its error_inputs; out: (sample, out= variant) pairs of its first
    samples; inplace: its samples, for the in-place variant."""
    import torch
    from .check import DTYPES
    from .ops import OUT_SAMPLES, OUT_VARIANTS, cpu_pinned
    dtype, grad = DTYPES[job["dtype"]], job["mode"] == "bwd"
    torch.manual_seed(job_seed(job))
    if job["mode"] == "err":
        return list(op.error_inputs("cpu")), None
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    pinned = cpu_pinned(op, dtype, grad)
    if pinned is None or len(pinned) != len(samples):
        pinned = [frozenset()] * len(samples)
    if job["mode"] == "out":
        items = [(s, v) for s in samples[:OUT_SAMPLES] for v in OUT_VARIANTS]
        return items, [p for p in pinned[:OUT_SAMPLES] for _ in OUT_VARIANTS]
    return samples, pinned


def run_job(job, ops, emit, faults=None, budget=None):
    from . import check
    from .ops import comparability
    op = ops[job["op"]]
    kind = comparability(op)
    try:
        samples, pinned = samples_of(op, job)
    except Exception as e:  # noqa: BLE001
        emit(event="error", msg="sample generation: " + check.format_error(e))
        return
    stop = len(samples) if job.get("stop") is None else min(job["stop"], len(samples))
    emit(event="samples", n=len(samples))
    run = {"fwd": check.run_forward, "bwd": check.run_backward, "err": check.run_error,
           "out": check.run_out, "inplace": check.run_inplace}[job["mode"]]
    if pinned is None:
        pinned = [frozenset()] * len(samples)
    t_job = time.monotonic()
    for k in range(job.get("start", 0), stop):
        emit(event="start", k=k)
        fault = (faults or {}).get(f"{job['op']}:{k}")
        if fault == "abort":      # crash-isolation self-test (run.py --inject-fault)
            os.abort()
        if fault == "hang":
            time.sleep(1e9)
        t0 = time.monotonic()
        if budget is not None and t0 - t_job > budget:
            status, msg, used = "error", f"timeout: op budget of {budget:g}s spent", []
        else:
            try:
                status, msg, used = run(op, samples[k], check.DTYPES[job["dtype"]], kind,
                                        pinned[k])
            except Exception as e:  # noqa: BLE001  (comparing failed: not a crash)
                status, msg, used = "error", "harness: " + check.format_error(e), []
        emit(event="result", k=k, status=status, msg=msg, fallback=used,
             secs=round(time.monotonic() - t0, 4))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--inject-fault", default="",
                        help="OP:K:abort|hang,...: sample K of op OP aborts or hangs")
    parser.add_argument("--job-budget", type=float, help="seconds per job before its "
                        "remaining samples are recorded as timeout errors")
    args = parser.parse_args(argv)
    faults = dict(f.rsplit(":", 1) for f in args.inject_fault.split(",") if f)
    out = _protocol_stream()
    warnings.simplefilter("ignore")
    import torch
    import torchtpu
    from torch.testing._internal.common_methods_invocations import op_db
    from .ops import op_key
    torch.set_num_threads(1)
    ops = {op_key(op): op for op in op_db}
    out.write(json.dumps({"event": "ready"}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)

        def emit(**fields):
            out.write(json.dumps({"id": job["id"], **fields}) + "\n")
        run_job(job, ops, emit, faults, args.job_budget)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        emit(event="done", rss_mb=rss_mb, maps=_map_count(),
             reasons=torchtpu.metrics.fallback_reasons())


if __name__ == "__main__":
    main()
