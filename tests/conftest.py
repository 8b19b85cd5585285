import os
import subprocess
import sys

import pytest
import torch

import torchtpu  # noqa: F401

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
