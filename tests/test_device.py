"""torch.tpu, torch.accelerator and the registration of the "tpu" device."""
import pytest
import torch

from conftest import run_python


def test_device_is_available_and_named_tpu():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    assert torch.device("tpu").type == "tpu"
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == torch.tpu.device_count()


def test_current_device_and_context():
    torch.tpu.init()
    assert torch.tpu.is_initialized()
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    with pytest.raises(IndexError, match="out of range"):
        torch.tpu.set_device(torch.tpu.device_count() + 3)
    assert torch.tpu.current_device() == 0


def test_properties_and_name():
    props = torch.tpu.get_device_properties(0)
    assert props.platform == "cpu"  # the embedded default plugin
    assert props.total_memory > 0
    assert props.xla_version
    assert torch.tpu.get_device_name() == props.name


def test_synchronize_runs():
    x = torch.ones(4, device="tpu")
    torch.tpu.synchronize()
    torch.accelerator.synchronize()
    assert x.cpu().tolist() == [1.0] * 4


def test_generated_methods():
    x = torch.zeros(3)
    assert x.tpu().is_tpu
    assert not x.is_tpu
    m = torch.nn.Linear(2, 2).tpu()
    assert m.weight.device.type == "tpu"
    s = torch.UntypedStorage(8).tpu()
    assert s.is_tpu and s.device.type == "tpu"


def test_autoload_through_entry_point():
    r = run_python("import torch; print(hasattr(torch, 'tpu'), torch.tpu.is_available())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    r = run_python("import torch; print(hasattr(torch, 'tpu'))",
                   {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_multiple_devices():
    code = """
import torch, torchtpu
assert torch.tpu.device_count() == 4, torch.tpu.device_count()
x = torch.arange(5.0).to("tpu:2")
assert x.device == torch.device("tpu:2")
y = x.to("tpu:1")
assert y.device.index == 1 and y.cpu().tolist() == [0, 1, 2, 3, 4]
with torch.tpu.device(3):
    z = torch.ones(2, device="tpu")
    assert z.device.index == 3
print("ok")
"""
    r = run_python(code, {"TORCHTPU_NUM_DEVICES": "4"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_visible_devices_select_and_order():
    code = """
import torch, torchtpu
assert torch.tpu.device_count() == 2, torch.tpu.device_count()
assert [d["id"] for d in torchtpu.devices_info()] == [3, 1]
assert torch.tpu.current_device() == 0  # LOCAL_RANK yields to the list
a, b = torch.randn(3, 5), torch.randn(5, 2)
got = (a.to("tpu:0") @ b.to("tpu:0")).relu()
assert got.device == torch.device("tpu:0")
torch.testing.assert_close(got.cpu(), (a @ b).relu())
assert torch.ones(2, device="tpu:1").to("tpu:0").cpu().tolist() == [1.0, 1.0]
print("ok")
"""
    r = run_python(code, {"TORCHTPU_NUM_DEVICES": "2", "TORCHTPU_VISIBLE_DEVICES": "3,1",
                          "LOCAL_RANK": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_local_rank_sets_default_device():
    code = """
import torch
assert torch.tpu.current_device() == 1
x = torch.ones(2, device="tpu")
assert x.device == torch.device("tpu:1"), x.device
torch.tpu.set_device(0)
assert torch.tpu.current_device() == 0
print("ok")
"""
    r = run_python(code, {"TORCHTPU_NUM_DEVICES": "4", "LOCAL_RANK": "5"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_bad_visible_devices_raise_naming_the_value():
    # A failed start keeps nothing, so one process can try every value.
    code = """
import os, torch
for value in ["1,x", "0,0", "-1", "2048"]:
    os.environ["TORCHTPU_VISIBLE_DEVICES"] = value
    try:
        torch.ones(1, device="tpu")
        print("no error for", value)
    except RuntimeError as e:
        msg = str(e)
        assert "TORCHTPU_VISIBLE_DEVICES" in msg and value in msg, msg
os.environ["TORCHTPU_VISIBLE_DEVICES"] = "1"
assert torch.ones(1, device="tpu").cpu().item() == 1.0
print("ok")
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_every_environment_read_goes_through_the_registry_and_is_documented():
    """The code reads configuration only through csrc/core/env.c's registry
    (tpu_env_get / _C._env_get / _C._log_enabled), `python -m torchtpu.info`
    lists every entry, and the README's table names every one."""
    import pathlib
    import re
    from torchtpu import _C
    root = pathlib.Path(__file__).resolve().parent.parent
    names = {n for n, *_ in _C._env_vars()}
    sources = [p for p in list((root / "csrc").rglob("*.c")) + list((root / "csrc").rglob("*.cpp"))
               if not p.name.endswith("_test.c") and p.name != "env.c"]
    sources += [p for p in (root / "torchtpu").rglob("*.py") if p.name != "info.py"]
    bad = []
    for p in sources:
        text = p.read_text()
        for m in re.finditer(r"\bgetenv\(\s*\"(\w+)\"|os\.environ(?:\.get\(|\[)\s*\"(\w+)\"", text):
            bad.append(f"{p.relative_to(root)}: {m.group(0)}")
        for m in re.finditer(r"(?:tpu_env_get(?:_int|_index_list)?|_C\._env_get)\(\s*\"(\w+)\"", text):
            assert m.group(1) in names, f"{p.relative_to(root)} reads {m.group(1)}, not registered"
    assert not bad, "environment read around the registry:\n" + "\n".join(bad)
    readme = (root / "README.md").read_text()
    missing = [n for n in names if f"`{n}`" not in readme]
    assert not missing, f"README does not document {missing}"
    import subprocess, sys
    out = subprocess.run([sys.executable, "-m", "torchtpu.info"], capture_output=True, text=True,
                         timeout=120).stdout
    assert all(f"  {n} = " in out for n in names), out[-2000:]


def test_processes_exit_cleanly_after_a_tpu_backward():
    """PyTorch's backward leaves a Python object in its graph task's
    thread-local state; a tpu device thread that let go of the task while
    the interpreter finalized aborted the process (about 1 exit in 6:
    "terminate called without an active exception"). torch.tpu drains the
    device threads at exit: eight processes in a row exit with 0 and
    nothing on stderr about it."""
    code = ("import torch, torchtpu\n"
            "x = torch.randn(64, 32).to('tpu').requires_grad_()\n"
            "(x.sin() * 2).sum().backward()\n"
            "y = torch.randn(8, 8, dtype=torch.bfloat16).to('tpu:0').requires_grad_()\n"
            "(y @ y).float().sum().backward()\n"
            "print(float(x.grad.sum().cpu()) != 0)\n")
    for _ in range(8):
        r = run_python(code)
        assert r.returncode == 0 and "terminate called" not in r.stderr, (r.returncode,
                                                                          r.stderr[-2000:])
        assert r.stdout.split()[-1] == "True"
