"""The Hugging Face model suite: `make models` runs every architecture
(TORCHTPU_HF_ALL=1); `make test` runs the fast handful. The last line of the
run is the scoreboard: hf models: E/N eager, C/N compiled, T/N train-step."""
import collections

import pytest

pytest.importorskip("transformers")

FALLBACKS = {}  # architecture -> {op: count} met in its forward passes


def pytest_terminal_summary(terminalreporter):
    passed = collections.Counter()
    total = collections.Counter()
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if "test_hf_models.py::" not in nodeid or getattr(rep, "when", "call") != "call":
                continue
            kind = nodeid.split("::")[1].split("[")[0]
            total[kind] += 1
            passed[kind] += outcome == "passed"
    if not total:
        return
    n = total["test_eager_forward"]
    terminalreporter.write_line(
        "hf models fallbacks: " + (", ".join(f"{a}: {ops}" for a, ops in sorted(FALLBACKS.items()))
                                   or "none"))
    terminalreporter.write_line(
        f"hf models: {passed['test_eager_forward']}/{n} eager, "
        f"{passed['test_compiled_forward']}/{total['test_compiled_forward']} compiled, "
        f"{passed['test_train_step']}/{total['test_train_step']} train-step, "
        f"{passed['test_generate']}/{total['test_generate']} generate, "
        f"{passed['test_save_and_load_to_tpu']}/{total['test_save_and_load_to_tpu']} save/load")
