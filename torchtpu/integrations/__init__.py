"""Teach the libraries around PyTorch about the "tpu" device.

accelerate, transformers and torchtitan pick their device from a fixed list
of branches (cuda, xpu, npu, mps, ...). A PrivateUse1 device is in none of
them, so without help they silently run on CPU. Each library gets one small
module here, the way those libraries integrate their other out-of-tree
devices: it patches the few device-selection points, checks the library's
version against the one it was written for, and warns (never raises) on a
version it does not know.

A module is applied when its library is imported, before or after torchtpu:
importing torchtpu must not import transformers (seconds of start-up).
"""
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# module that holds a library's patched points -> our module that patches it
# (relative name). The key is that submodule, not the top-level package: with
# autoload, `import accelerate` imports torch, hence torchtpu, halfway through
# accelerate/__init__.py, when the package is in sys.modules but its submodules
# are not yet; patching then would import them out of order (a circular-import
# error that breaks `import accelerate`). The submodule is only in sys.modules
# once the library has reached it, so the finder patches it right after it runs.
_PATCHERS = {
    "accelerate.state": "._accelerate",
    "transformers.utils.import_utils": "._transformers",
    "transformers.distributed.utils": "._transformers",
    "torchtitan": "._torchtitan",
}
_applied = set()


def _apply(name):
    if name in _applied:
        return
    _applied.add(name)
    try:
        mod = importlib.import_module(_PATCHERS[name], __name__)
    except ModuleNotFoundError as e:  # the patch module itself is optional
        if e.name and e.name.startswith(__name__):
            return
        raise
    try:
        mod.install()
    except Exception as e:  # a library change must not break `import torchtpu`
        warnings.warn(f"torchtpu: could not integrate with {name.partition('.')[0]}: {e!r}; "
                      f"it may not place work on the tpu device", stacklevel=2)


def check_version(name, module, known):
    """Warn once when `module.__version__` is not one of `known`."""
    version = getattr(module, "__version__", "?")
    if version not in known:
        warnings.warn(
            f"torchtpu's {name} integration was written for {name} "
            f"{', '.join(sorted(known))}; found {version}. It is applied, but "
            f"check that {name} places work on the tpu device.", stacklevel=3)
        return False
    return True


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of a module named in _PATCHERS so the patch runs
    right after that module finishes importing."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _PATCHERS or fullname in _applied:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _apply(fullname)

        loader.exec_module = exec_and_patch
        return spec


def install():
    for name in _PATCHERS:
        if name in sys.modules:
            _apply(name)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
