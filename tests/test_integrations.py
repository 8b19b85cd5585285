"""Hugging Face accelerate and Trainer on tpu match the same runs on CPU:
accelerate's device choice, prepare(), accumulation, clipping and bf16
autocast; the Trainer trains, evaluates and saves a tiny Llama; under
torchrun both are data-parallel on tpudist (2 ranks equal one CPU process
over the global batch); unknown library versions warn; the import hook
works in either import order and importing torchtpu alone imports neither
library."""
import os
import socket
import subprocess
import sys
import warnings

import pytest
import torch

from op_testing import no_fallback

accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState, PartialState  # noqa: E402
from accelerate.utils import DistributedType  # noqa: E402

from torchtpu.integrations import _accelerate, _transformers  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """accelerate's state is a process-wide singleton: each run starts clean
    and leaves nothing behind for other tests."""
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def regression_data(n=64, dim=8):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, dim, generator=g)
    return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))


def train_with_accelerate(cpu, epochs=3, batch_size=8):
    """accelerate's documented loop: accumulation over 2 batches, clipping
    on the steps that sync gradients. `batch_size` is per process; the
    global batch is `batch_size * num_processes`."""
    acc = Accelerator(cpu=cpu, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(regression_data(), batch_size=batch_size)
    model, opt, loader = acc.prepare(model, opt, loader)
    placed = {p.device for p in model.parameters()}
    same_params = all(a is b for a, b in zip(opt.param_groups[0]["params"], model.parameters()))
    losses, mean_losses, norms, first_batch = [], [], [], None
    for _ in range(epochs):
        for x, y in loader:
            if first_batch is None:
                first_batch = acc.gather(x).cpu()  # every process's part, in rank order
            with acc.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                acc.backward(loss)
                if acc.sync_gradients:
                    norms.append(acc.clip_grad_norm_(model.parameters(), 1.0).item())
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
                # equal per-process batches: the mean of the means is the global batch's loss
                mean_losses.append(acc.reduce(loss.detach().clone(), "mean").item())
    # acc.device reads accelerate's process-wide state: keep this run's answer
    return dict(acc=acc, device=acc.device, model=model, opt=opt, placed=placed,
                same_params=same_params, first_batch=first_batch, steps_per_epoch=len(loader),
                batch_device=x.device, losses=losses, mean_losses=mean_losses, norms=norms,
                last_loss=loss.detach())


def test_accelerate_loop_trains_on_tpu_like_cpu():
    cpu = train_with_accelerate(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    with no_fallback():
        tpu = train_with_accelerate(cpu=False)
    acc = tpu["acc"]
    assert tpu["device"] == torch.device("tpu", 0) and cpu["device"] == torch.device("cpu")
    assert acc.distributed_type == DistributedType.NO and acc.num_processes == 1
    assert not accelerate.utils.is_torch_xla_available()  # we are not torch_xla
    assert tpu["placed"] == {acc.device} and tpu["same_params"]
    assert tpu["batch_device"] == acc.device  # the prepared loader places batches
    assert {p.device for p in tpu["model"].parameters()} == {acc.device}
    torch.testing.assert_close(torch.tensor(tpu["losses"]), torch.tensor(cpu["losses"]),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(tpu["norms"]), torch.tensor(cpu["norms"]),
                               rtol=1e-4, atol=1e-5)
    assert max(cpu["norms"]) > 1.0  # clipping had something to clip
    for p, q in zip(tpu["model"].parameters(), cpu["model"].parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
    assert tpu["losses"][-1] < tpu["losses"][0] * 0.8  # it learns

    # single process: gather and reduce hand the tensor back, on the device
    last = tpu["last_loss"].reshape(1)
    for got in (acc.gather(last), acc.reduce(last, "mean")):
        assert got.device == acc.device
        torch.testing.assert_close(got.cpu(), cpu["last_loss"].reshape(1), rtol=1e-4, atol=1e-5)


def test_accelerate_save_and_load_state_on_tpu(tmp_path):
    tpu = train_with_accelerate(cpu=False, epochs=1)
    acc, model, opt = tpu["acc"], tpu["model"], tpu["opt"]
    want = [p.detach().cpu().clone() for p in model.parameters()]
    want_avg = [s["exp_avg"].cpu().clone() for s in opt.state_dict()["state"].values()]
    acc.save_state(str(tmp_path))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    opt.state_dict()["state"][0]["exp_avg"].zero_()
    acc.load_state(str(tmp_path))
    assert {p.device for p in model.parameters()} == {acc.device}
    for p, w in zip(model.parameters(), want):
        assert torch.equal(p.detach().cpu(), w)
    for s, w in zip(opt.state_dict()["state"].values(), want_avg):
        assert s["exp_avg"].device == acc.device and torch.equal(s["exp_avg"].cpu(), w)


def autocast_step(cpu):
    acc = Accelerator(cpu=cpu, mixed_precision="bf16")
    torch.manual_seed(0)
    model = acc.prepare(torch.nn.Linear(16, 8))
    x = torch.randn(4, 16).to(acc.device)
    with acc.autocast():
        inner = model(x) @ torch.randn(8, 4).to(acc.device)
    return acc, model, x, model(x), inner


def test_accelerate_bf16_autocast_like_cpu():
    *_, cpu_out, cpu_inner = autocast_step(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    acc, model, x, out, inner = autocast_step(cpu=False)
    assert acc.native_amp and acc.mixed_precision == "bf16" and acc.device.type == "tpu"
    # the prepared forward runs under autocast and hands back float32, as on CPU
    assert out.device == acc.device and out.dtype == cpu_out.dtype == torch.float32
    # inside accelerator.autocast() the matmul itself is bf16
    assert inner.dtype == cpu_inner.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), cpu_out, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(inner.cpu(), cpu_inner, rtol=2e-2, atol=2e-2)
    # the prepared forward's float32 result holds bf16 values; a float32 linear's does not
    fp32 = torch.nn.functional.linear(x.cpu(), model.weight.detach().cpu(), model.bias.detach().cpu())
    assert torch.equal(out.cpu(), out.cpu().bfloat16().float())
    assert not torch.equal(fp32, fp32.bfloat16().float())


def test_accelerate_fp16_is_refused_on_tpu():
    """accelerate accepts fp16 only on the devices it lists (a literal tuple
    in Accelerator.__init__), and on CPU it silently runs float32: tpu gets
    accelerate's own error, which names the device, rather than a silent
    float32 run."""
    assert not Accelerator(cpu=True, mixed_precision="fp16").native_amp
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.raises(ValueError, match="fp16 mixed precision requires a device in .*'tpu'"):
        Accelerator(mixed_precision="fp16")


def test_cpu_flag_and_env_device_still_win(monkeypatch):
    assert PartialState(cpu=True).device == torch.device("cpu")
    PartialState._reset_state()
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "cpu")
    assert PartialState().device == torch.device("cpu")


# --- transformers Trainer ---------------------------------------------------

def import_trainer():
    """transformers.trainer imports `datasets` whenever it is installed; an
    install that cannot import (no pandas) is treated as absent."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        from transformers.utils import import_utils
        saved = sys.modules.get("datasets")
        sys.modules["datasets"] = None  # find_spec() then reports it missing
        import_utils.is_datasets_available.cache_clear()
        try:
            import transformers.trainer  # noqa: F401
        finally:
            if saved is None:
                del sys.modules["datasets"]
            else:
                sys.modules["datasets"] = saved
    import transformers.trainer
    return transformers.trainer


@pytest.fixture(scope="module")
def trainer_module():
    return import_trainer()


def next_token_data(n, seq=16, vocab=99):
    """Rows count upwards modulo vocab: a sequence a tiny model can learn."""
    g = torch.Generator().manual_seed(3)
    rows = (torch.randint(0, vocab, (n, 1), generator=g) + torch.arange(seq)) % vocab
    return [{"input_ids": r, "labels": r} for r in rows]


def train_tiny_llama(trainer_module, use_cpu, out_dir, steps=8, batch_size=8):
    from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    args = TrainingArguments(output_dir=out_dir, report_to="none", use_cpu=use_cpu,
                             max_steps=steps, save_steps=steps, logging_steps=1,
                             per_device_train_batch_size=batch_size,
                             per_device_eval_batch_size=batch_size,
                             learning_rate=1e-2, disable_tqdm=True)
    trainer = trainer_module.Trainer(model=model, args=args, train_dataset=next_token_data(32),
                                     eval_dataset=next_token_data(16))
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(out_dir)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return args, trainer, losses, metrics["eval_loss"]


def test_trainer_tiny_llama_on_tpu_like_cpu(trainer_module, tmp_path):
    from transformers import LlamaForCausalLM

    cpu_args, _, cpu_losses, cpu_eval = train_tiny_llama(trainer_module, True, str(tmp_path / "cpu"))
    with no_fallback():
        args, trainer, losses, eval_loss = train_tiny_llama(trainer_module, False,
                                                            str(tmp_path / "tpu"))
    assert cpu_args.device == torch.device("cpu") and cpu_args.n_gpu == 0
    assert args.device == torch.device("tpu", 0) and args.n_gpu == 1
    assert trainer.accelerator.device == args.device
    assert {p.device for p in trainer.model.parameters()} == {args.device}
    assert len(losses) == len(cpu_losses) == 8
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(eval_loss, cpu_eval, rtol=1e-4, atol=1e-4)
    assert losses[-1] < losses[0] * 0.9  # it learns

    # the checkpoint (with optimizer state from tpu) and the final model reload
    assert os.path.exists(tmp_path / "tpu" / "checkpoint-8" / "optimizer.pt")
    trained = {k: v.cpu() for k, v in trainer.model.state_dict().items()}
    reloaded = LlamaForCausalLM.from_pretrained(str(tmp_path / "tpu")).state_dict()
    assert reloaded.keys() == trained.keys()
    for k, v in reloaded.items():
        assert torch.equal(v, trained[k]), k


# --- multi-process: torchrun ---------------------------------------------------
# Each test launches this file under torchrun (2 processes, one tpu device
# each); every rank saves what it saw, and the test compares that with the same
# training done in one process on CPU over the same global batches.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCHRUN_TIMEOUT_S = 240


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(scenario, out_dir, nproc=2):
    """Runs `_worker(scenario)` on `nproc` processes; returns each rank's results."""
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHTPU_FALLBACK="error",
               TORCHTPU_NUM_DEVICES=str(nproc))  # the CPU plugin: one device per rank
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
         "--master-port", str(_free_port()), os.path.abspath(__file__), scenario, str(out_dir)],
        env=env, capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT_S, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(nproc)]


