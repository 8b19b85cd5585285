"""OpInfo conformance sweep: every OpInfo op x dtype (float32, bfloat16,
int64, bool where supported) x sample, forward on tpu vs CPU, and gradients
for differentiable float32 ops.

    python -m conformance.run [--fast] [--ops a,b] [--dtypes float32,bool]
                              [--modes fwd,bwd,err,out,inplace] [--out DIR]
                              [--workers 2]

Modes: fwd (outputs), bwd (float32 gradients), err (every error_inputs
sample raises on tpu the exception type CPU raises), out (out= tensors
contiguous, strided, of a wrong shape, of a wrong dtype, as CPU), inplace
(the in-place variant, its errors included, as CPU).

Samples run in worker subprocesses (worker.py) fed one job (op, dtype, mode)
at a time. When a worker dies, the sample it had in flight is recorded as a
crash, re-run alone in a fresh worker to confirm, and the sweep resumes after
it; a sample running past --sample-timeout is killed and recorded as an error.
After the sweep, every op with a mismatch or error runs again in a fresh
worker: failures that pass there are flagged as depending on what ran before
(engine state leaking between ops), while the sweep's outcome is what counts.
Writes DIR/opinfo.json and DIR/opinfo.md; the last line printed is
`opinfo: P passed, M mismatched, E errored, C crashed of N samples; F ops use CPU fallback`.
"""
import argparse
import collections
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

from . import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_DTYPES = ("float32", "bfloat16", "int64", "bool")


ALL_MODES = ("fwd", "bwd", "err", "out", "inplace")


def plan(ops_filter=None, dtypes=ALL_DTYPES, modes=ALL_MODES, stop=None):
    """Jobs in op_db order: forward for each supported dtype, then the
    float32 gradient job for differentiable ops, then (float32) the op's
    error_inputs, its out= variants and its in-place variant where it has
    them."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # driver never touches tpu
    import warnings
    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from .ops import op_key
    jobs = []
    for op in op_db:
        key = op_key(op)
        if ops_filter and key not in ops_filter and op.name not in ops_filter:
            continue
        supported = op.supported_dtypes("cpu")
        for dt in dtypes:
            if "fwd" in modes and getattr(torch, dt) in supported:
                jobs.append({"op": key, "dtype": dt, "mode": "fwd", "start": 0, "stop": stop})
        if ("bwd" in modes and "float32" in dtypes and op.supports_autograd
                and torch.float32 in op.supported_backward_dtypes("cpu")):
            jobs.append({"op": key, "dtype": "float32", "mode": "bwd", "start": 0, "stop": stop})
        f32 = "float32" in dtypes and torch.float32 in supported
        wanted = {"err": op.error_inputs_func is not None,
                  "out": f32 and op.supports_out,
                  "inplace": f32 and op.inplace_variant is not None}
        for mode in ("err", "out", "inplace"):
            if mode in modes and wanted[mode]:
                jobs.append({"op": key, "dtype": "float32", "mode": mode, "start": 0,
                             "stop": stop})
    for i, job in enumerate(jobs):
        job["id"] = i
    return jobs


class Results:
    """Per (op, dtype, mode): sample count and each sample's record."""

    def __init__(self):
        self.n = {}
        self.samples = collections.defaultdict(dict)   # job key -> k -> record
        self.rechecks = collections.defaultdict(dict)  # job key -> k -> outcome when fresh
        self.job_errors = {}                           # job key -> message
        self.fallback_reasons = {}                     # aten op -> why it ran on CPU

    @staticmethod
    def key(job):
        return (job["op"], job["dtype"], job["mode"])

    def record(self, job, k, status, msg, fallback=(), secs=None):
        self.samples[self.key(job)][k] = {"status": status, "msg": msg,
                                          "fallback": list(fallback), "secs": secs}

    def failing(self):
        """Job keys with a mismatch or error (crashes are re-run already)."""
        return [key for key, recs in self.samples.items()
                if any(r["status"] in ("mismatch", "error") for r in recs.values())]


