"""Results of a sweep as results/opinfo.json, results/opinfo.md and the
summary lines.

Per (op, dtype, mode) the JSON keeps one code per sample in `codes`:
P pass, M mismatch, E error, C crash, S skip, U unverified, ? no record;
lower case when the tpu run used the CPU fallback. Failures are grouped by
message with the sample indices they hit."""
import json
import os
import platform
import time

CODES = {"pass": "P", "mismatch": "M", "error": "E", "crash": "C",
         "skip": "S", "unverified": "U"}
STATUS = {v: k for k, v in CODES.items()}
COMPARED = ("pass", "mismatch", "error", "crash")
SECTIONS = ("float32/fwd", "bfloat16/fwd", "int64/fwd", "bool/fwd", "float32/bwd",
            "float32/err", "float32/out", "float32/inplace")


def _entry(job, results):
    key = (job["op"], job["dtype"], job["mode"])
    n = results.n.get(key, 0)
    stop = n if job.get("stop") is None else min(job["stop"], n)
    records = results.samples.get(key, {})
    fresh = results.rechecks.get(key, {})
    job_error = results.job_errors.get(key)
    codes, fallback, groups, secs = [], {}, {}, 0.0
    for k in range(stop):
        rec = records.get(k)
        if rec is None:
            codes.append("?")
            rec = {"status": "error", "msg": job_error or "no record", "fallback": []}
        else:
            code = CODES[rec["status"]]
            codes.append(code.lower() if rec["fallback"] else code)
        secs += rec.get("secs") or 0.0
        for name in rec["fallback"]:
            fallback[name] = fallback.get(name, 0) + 1
        if rec["status"] != "pass":
            groups.setdefault((rec["status"], rec["msg"]), []).append(k)
    counts = {s: 0 for s in (*CODES, "pass_fallback", "pass_when_fresh")}
    for c in codes:
        status = STATUS.get(c.upper(), "error")
        counts[status] += 1
        if c == "p":
            counts["pass_fallback"] += 1
    failures = []
    for (status, msg), ks in groups.items():
        f = {"status": status, "msg": msg, "samples": ks}
        again = [k for k in ks if status in ("mismatch", "error") and fresh.get(k) == "pass"]
        if again:
            f["pass_when_fresh"] = again
            counts["pass_when_fresh"] += len(again)
        failures.append(f)
    entry = {"codes": "".join(codes), "counts": counts, "secs": round(secs, 1),
             "fallback": fallback, "failures": failures}
    if job_error:
        entry["job_error"] = job_error
    return entry


def build(jobs, results, meta):
    import torch
    ops, totals = {}, {}
    for job in jobs:
        section = f"{job['dtype']}/{job['mode']}"
        entry = _entry(job, results)
        ops.setdefault(job["op"], {})[section] = entry
        tot = totals.setdefault(section, {s: 0 for s in entry["counts"]})
        for s, v in entry["counts"].items():
            tot[s] += v
    for tot in totals.values():
        tot["compared"] = sum(tot[s] for s in COMPARED)
        compared = tot["compared"]
        tot["pass_pct"] = round(100.0 * tot["pass"] / compared, 2) if compared else None
        # Device-native: passed with no op of the sample on the CPU fallback.
        tot["pass_native"] = tot["pass"] - tot["pass_fallback"]
        tot["native_pct"] = round(100.0 * tot["pass_native"] / compared, 2) if compared else None
    meta = dict(meta, torch=torch.__version__, python=platform.python_version(),
                date=time.strftime("%Y-%m-%d"), cpus=os.cpu_count())
    return {"meta": meta, "totals": dict(sorted(totals.items(), key=_section_order)),
            "fallback_reasons": dict(sorted(results.fallback_reasons.items())), "ops": ops}


def _section_order(item):
    return SECTIONS.index(item[0]) if item[0] in SECTIONS else len(SECTIONS)


def grand_total(doc):
    t = {s: sum(sec.get(s, 0) for sec in doc["totals"].values())
         for s in (*COMPARED, "compared", "skip", "unverified", "pass_fallback", "pass_when_fresh")}
    t["fallback_ops"] = sum(1 for sections in doc["ops"].values()
                            if any(e["fallback"] for e in sections.values()))
    return t


def crashes(doc):
    return [(op, sec, f["samples"], f["msg"]) for op, sections in doc["ops"].items()
            for sec, e in sections.items() for f in e["failures"] if f["status"] == "crash"]


def summary_lines(doc):
    lines = []
    for sec, t in doc["totals"].items():
        pct = "-" if t["pass_pct"] is None else f"{t['pass_pct']:.1f}%"
        native = "-" if t.get("native_pct") is None else f"{t['native_pct']:.1f}%"
        lines.append(f"{sec}: {t['pass']}/{t['compared']} passed ({pct}; {t['pass_fallback']} via "
                     f"CPU fallback; device-native {native}), {t['mismatch']} mismatched, "
                     f"{t['error']} errored, "
                     f"{t['crash']} crashed; {t['skip']} skipped, {t['unverified']} unverified"
                     + (f"; {t['pass_when_fresh']} failures pass in a fresh process"
                        if t.get("pass_when_fresh") else ""))
    for op, sec, ks, msg in crashes(doc):
        lines.append(f"crash: {op} {sec} samples {ks}: {msg[:160]}")
    g = grand_total(doc)
    lines.append(f"opinfo: {g['pass']} passed, {g['mismatch']} mismatched, {g['error']} errored, "
                 f"{g['crash']} crashed of {g['compared']} samples; "
                 f"{g['fallback_ops']} ops use CPU fallback")
    return lines


