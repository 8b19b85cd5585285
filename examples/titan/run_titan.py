"""Trains torchtitan's llama3 debug model on the tpu device with torchtitan's
own entry point (`python -m torchtitan.train` under torchrun) and checks it.

    python examples/titan/run_titan.py [--steps 8] [--site build/titan-site]

Runs, each with debugmodel.toml plus command-line overrides:
  a. eager, one device, DCP checkpoints at steps/2 and steps;
  b. torch.compile (--compile.enable: the blocks and the loss go through
     torchtpu's default-backend route), one device;
  c. FSDP2 on 2 ranks (torchrun --nproc_per_node 2, tpudist);
  d. (a) again from its steps/2 checkpoint (the last one removed first),
     whose losses must equal (a)'s.
Every run's loss must fall; (b) must match (a)'s losses. Prints losses,
tokens/s and MFU as torchtitan logs them (MFU against the measured dot peak,
see torchtpu/integrations/_torchtitan.py), and exits non-zero on a failure.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import assets  # noqa: E402

STEP_RE = re.compile(r"step:\s*(\d+)\s+loss:\s*([\d.]+).*?tps:\s*([\d,]+).*?mfu:\s*([\d.]+)%")
PEAK_RE = re.compile(r"Peak FLOPS used for computing MFU: ([\d.e+]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def train(name, out, args, nproc=1, extra=(), env_extra=None):
    """One torchtitan run; returns {step: (loss, tps, mfu)}, peak, seconds."""
    data, tok = assets.make(os.path.join(out, "assets"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT, os.path.abspath(args.site)] + [p for p in [env.get("PYTHONPATH")] if p])
    # The CPU plugin gives each process one device unless told otherwise;
    # torchtitan 0.2.2 places rank r on tpu:r, so each process creates one
    # device per rank (on a TPU host every process sees every chip).
    env["TORCHTPU_NUM_DEVICES"] = str(nproc)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--local-ranks-filter", "0",
           "-m", "torchtitan.train",
           "--job.config_file", os.path.join(HERE, "debugmodel.toml"),
           "--job.dump_folder", os.path.join(out, name),
           "--model.hf_assets_path", tok, "--training.dataset_path", data,
           "--training.steps", str(args.steps), *extra]
    log_path = os.path.join(out, f"{name}.log")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.perf_counter() - t0
    text = ANSI.sub("", open(log_path).read())
    if rc != 0:
        print(text[-4000:])
        raise SystemExit(f"{name}: torchtitan exited with {rc} (log: {log_path})")
    if "TPU capacity" not in text:  # torchtitan names its device type here
        raise SystemExit(f"{name}: torchtitan did not run on the tpu device (log: {log_path})")
    steps = {}
    for m in STEP_RE.finditer(text):
        steps.setdefault(int(m.group(1)),
                         (float(m.group(2)), float(m.group(3).replace(",", "")), float(m.group(4))))
    peak = PEAK_RE.search(text)
    return steps, float(peak.group(1)) if peak else float("nan"), seconds


def summary(name, steps, peak, seconds):
    losses = [steps[s][0] for s in sorted(steps)]
    later = [steps[s] for s in sorted(steps) if s > min(steps) + 1] or list(steps.values())
    tps = statistics.median(v[1] for v in later)
    mfu = statistics.median(v[2] for v in later)
    print(f"{name:8s} steps {min(steps)}-{max(steps)}  loss "
          + " ".join(f"{x:.4f}" for x in losses)
          + f"  | tokens/s {tps:,.0f}  MFU {mfu:.2f}% (peak {peak / 1e9:.1f} GFLOP/s)"
          + f"  | {seconds:.0f} s")
    return losses


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--site", default=os.path.join(ROOT, "build", "titan-site"))
    p.add_argument("--out", default=os.path.join(ROOT, "build", "titan-runs"))
    args = p.parse_args()
    if args.steps < 4 or args.steps % 2:
        raise SystemExit("--steps must be even and at least 4")
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    half = args.steps // 2
    ckpt = ["--checkpoint.enable", "--checkpoint.interval", str(half)]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("FAILED:", what)

    runs = {}
    t_all = time.perf_counter()
    runs["eager"] = train("eager", args.out, args, extra=ckpt)
    runs["compile"] = train("compile", args.out, args, extra=["--compile.enable"])
    runs["fsdp2"] = train("fsdp2", args.out, args, nproc=2)
    # (d): drop the last checkpoint of (a); the run resumes from steps/2.
    ckpt_dir = os.path.join(args.out, "eager", "checkpoint")
    shutil.rmtree(os.path.join(ckpt_dir, f"step-{args.steps}"))
    shutil.copytree(os.path.join(args.out, "eager"), os.path.join(args.out, "resume"),
                    ignore=shutil.ignore_patterns("tb", "*.log"))
    runs["resume"] = train("resume", args.out, args, extra=ckpt)

    print(f"\nTorchTitan {args.steps} steps of llama3 debugmodel on tpu "
          "(losses, median tokens/s and MFU from step 3 on, wall time):")
    losses = {name: summary(name, *r) for name, r in runs.items()}
    for name, ls in losses.items():
        check(len(ls) == (half if name == "resume" else args.steps), f"{name}: step count {len(ls)}")
        check(ls[-1] < ls[0] - 0.5, f"{name}: loss did not fall ({ls[0]:.4f} -> {ls[-1]:.4f})")
        # torchtitan's fallback for a device it does not know is an A100's
        # 312 TFLOP/s; on tpu the integration supplies the measured peak.
        check(0 < runs[name][1] < 312e12, f"{name}: MFU peak {runs[name][1]:.3e} is not measured")
    diff = max(abs(a - b) for a, b in zip(losses["eager"], losses["compile"]))
    check(diff < 2e-3, f"compile: losses differ from eager by {diff:.2e}")
    resumed = min(runs["resume"][0])
    check(resumed == half + 1, f"resume: started at step {resumed}, not {half + 1}")
    diff_r = max(abs(a - b) for a, b in zip(losses["eager"][half:], losses["resume"]))
    check(diff_r < 1e-4, f"resume: losses differ from the uninterrupted run by {diff_r:.2e}")
    print(f"compile vs eager: max loss difference {diff:.1e}; resumed from step {half} "
          f"vs uninterrupted: {diff_r:.1e}; total {time.perf_counter() - t_all:.0f} s")
    if failures:
        raise SystemExit(f"{len(failures)} check(s) failed: {failures}")
    print("all TorchTitan checks passed")


if __name__ == "__main__":
    main()