def _worker(scenario, out_dir):
    import torch.distributed as dist

    if scenario == "accelerate":
        with no_fallback():
            run = train_with_accelerate(cpu=False, batch_size=4)
        acc = run["acc"]
        acc.wait_for_everyone()
        index = torch.tensor([acc.process_index], device=acc.device)
        result = dict(
            distributed_type=str(acc.distributed_type.value), backend=acc.state.backend,
            group_backend=dist.get_backend(), num_processes=acc.num_processes,
            device=str(run["device"]), placed=[str(d) for d in run["placed"]],
            ddp=isinstance(run["model"], torch.nn.parallel.DistributedDataParallel),
            gathered_index=acc.gather(index).cpu(), summed_index=acc.reduce(index, "sum").cpu(),
            **{k: run[k] for k in ("steps_per_epoch", "first_batch", "losses", "mean_losses",
                                   "norms")},
            params=[p.detach().cpu() for p in acc.unwrap_model(run["model"]).parameters()])
    elif scenario == "trainer":
        with no_fallback():
            args, trainer, losses, eval_loss = train_tiny_llama(
                import_trainer(), False, os.path.join(out_dir, "run"), batch_size=4)
        result = dict(
            device=str(args.device), parallel_mode=str(args.parallel_mode.value),
            world_size=args.world_size, group_backend=dist.get_backend(),
            ddp=isinstance(trainer.model_wrapped, torch.nn.parallel.DistributedDataParallel),
            losses=losses, eval_loss=eval_loss,
            params={k: v.cpu() for k, v in trainer.model.state_dict().items()})
    torch.save(result, os.path.join(out_dir, f"rank{dist.get_rank()}.pt"))
    dist.destroy_process_group()