def _worst(doc, n=40):
    """The ops to work on next: most failing samples, then the aten ops the
    CPU fallback served most often."""
    rows = []
    for op, sections in doc["ops"].items():
        for sec, e in sections.items():
            c = e["counts"]
            bad = c["mismatch"] + c["error"] + c["crash"]
            fb = sum(1 for ch in e["codes"] if ch.islower())
            if bad:
                f = next(f for f in e["failures"] if f["status"] in ("mismatch", "error", "crash"))
                rows.append((bad, fb, c.get("pass_when_fresh", 0), op, sec,
                             f"{f['status']}: {f['msg'][:120]}"))
    rows.sort(key=lambda r: (-r[0], -r[1], r[3], r[4]))
    out = [f"## Most failing (top {n})", "",
           "| op | dtype/mode | failing | via fallback | pass when fresh | typical |",
           "|---|---|---|---|---|---|"]
    out += [f"| {op} | {sec} | {bad} | {fb} | {fresh} | {_md_escape(msg)} |"
            for bad, fb, fresh, op, sec, msg in rows[:n]]
    served = {}
    for sections in doc["ops"].values():
        for e in sections.values():
            for name, k in e["fallback"].items():
                served[name] = served.get(name, 0) + k
    reasons = doc.get("fallback_reasons", {})
    out += ["", f"## CPU fallback by aten op (top {n})", "",
            "| aten op | samples | why (when the lowering table has a row) |", "|---|---|---|"]
    out += [f"| {name} | {k} | {_md_escape(reasons.get(name, ''))[:120]} |"
            for name, k in sorted(served.items(), key=lambda kv: -kv[1])[:n]]
    return out + [""]


def _md_escape(text):
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(doc):
    m = doc["meta"]
    out = ["# OpInfo conformance: tpu vs CPU", "",
           f"`{m['command']}` — torchtpu {m.get('source') or '?'}, torch {m['torch']}, "
           f"{m['date']}, {m['workers']} workers on {m['cpus']} CPUs, "
           f"wall {m['wall_s']:.0f} s.", "",
           "A sample passes when the tpu output (or, for `bwd`, the gradients of every input "
           "requiring grad under a fixed random cotangent; for `err`, the exception type of "
           "an OpInfo error input; for `out`, the out= tensors contiguous, strided, of a "
           "wrong shape or dtype; for `inplace`, the in-place variant) matches CPU: float32 at "
           "`assert_close` defaults, bfloat16 at atol=rtol=2e-2, integers and bool exactly. "
           "Compared = passed + mismatched + errored + crashed; skipped = CPU itself "
           "rejects the sample (or no differentiable output); unverified = nondeterministic "
           "or upstream-undefined outputs, shape/dtype checked only. Pass when fresh = "
           "mismatched or errored in the sweep but passed when the op ran again in a fresh "
           "process (so the failure depends on ops that ran before it). Device-native = "
           "passed with no op of the sample on the CPU fallback.", "",
           "| dtype/mode | compared | device-native % | passed | pass % | via fallback "
           "| mismatched | errored | crashed | skipped | unverified | pass when fresh |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for sec, t in doc["totals"].items():
        pct = "-" if t["pass_pct"] is None else f"{t['pass_pct']:.1f}"
        npct = "-" if t.get("native_pct") is None else f"{t['native_pct']:.1f}"
        out.append(f"| {sec} | {t['compared']} | {npct} | {t['pass']} | {pct} | {t['pass_fallback']} | "
                   f"{t['mismatch']} | {t['error']} | {t['crash']} | {t['skip']} | "
                   f"{t['unverified']} | {t.get('pass_when_fresh', 0)} |")
    out += ["", summary_lines(doc)[-1], ""]
    out += _worst(doc)
    out += ["## Per op", "",
            "| op | dtype/mode | passed | via fallback | mismatched | errored | crashed "
            "| skipped | unverified | pass when fresh | CPU fallback ops | first failure |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for op, sections in sorted(doc["ops"].items()):
        for sec, e in sorted(sections.items(), key=lambda kv: SECTIONS.index(kv[0])
                             if kv[0] in SECTIONS else 99):
            c = e["counts"]
            fails = [f for f in e["failures"] if f["status"] in ("mismatch", "error", "crash")]
            first = f"{fails[0]['status']}: {fails[0]['msg'][:140]}" if fails else ""
            out.append(f"| {op} | {sec} | {c['pass']} | {c['pass_fallback']} | {c['mismatch']} | "
                       f"{c['error']} | {c['crash']} | {c['skip']} | {c['unverified']} | "
                       f"{c.get('pass_when_fresh', 0)} | "
                       f"{', '.join(sorted(e['fallback']))} | {_md_escape(first)} |")
    return "\n".join(out) + "\n"


def write(doc, out_dir, name="opinfo"):
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(markdown(doc))
