"""Builds torchtpu._C: the thin C++ glue linked with the C core.

The C core (csrc/core) is compiled by the Makefile into a static library
(TORCHTPU_CORE_LIB); this file only compiles csrc/torch/*.cpp against
PyTorch. Build with `pip install --no-build-isolation` (an isolated build
would fetch another torch).
"""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
core_lib = os.environ.get(
    "TORCHTPU_CORE_LIB", os.path.join(ROOT, "build", "release", "libtorchtpu_core.a")
)
if not os.path.exists(core_lib):
    raise SystemExit(f"missing {core_lib}: run `make core` first (or `make install`)")

setup(
    ext_modules=[
        CppExtension(
            "torchtpu._C",
            sorted(glob.glob(os.path.join("csrc", "torch", "*.cpp"))),
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_objects=[core_lib],
            extra_compile_args=["-O2", "-g0", "-Wno-unused-parameter"],
            libraries=["dl"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