def test_accelerate_under_torchrun_is_data_parallel(tmp_path):
    """Two ranks with 4 rows each train like one CPU process with 8: DDP
    averages the gradients, the prepared loader shards the batches."""
    ranks = torchrun("accelerate", tmp_path)
    cpu = train_with_accelerate(cpu=True, batch_size=8)
    rows = regression_data().tensors[0]
    for rank, got in enumerate(ranks):
        assert got["distributed_type"] == "MULTI_GPU" and got["num_processes"] == 2
        assert got["backend"] == got["group_backend"] == "tpudist"
        assert got["device"] == f"tpu:{rank}" and got["placed"] == [got["device"]]
        assert got["ddp"]
        assert got["gathered_index"].tolist() == [0, 1] and got["summed_index"].tolist() == [1]
        # sharded: rank r's first batch is rows 4r..4r+3 of the CPU run's first batch
        assert torch.equal(got["first_batch"], rows[:8]) and torch.equal(cpu["first_batch"], rows[:8])
        assert got["steps_per_epoch"] == cpu["steps_per_epoch"] == 8
        torch.testing.assert_close(torch.tensor(got["mean_losses"]), torch.tensor(cpu["losses"]),
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(torch.tensor(got["norms"]), torch.tensor(cpu["norms"]),
                                   rtol=1e-4, atol=1e-5)
        for p, q in zip(got["params"], cpu["model"].parameters()):
            torch.testing.assert_close(p, q.detach(), rtol=1e-4, atol=1e-5)
    # each rank saw only its half (its own losses are not the global ones) ...
    assert ranks[0]["losses"] != ranks[1]["losses"]
    # ... and the replicas stayed identical
    for p, q in zip(ranks[0]["params"], ranks[1]["params"]):
        assert torch.equal(p, q)


def test_trainer_under_torchrun_is_data_parallel(trainer_module, tmp_path):
    """The Trainer on 2 ranks x 4 sequences logs the losses of one CPU
    process on 8 (its logged loss is the mean over ranks)."""
    ranks = torchrun("trainer", tmp_path)
    _, cpu_trainer, cpu_losses, cpu_eval = train_tiny_llama(trainer_module, True,
                                                            str(tmp_path / "cpu"))
    for rank, got in enumerate(ranks):
        assert got["device"] == f"tpu:{rank}" and got["world_size"] == 2
        assert got["parallel_mode"] == "distributed" and got["group_backend"] == "tpudist"
        assert got["ddp"]
        assert len(got["losses"]) == len(cpu_losses) == 8
        torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(cpu_losses),
                                   rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got["eval_loss"], cpu_eval, rtol=1e-4, atol=1e-4)
    for k, v in ranks[0]["params"].items():
        assert torch.equal(v, ranks[1]["params"][k]), k


