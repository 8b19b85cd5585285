"""torchtpu.compiler: compiled functions kept on disk across processes.

    step = torchtpu.compiler.precompile(train_step, "ckpt/train_step.tpuc")
    loss = step(model, x, y)            # first process: traced, compiled, saved
                                        # next process: loaded, no tracing

`fn` is compiled whole (torch.compile(fn, backend="tpu", fullgraph=True))
through PyTorch's own serialization of compiled functions
(torch.compile(...).aot_compile / torch.compiler.load_compiled_function);
see torchtpu._precompile for what is checked before an entry is used. An
optimizer's bound `step` may be passed directly.

torch.compile(model, backend="tpu") (and the default backend on tpu
tensors) persists its AOTAutograd graphs transparently in PyTorch's
AOTAutograd cache (TORCHINDUCTOR_CACHE_DIR); Dynamo still traces there."""
from ._precompile import Precompiled, StaleProgramError, precompile  # noqa: F401