class Worker:
    """One `python -m conformance.worker` subprocess and the job it runs.
    A worker serves jobs of one group only: None for the plain sweep, or its
    own group for a run that must start from a fresh process."""

    def __init__(self, extra_args, log_dir, index):
        self.log_path = os.path.join(log_dir, f"worker{index}.log")
        self.log = open(self.log_path, "ab")
        self.log_start = self.log.tell()
        env = dict(os.environ, TORCHTPU_FALLBACK="silent", PYTHONUNBUFFERED="1")
        env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conformance.worker", *extra_args],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, start_new_session=True)
        self.buf = b""
        self.ready = False
        self.job = None
        self.group = None
        self.inflight = None        # sample index started but not finished
        self.since = time.monotonic()
        self.jobs_run = 0
        self.rss_mb = 0
        self.maps = 0

    def fits(self, job):
        return self.jobs_run == 0 or self.group == job.get("group")

    def send(self, job):
        if self.jobs_run == 0:
            self.group = job.get("group")
        self.job, self.inflight, self.since = job, None, time.monotonic()
        self.jobs_run += 1
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()

    def lines(self):
        """Complete protocol lines read so far; None at end of file."""
        data = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not data:
            return None
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        return [json.loads(x) for x in done if x.strip()]

    def stderr_tail(self, n=3):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start)
            text = f.read().decode(errors="replace")
        lines = [ln.strip() for ln in text.splitlines()
                 if ln.strip() and not ln.startswith("WARNING: All log messages before absl")]
        return " | ".join(lines[-n:])[:400]

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()


def _death(rc):
    return f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"