@pytest.fixture
def launcher_env(monkeypatch):
    """This process as the only rank of a torchrun world; the group it makes
    is destroyed afterwards."""
    import torch.distributed as dist

    for k, v in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())).items():
        monkeypatch.setenv(k, v)
    yield monkeypatch
    if dist.is_initialized():
        dist.destroy_process_group()


def test_accelerate_under_launcher_picks_tpudist(launcher_env):
    state = PartialState()
    assert state.distributed_type == DistributedType.MULTI_GPU and state.backend == "tpudist"
    assert torch.distributed.get_backend() == "tpudist"
    assert state.device == torch.device("tpu", 0) and state.num_processes == 1


def test_accelerate_under_launcher_refuses_a_rank_without_its_device(launcher_env):
    """DDP from prepare() moves inputs to tpu:<local rank>: a rank whose
    device has another index must fail at once, saying why, rather than in
    its first forward (an IndexError in DDP's stream code)."""
    launcher_env.setenv("LOCAL_RANK", str(torch.tpu.device_count()))
    with pytest.raises(RuntimeError, match="TORCHTPU_NUM_DEVICES to the number of processes"):
        PartialState()


def test_transformers_starts_torch_distributed_on_tpudist(launcher_env):
    """transformers' own start of torch.distributed (tp_plan,
    DistributedConfig) names the tpu device's backend "tpu_dist": ours is
    tpudist."""
    from transformers.distributed import utils as distributed_utils

    assert distributed_utils.get_distributed_backend("tpu") == "tpudist"
    distributed_utils._ensure_torch_distributed("tpu")
    assert "tpu:tpudist" in str(torch.distributed.get_backend_config())


