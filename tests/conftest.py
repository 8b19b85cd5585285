import atexit
import os
import shutil
import subprocess
import sys
import tempfile

# The persistent executable cache is read once, when the runtime starts: point
# it at a per-session directory before torchtpu is imported, so tests never
# write the user's ~/.cache/torchtpu (subprocesses inherit it). An explicit
# TORCHTPU_CACHE_DIR is respected.
if not os.environ.get("TORCHTPU_CACHE_DIR"):
    _cache_dir = tempfile.mkdtemp(prefix="torchtpu-pytest-cache-")
    os.environ["TORCHTPU_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)

# PyTorch's compile caches (AOTAutograd's, which holds torchtpu's compiled
# graphs, torchtpu._precompile) likewise: per session, never the user's.
if not os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
    _inductor_dir = tempfile.mkdtemp(prefix="torchtpu-pytest-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _inductor_dir
    atexit.register(shutil.rmtree, _inductor_dir, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

import torchtpu  # noqa: E402,F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, env_update=None, timeout=300):
    """Runs `code` in a fresh interpreter (for process-wide state: plugin
    loading, env vars read once); returns the CompletedProcess."""
    env = dict(os.environ)
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=ROOT)


@pytest.fixture
def py():
    return run_python