class Sweep:
    """Feeds jobs to at most `workers` worker processes and turns their
    reports, deaths and hangs into Results.

    Job roles: None (the sweep proper), "isolate" (a crashed sample again,
    alone in a fresh process, to confirm the crash belongs to it) and
    "recheck" (after the sweep, each op with failures again in a fresh
    process: a failure that passes there depends on what ran before it)."""

    def __init__(self, workers=2, sample_timeout=120.0, job_budget=None, inject_fault=None,
                 max_rss_mb=4000, max_maps=30000, progress=True):
        self.workers, self.sample_timeout = workers, sample_timeout
        # Fresh processes before memory, or the memory mappings each compiled
        # program keeps (vm.max_map_count, 65530), run out.
        self.max_rss_mb, self.max_maps = max_rss_mb, max_maps
        self.progress = progress
        self.extra = []
        if inject_fault:
            self.extra += ["--inject-fault", inject_fault]
        if job_budget:
            self.extra += ["--job-budget", str(job_budget)]
        self.log_dir = tempfile.mkdtemp(prefix="conformance-")
        self.sel = selectors.DefaultSelector()
        self.slots = [None] * workers
        # One queue per worker slot, filled round-robin: each worker sees
        # the same jobs in the same order on every run, so failures that
        # depend on earlier ops reproduce run to run.
        self.queues = [collections.deque() for _ in range(workers)]
        self.results = Results()
        self.spawned = self.finished = 0

    def run(self, jobs, recheck=True):
        self._deal(jobs)
        self._drain(len(jobs))
        if recheck:
            again = self._recheck_jobs(jobs)
            if again:
                print(f"conformance: re-running {len(again)} failing jobs in fresh processes",
                      flush=True)
                self._deal(again)
                self._drain(len(again))
        for i in range(self.workers):
            if self.slots[i] is not None:
                self._retire(i)
        return self.results

    def _deal(self, jobs):
        """Round-robin over slots; the jobs of one group stay together."""
        groups = collections.defaultdict(list)
        for job in jobs:
            groups[job.get("group") or job["id"]].append(job)
        for n, group in enumerate(groups.values()):
            self.queues[n % self.workers].extend(group)

    def _recheck_jobs(self, jobs):
        failing = set(self.results.failing())
        return [dict(job, role="recheck", group="recheck:" + job["op"], start=0)
                for job in jobs if Results.key(job) in failing]

    def _spawn(self, i):
        w = Worker(self.extra, self.log_dir, i)
        self.spawned += 1
        self.sel.register(w.proc.stdout, selectors.EVENT_READ, i)
        self.slots[i] = w

    def _retire(self, i):
        self.sel.unregister(self.slots[i].proc.stdout)
        self.slots[i].close()
        self.slots[i] = None

    def _busy(self):
        return any(w is not None and w.job is not None for w in self.slots)

    def _drain(self, total):
        self.finished, last_progress = 0, time.monotonic()
        while any(self.queues) or self._busy():
            self._dispatch()
            for key, _ in self.sel.select(timeout=1.0):
                i = key.data
                lines = self.slots[i].lines()
                if lines is None:
                    self._on_death(i, _death(self.slots[i].proc.wait()))
                    continue
                for ev in lines:
                    self._on_line(self.slots[i], ev)
            now = time.monotonic()
            for i, w in enumerate(self.slots):
                if w is not None and w.job is not None and now - w.since > self.sample_timeout:
                    w.kill()
                    where = " in one sample" if w.inflight is not None else " generating samples"
                    self._on_death(i, f"timeout: over {self.sample_timeout:g}s{where}")
            if self.progress and now - last_progress > 30:
                last_progress = now
                running = ", ".join(f"{w.job['op']} {w.job['dtype']}/{w.job['mode']} #{w.inflight}"
                                    for w in self.slots if w is not None and w.job is not None)
                print(f"  ... {self.finished}/{total} jobs, {self.spawned} workers started; "
                      f"running {running}", flush=True)

    def _dispatch(self):
        for i in range(self.workers):
            w, queue = self.slots[i], self.queues[i]
            if w is not None and w.job is None and w.ready and (
                    not queue or not w.fits(queue[0])
                    or w.rss_mb > self.max_rss_mb or w.maps > self.max_maps):
                self._retire(i)
                w = None
            if w is None and queue:
                self._spawn(i)
                w = self.slots[i]
            if w is not None and w.ready and w.job is None and queue:
                w.send(queue.popleft())

    def _requeue_after(self, queue, job, k):
        """The rest of job after sample k, ahead of everything else."""
        stop, n = job.get("stop"), self.results.n.get(Results.key(job))
        if n is not None and (stop is None or stop > n):
            stop = n
        if stop is None or k + 1 < stop:
            queue.appendleft(dict(job, start=k + 1))

    def _on_death(self, i, why):
        """Worker i is gone: pin the failure on its in-flight sample."""
        w = self.slots[i]
        job, k = w.job, w.inflight
        tail = w.stderr_tail()
        self._retire(i)
        if job is None:
            if w.jobs_run == 0 and not w.ready:
                raise RuntimeError(f"worker failed to start ({why}): {tail}")
            return
        status = "error" if why.startswith("timeout") else "crash"
        key, role = Results.key(job), job.get("role")
        if k is None:
            if role is None:
                self.results.job_errors[key] = f"{status} outside a sample ({why}): {tail}"
            return
        if role == "isolate":
            rec = self.results.samples[key][k]
            rec["msg"] += f"; reproduces alone ({why})" if status == "crash" else f"; alone: {why}"
            return
        if role == "recheck":
            self.results.rechecks[key][k] = status
        else:
            self.results.record(job, k, status, f"{why}: {tail}" if status == "crash" else why,
                                secs=round(time.monotonic() - w.since, 1))
        self._requeue_after(self.queues[i], job, k)
        if status == "crash" and role is None:
            self.queues[i].appendleft(dict(job, start=k, stop=k + 1, role="isolate",
                                       group=f"isolate:{job['id']}:{k}"))

    def _on_line(self, w, ev):
        kind = ev["event"]
        if kind == "ready":
            w.ready = True
            return
        job = w.job
        key, role = Results.key(job), job.get("role")
        if kind == "start":
            w.inflight, w.since = ev["k"], time.monotonic()
        elif kind == "samples":
            self.results.n[key] = ev["n"]
            w.since = time.monotonic()
        elif kind == "result":
            w.inflight = None
            if role == "isolate":
                self.results.samples[key][ev["k"]]["msg"] += \
                    f"; did not reproduce alone ({ev['status']})"
            elif role == "recheck":
                self.results.rechecks[key][ev["k"]] = ev["status"]
            else:
                self.results.record(job, ev["k"], ev["status"], ev["msg"], ev["fallback"],
                                    ev["secs"])
        elif kind == "error" and role is None:
            self.results.job_errors[key] = ev["msg"]
        elif kind == "done":
            w.job, w.inflight, w.rss_mb, w.maps = None, None, ev["rss_mb"], ev.get("maps", 0)
            self.results.fallback_reasons.update(ev.get("reasons", {}))
            self.finished += 1


