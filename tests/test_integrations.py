"""Hugging Face accelerate and Trainer on tpu match the same runs on CPU:
accelerate's device choice, prepare(), accumulation, clipping and bf16
autocast; the Trainer trains, evaluates and saves a tiny Llama; unknown
library versions warn; the import hook works in either import order and
importing torchtpu alone imports neither library."""
import os
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


def train_with_accelerate(cpu, epochs=3):
    """accelerate's documented loop: accumulation over 2 batches, clipping
    on the steps that sync gradients."""
    acc = Accelerator(cpu=cpu, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(regression_data(), batch_size=8)
    model, opt, loader = acc.prepare(model, opt, loader)
    placed = {p.device for p in model.parameters()}
    same_params = all(a is b for a, b in zip(opt.param_groups[0]["params"], model.parameters()))
    losses, norms = [], []
    for _ in range(epochs):
        for x, y in loader:
            with acc.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                acc.backward(loss)
                if acc.sync_gradients:
                    norms.append(acc.clip_grad_norm_(model.parameters(), 1.0).item())
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
    # acc.device reads accelerate's process-wide state: keep this run's answer
    return dict(acc=acc, device=acc.device, model=model, opt=opt, placed=placed,
                same_params=same_params,
                batch_device=x.device, losses=losses, norms=norms, last_loss=loss.detach())


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

@pytest.fixture(scope="module")
def trainer_module():
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


def next_token_data(n, seq=16, vocab=99):
    """Rows count upwards modulo vocab: a sequence a tiny model can learn."""
    g = torch.Generator().manual_seed(3)
    rows = (torch.randint(0, vocab, (n, 1), generator=g) + torch.arange(seq)) % vocab
    return [{"input_ids": r, "labels": r} for r in rows]


def train_tiny_llama(trainer_module, use_cpu, out_dir, steps=8):
    from transformers import LlamaConfig, LlamaForCausalLM, TrainingArguments

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    args = TrainingArguments(output_dir=out_dir, report_to="none", use_cpu=use_cpu,
                             max_steps=steps, save_steps=steps, logging_steps=1,
                             per_device_train_batch_size=8, per_device_eval_batch_size=8,
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
