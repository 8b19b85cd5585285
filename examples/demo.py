"""torchtpu demo: ordinary PyTorch code on torch.device("tpu").

Shows the device and its plugin, tensors moved to the device and computed
there (elementwise ops, matmul, a StableHLO module), checked against CPU,
plus the runtime's own accounting."""
import time

import torch

import torchtpu


def main():
    info = torchtpu.plugin_info()
    print(f"torchtpu {torchtpu.__version__}, torch {torch.__version__}")
    print(f"accelerator: {torch.accelerator.current_accelerator()} "
          f"({torch.tpu.device_count()} device(s), {torch.tpu.get_device_name()})")
    print(f"plugin: {info['path']}")
    print(f"        xla_version {info['attributes'].get('xla_version')}, "
          f"PJRT API {info['api_version']}\n")

    torch.manual_seed(0)
    x_cpu = torch.randn(4, 8)
    w1_cpu, w2_cpu = torch.randn(8, 16) * 0.3, torch.randn(16, 3) * 0.3
    x, w1, w2 = x_cpu.to("tpu"), w1_cpu.to("tpu"), w2_cpu.to("tpu")
    print("x on the device:", x.device, tuple(x.shape), x.dtype)

    # A two-layer network's forward pass, each op compiled to StableHLO and
    # run by XLA on the device.
    t0 = time.perf_counter()
    h = x @ w1
    h = h * 0.5 + h * h * 0.01
    y = (h @ w2) / 2.0
    print("\ny = f(x) computed on tpu:\n", y)
    ref = ((x_cpu @ w1_cpu) * 0.5 + (x_cpu @ w1_cpu) ** 2 * 0.01) @ w2_cpu / 2.0
    err = (y.cpu() - ref).abs().max().item()
    print(f"max |tpu - cpu| = {err:.2e}  ({(time.perf_counter() - t0) * 1e3:.1f} ms incl. compiles)")

    # Views and in-place writes behave as on CPU: a row written through a
    # view is seen by the base tensor.
    z = torch.zeros(3, 4, device="tpu")
    z[1].fill_(7.0)
    z[:, 2] = torch.tensor([1.0, 2.0, 3.0])
    print("\nwrites through views:\n", z)

    # A hand-written StableHLO module as a function of tpu tensors.
    module = """
module @softplus {
  func.func public @main(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
    %e = "stablehlo.exponential"(%x) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    %r = "stablehlo.log_plus_one"(%e) : (tensor<4x3xf32>) -> tensor<4x3xf32>
    "func.return"(%r) : (tensor<4x3xf32>) -> ()
  }
}"""
    (sp,) = torchtpu.runtime.run_stablehlo(module, y)
    sp_err = (sp.cpu() - torch.nn.functional.softplus(y.cpu())).abs().max().item()
    print(f"\nStableHLO softplus module: max |tpu - torch.nn.functional.softplus| = {sp_err:.2e}")

    print(f"\ndevice memory in use: {torch.tpu.memory_allocated()} bytes "
          f"(peak {torch.tpu.max_memory_allocated()})")
    print(torchtpu.metrics.report())
    ok = err < 1e-4 and sp_err < 1e-5
    print("\ndemo:", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