def _command(argv):
    """The command line minus options that do not change results."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--out", "--label"):
            skip = True
        elif not a.startswith(("--out=", "--label=")):
            kept.append(a)
    return " ".join(["python -m conformance.run", *kept])


def _describe():
    r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true",
                        help="first float32 sample of every op, forward only (with "
                             "--modes: those checks; out= with every variant)")
    parser.add_argument("--ops", help="comma-separated op names (OpInfo name or name.variant)")
    parser.add_argument("--dtypes", help="comma-separated, of " + ",".join(ALL_DTYPES))
    parser.add_argument("--modes", default=None,
                        help="comma-separated, of " + ",".join(ALL_MODES))
    parser.add_argument("--max-samples", type=int, help="samples per (op, dtype, mode) at most")
    parser.add_argument("--out", default=os.path.join(ROOT, "conformance", "results"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample-timeout", type=float, default=120.0)
    parser.add_argument("--job-budget", type=float,
                        help="seconds per (op, dtype, mode); later samples become timeout errors")
    parser.add_argument("--no-recheck", action="store_true",
                        help="do not re-run failing jobs in fresh processes (off with --fast)")
    parser.add_argument("--label", help="what was measured (default: git describe of the checkout)")
    parser.add_argument("--check-floors", action="store_true",
                        help="exit 1 when a section of the full sweep falls under conformance/floors.json")
    parser.add_argument("--inject-fault", help=argparse.SUPPRESS)  # OP:K:abort|hang, for tests
    args = parser.parse_args(argv)
    args.modes_given = args.modes is not None
    if args.modes is None:
        args.modes = ",".join(ALL_MODES)

    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else ALL_DTYPES
    modes = tuple(args.modes.split(","))
    stop = args.max_samples
    if args.fast:
        # The first float32 sample of every op: forward (CI's subset), or
        # the checks named by --modes (out=: with every out variant).
        dtypes, stop = ("float32",), 1
        modes = tuple(m for m in modes if m != "bwd") if args.modes_given else ("fwd",)
    ops_filter = set(args.ops.split(",")) if args.ops else None
    t0 = time.monotonic()
    jobs = plan(ops_filter, dtypes, modes, stop)
    if args.fast:
        from .ops import OUT_VARIANTS
        for job in jobs:
            if job["mode"] == "out":
                job["stop"] = len(OUT_VARIANTS)
    print(f"conformance: {len(jobs)} jobs, {args.workers} workers", flush=True)
    sweep = Sweep(args.workers, args.sample_timeout, args.job_budget, args.inject_fault)
    results = sweep.run(jobs, recheck=not (args.fast or args.no_recheck))
    wall = time.monotonic() - t0
    command = _command(sys.argv[1:] if argv is None else argv)
    doc = report.build(jobs, results, {"command": command, "wall_s": round(wall, 1),
                                       "workers": args.workers,
                                       "source": args.label or _describe()})
    os.makedirs(args.out, exist_ok=True)
    report.write(doc, args.out)
    for line in report.summary_lines(doc):
        print(line)
    if args.check_floors:
        below = check_floors(doc)
        for line in below:
            print("below floor: " + line)
        if below:
            sys.exit(1)
    return doc


def check_floors(doc):
    """The sections of a full sweep under their floors in
    conformance/floors.json ("full": device-native pass % for forward and
    backward, pass % for the err / out / inplace checks; crashes must be
    0). Returns one line per shortfall."""
    with open(os.path.join(ROOT, "conformance", "floors.json")) as f:
        floors = json.load(f).get("full", {})
    below = []
    for sec, floor in floors.items():
        if sec.startswith("_"):
            continue
        t = doc["totals"].get(sec)
        if not t or not t.get("compared"):
            below.append(f"{sec}: not measured")
            continue
        for key, want in floor.items():
            got = 100.0 * (t["pass"] - t["pass_fallback"] if key == "native_pct" else t["pass"]) / t["compared"]
            if got < want:
                below.append(f"{sec} {key} {got:.1f} < {want}")
        if t.get("crash"):
            below.append(f"{sec}: {t['crash']} crashed")
    return below


if __name__ == "__main__":
    main()