# --- versions and the import hook ---------------------------------------------

def test_unknown_versions_warn_and_still_patch(monkeypatch):
    monkeypatch.setattr(sys.modules["accelerate"], "__version__", "0.0.1")
    with pytest.warns(UserWarning, match=r"accelerate 1\.15\.0; found 0\.0\.1"):
        _accelerate.install()
    assert PartialState().device.type == "tpu"

    # not the module-level name: importing transformers.trainer re-creates the
    # top-level module object
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "0.0.1")
    with pytest.warns(UserWarning, match=r"transformers 5\.24\.0; found 0\.0\.1"):
        _transformers.install()
    monkeypatch.setattr(sys.modules["transformers"], "__version__", _transformers.KNOWN_VERSIONS[0])
    from transformers.utils import import_utils
    monkeypatch.delattr(import_utils, "is_torch_tpu_available")
    with pytest.warns(UserWarning, match="no is_torch_tpu_available"):
        _transformers.install()


def test_a_failing_patch_warns_instead_of_raising(monkeypatch):
    import torchtpu.integrations as integrations

    def broken():
        raise AttributeError("PartialState has no default_device")

    monkeypatch.setattr(integrations, "_applied", set())
    monkeypatch.setattr(_accelerate, "install", broken)
    with pytest.warns(UserWarning, match="could not integrate with accelerate: AttributeError"):
        integrations._apply("accelerate.state")


def test_known_versions_install_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _accelerate.install()
        _transformers.install()


def test_import_torchtpu_alone_imports_neither_library(py):
    r = py("import sys, torchtpu\n"
           "print(sorted({m.split('.')[0] for m in sys.modules} & {'accelerate', 'transformers'}))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("autoload", ["1", "0"])
def test_libraries_imported_before_torchtpu(py, autoload):
    """With autoload, `import accelerate` imports torchtpu halfway through its
    own import; without it, torchtpu comes after both libraries."""
    r = py("import warnings; warnings.simplefilter('error', UserWarning)\n"
           "import accelerate, transformers\n"
           "from transformers import TrainingArguments\n"
           "import torch, torchtpu\n"
           "from accelerate import Accelerator\n"
           "acc = Accelerator()\n"
           "model = acc.prepare(torch.nn.Linear(2, 2))\n"
           "print(acc.device, model.weight.device)\n"
           "args = TrainingArguments('unused', report_to='none')  # resets accelerate's state\n"
           "print(args.device, args.n_gpu)",
           env_update={"TORCH_DEVICE_BACKEND_AUTOLOAD": autoload})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tpu:0", "tpu:0", "tpu:0", "1"]


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
