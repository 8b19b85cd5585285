"""OpInfo conformance sweep: every OpInfo sample run on tpu and on CPU.

`python -m conformance.run` drives it (see run.py); worker.py runs samples in
crash-isolated subprocesses; check.py holds the per-sample comparison;
report.py writes results/opinfo.{json,md} and the summary line."""
