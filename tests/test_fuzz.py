"""A short fixed-seed run of the random-program fuzzer (tests/fuzz_programs.py):
each mode checks the same programs on tpu against CPU PyTorch and must find
no mismatch. Every mode runs here, in one process (the eager modes are
switched per thread), so the Makefile runs this file once, not per mode.
`make fuzz` runs the long campaign."""
import os

import pytest

import fuzz_programs as fz

PROGRAMS = {"strict": 80, "debug": 120, "defer_and_fuse": 80, "compiled": 30}
SEED = 1000


@pytest.mark.parametrize("mode", fz.MODES)
def test_fuzz_programs_match_cpu(mode):
    n = int(os.environ.get("FUZZ_CI_PROGRAMS", PROGRAMS[mode]))
    stats = fz.run(n, [mode], seed0=SEED, exclude=fz.KNOWN_MISMATCH_TAGS, skip=fz.KNOWN_SKIPPED_CHECKS, minimize_max=1,
                   log=lambda *_: None)[mode]
    assert stats["programs"] == n
    if stats["mismatches"]:
        sig, entry = next(iter(stats["classes"].items()))
        pytest.fail(f"{stats['mismatches']} of {n} programs differ from CPU in {mode}; "
                    f"first class {sig}: {entry[1][0]}\nminimized repro:\n{fz.repro(entry[3], mode)}")


def test_generator_is_deterministic_and_mostly_valid():
    a = [fz.generate(s).source() for s in range(20)]
    b = [fz.generate(s).source() for s in range(20)]
    assert a == b
    # only a small share of programs end with a step CPU rejects
    assert sum(fz._cpu_raises(fz.generate(s)) for s in range(100)) <= 15
