"""tpudist: torch.distributed on tpu tensors, with real worlds of 2 and 4
processes (one device each, launched like torchrun: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT).

Each world runs a scenario once (this file is also the worker script) and
writes every check's outcome per rank; the tests below read those outcomes,
so a failure names its check and rank. References are exact: every rank can
build every other rank's inputs from a seed, and training runs are compared
with the same training done on CPU in one process.
"""
import json
import os
import socket
import subprocess
import sys
import time
import traceback

import pytest

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
TIMEOUT_S = 240


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world, scenario, tmp, timeout=TIMEOUT_S, env=None):
    """Runs `scenario` on `world` processes; returns (per-rank results, logs)."""
    out = os.path.join(tmp, f"{scenario}-{world}")
    os.makedirs(out, exist_ok=True)
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                TORCHTPU_FALLBACK="error", PYTHONPATH=ROOT)
    base.update(env or {})
    procs = []
    for rank in range(world):
        e = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        log = open(os.path.join(out, f"rank{rank}.log"), "w")
        procs.append((subprocess.Popen([sys.executable, HERE, scenario, out], env=e,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    deadline = time.monotonic() + timeout
    for p, log in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
    results, logs = [], []
    for rank in range(world):
        path = os.path.join(out, f"rank{rank}.json")
        results.append(json.load(open(path)) if os.path.exists(path) else {})
        logs.append(open(os.path.join(out, f"rank{rank}.log")).read()[-3000:])
    return results, logs


_worlds = {}


def _world(world, scenario, tmp_path_factory):
    key = (world, scenario)
    if key not in _worlds:
        _worlds[key] = _launch(world, scenario, str(tmp_path_factory.mktemp("dist")))
    return _worlds[key]


def _check(results_logs, name):
    results, logs = results_logs
    for rank, (res, log) in enumerate(zip(results, logs)):
        if name not in res:
            pytest.fail(f"rank {rank} did not report {name!r}; its log ends:\n{log}")
        if res[name] != "ok":
            pytest.fail(f"rank {rank}, {name}: {res[name]}")


# --------------------------------------------------------------------------
# Worker side: runs in each process (python test_distributed.py SCENARIO DIR).

def _worker_main(scenario, out_dir):
    import torch
    import torch.distributed as dist
    import torchtpu  # noqa: F401

    rank = int(os.environ["RANK"])
    results = {}
    path = os.path.join(out_dir, f"rank{rank}.json")

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(path + ".tmp", path)

    checks = SCENARIOS[scenario]
    ctx = _Ctx(torch, dist)
    for name, fn in checks(ctx):
        try:
            fn()
            results[name] = "ok"
        except Exception:  # recorded; the world is likely out of step now
            results[name] = traceback.format_exc(limit=6)
            save()
            print(f"rank {rank}: {name} failed:\n{results[name]}", file=sys.stderr)
            os._exit(1)
    save()
    if dist.is_initialized():
        dist.destroy_process_group()


class _Ctx:
    def __init__(self, torch, dist):
        self.torch, self.dist = torch, dist
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])


def _inputs(torch, shape, dtype, salt, world):
    """Every rank's input for one check, the same on every rank."""
    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(7919 * salt + r)
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dtype))
        else:
            out.append(torch.randint(-5, 6, shape, generator=g, dtype=dtype))
    return out


def _close(torch, actual, expected):
    actual = actual.cpu()
    if expected.dtype == torch.bfloat16:
        torch.testing.assert_close(actual.float(), expected.float(), rtol=2e-2, atol=2e-2)
    else:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def _collective_checks(c):
    torch, dist, rank, W = c.torch, c.dist, c.rank, c.world
    dev = torch.device("tpu")
    R = dist.ReduceOp

    def init():
        dist.init_process_group("tpudist")
        assert dist.get_backend() == "tpudist", dist.get_backend()
        assert dist.get_world_size() == W and dist.get_rank() == rank

    yield "init", init
    salt = [0]

    def ins(shape, dtype):
        salt[0] += 1
        return _inputs(torch, shape, dtype, salt[0], W)

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        dn = str(dtype).split(".")[1]
        floating = dtype.is_floating_point

        def broadcast(dtype=dtype):
            x = ins((3, 5), dtype)
            t = x[rank].to(dev)
            dist.broadcast(t, src=W - 1)
            _close(torch, t, x[W - 1])

        yield f"broadcast/{dn}", broadcast

        ops = [("SUM", R.SUM), ("MAX", R.MAX), ("MIN", R.MIN), ("PRODUCT", R.PRODUCT)]
        if floating:
            ops += [("AVG", R.AVG), ("PREMUL_SUM", dist._make_nccl_premul_sum(0.5))]
        for op_name, op in ops:
            def all_reduce(dtype=dtype, op_name=op_name, op=op):
                x = ins((4, 6), dtype)
                f = [v.double() if floating else v for v in x]
                s = torch.stack(f)
                ref = {"SUM": lambda: s.sum(0), "MAX": lambda: s.amax(0),
                       "MIN": lambda: s.amin(0), "PRODUCT": lambda: s.prod(0),
                       "AVG": lambda: s.mean(0),
                       "PREMUL_SUM": lambda: 0.5 * s.sum(0)}[op_name]().to(dtype)
                t = x[rank].to(dev)[1:]  # a view: results land in its base
                base = t._base
                dist.all_reduce(t, op=op)
                _close(torch, t, ref[1:])
                _close(torch, base[0], x[rank][0])

            yield f"all_reduce/{op_name}/{dn}", all_reduce

        def all_gather(dtype=dtype):
            x = ins((2, 3), dtype)
            outs = [torch.empty(2, 3, dtype=dtype, device=dev) for _ in range(W)]
            dist.all_gather(outs, x[rank].to(dev))
            for r in range(W):
                _close(torch, outs[r], x[r])

        yield f"all_gather/{dn}", all_gather

        def all_gather_into_tensor(dtype=dtype):
            x = ins((2, 3), dtype)
            out = torch.empty(2 * W, 3, dtype=dtype, device=dev)
            dist.all_gather_single(out, x[rank].to(dev))
            _close(torch, out, torch.cat(x))
            # a flat output, as NCCL takes it (accelerate's gather passes one)
            flat = torch.empty(2 * W * 3, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(flat, x[rank].to(dev))
            _close(torch, flat, torch.cat(x).flatten())

        yield f"all_gather_into_tensor/{dn}", all_gather_into_tensor

        def reduce_scatter(dtype=dtype):
            x = [ins((2, 4), dtype) for _ in range(W)]  # x[chunk][rank]
            out = torch.empty(2, 4, dtype=dtype, device=dev)
            ins_ = [x[j][rank].to(dev) for j in range(W)]
            # Floats: PREMUL_SUM, which must leave the inputs as they were.
            op = dist._make_nccl_premul_sum(0.5) if floating else R.SUM
            dist.reduce_scatter(out, ins_, op=op)
            s = torch.stack([v.double() if floating else v for v in x[rank]]).sum(0)
            _close(torch, out, (0.5 * s if floating else s).to(dtype))
            for j in range(W):
                _close(torch, ins_[j], x[j][rank])

        yield f"reduce_scatter/{dn}", reduce_scatter

        def reduce_scatter_tensor(dtype=dtype):
            x = ins((2 * W, 3), dtype)
            out = torch.empty(2, 3, dtype=dtype, device=dev)
            op = R.AVG if floating else R.SUM
            dist.reduce_scatter_single(out, x[rank].to(dev), op=op)
            s = torch.stack([v.double() if floating else v for v in x])
            ref = (s.mean(0) if floating else s.sum(0)).to(dtype)
            _close(torch, out, ref[2 * rank: 2 * rank + 2])

        yield f"reduce_scatter_tensor/{dn}", reduce_scatter_tensor

        def all_to_all(dtype=dtype):
            x = [ins((3,), dtype) for _ in range(W)]  # x[to][from]
            outs = [torch.empty(3, dtype=dtype, device=dev) for _ in range(W)]
            dist.all_to_all(outs, [x[j][rank].to(dev) for j in range(W)])
            for r in range(W):
                _close(torch, outs[r], x[rank][r])

        yield f"all_to_all/{dn}", all_to_all

        def all_to_all_single_uneven(dtype=dtype):
            # rank r sends r + j + 1 rows to rank j.
            rows = [[r + j + 1 for j in range(W)] for r in range(W)]
            x = [ins((sum(rows[r]), 2), dtype)[r] for r in range(W)]
            out = torch.empty(sum(rows[j][rank] for j in range(W)), 2, dtype=dtype, device=dev)
            dist.all_to_all_single(out, x[rank].to(dev), output_split_sizes=[rows[j][rank] for j in range(W)],
                                   input_split_sizes=rows[rank])
            ref = torch.cat([x[j].split(rows[j])[rank] for j in range(W)])
            _close(torch, out, ref)

        yield f"all_to_all_single_uneven/{dn}", all_to_all_single_uneven

        def gather_scatter(dtype=dtype):
            x = ins((2, 2), dtype)
            dst = W - 1
            outs = [torch.empty(2, 2, dtype=dtype, device=dev) for _ in range(W)] if rank == dst else None
            dist.gather(x[rank].to(dev), outs, dst=dst)
            if rank == dst:
                for r in range(W):
                    _close(torch, outs[r], x[r])
            y = ins((2, 2), dtype)
            out = torch.empty(2, 2, dtype=dtype, device=dev)
            dist.scatter(out, [v.to(dev) for v in y] if rank == 0 else None, src=0)
            _close(torch, out, y[rank])

        yield f"gather_scatter/{dn}", gather_scatter

        def reduce(dtype=dtype):
            x = ins((5,), dtype)
            t = x[rank].to(dev)
            dist.reduce(t, dst=0, op=R.MAX)
            if rank == 0:
                _close(torch, t, torch.stack(x).amax(0))

        yield f"reduce/{dn}", reduce

        def send_recv(dtype=dtype):
            x = ins((4,), dtype)
            nxt, prv = (rank + 1) % W, (rank - 1) % W
            got = torch.empty(4, dtype=dtype, device=dev)
            if rank % 2 == 0:
                dist.send(x[rank].to(dev), nxt)
                dist.recv(got, prv)
            else:
                dist.recv(got, prv)
                dist.send(x[rank].to(dev), nxt)
            _close(torch, got, x[prv])
            # Non-blocking, both directions at once.
            got2 = torch.empty(4, dtype=dtype, device=dev)
            ops = [dist.P2POp(dist.isend, x[rank].to(dev), prv),
                   dist.P2POp(dist.irecv, got2, nxt)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            _close(torch, got2, x[nxt])

        yield f"send_recv/{dn}", send_recv

    def coalesced():
        x, y = ins((3,), torch.float32), ins((2, 2), torch.float32)
        a, b = x[rank].to(dev), y[rank].to(dev)
        with dist._coalescing_manager(async_ops=True) as cm:
            dist.all_reduce(a)
            dist.all_reduce(b)
        cm.wait()
        _close(torch, a, torch.stack(x).sum(0))
        _close(torch, b, torch.stack(y).sum(0))
        g1, g2 = ins((2,), torch.float32), ins((3,), torch.float32)
        o1, o2 = torch.empty(2 * W, device=dev), torch.empty(3 * W, device=dev)
        with dist._coalescing_manager():
            dist.all_gather_single(o1, g1[rank].to(dev))
            dist.all_gather_single(o2, g2[rank].to(dev))
        _close(torch, o1, torch.cat(g1))
        _close(torch, o2, torch.cat(g2))
        r1 = ins((2 * W,), torch.float32)
        out = torch.empty(2, device=dev)
        with dist._coalescing_manager():
            dist.reduce_scatter_single(out, r1[rank].to(dev))
        _close(torch, out, torch.stack(r1).sum(0)[2 * rank: 2 * rank + 2])
        c = ins((4,), torch.float32)
        ts = [c[rank].to(dev), c[rank].to(dev) * 2]
        dist.all_reduce_coalesced(ts)
        _close(torch, ts[1], 2 * torch.stack(c).sum(0))

    yield "coalesced", coalesced

    def async_work_and_future():
        x = ins((8,), torch.float32)
        t = x[rank].to(dev)
        work = dist.all_reduce(t, async_op=True)
        value = work.get_future().wait()[0]
        assert value.device.type == "tpu", value.device
        _close(torch, value, torch.stack(x).sum(0))
        _close(torch, t, torch.stack(x).sum(0))
        work = dist.broadcast(t, src=0, async_op=True)
        assert work.wait()
        assert work.is_completed()

    yield "async_work_and_future", async_work_and_future

    def cpu_tensors_and_objects():
        t = torch.full((3,), float(rank))
        dist.all_reduce(t)
        _close(torch, t, torch.full((3,), float(sum(range(W)))))
        objs = [None] * W
        dist.all_gather_object(objs, {"rank": rank})
        assert objs == [{"rank": r} for r in range(W)], objs
        dist.barrier()

    yield "cpu_tensors_and_objects", cpu_tensors_and_objects

    def bad_input_raises():
        # Refused on every rank before anything is sent: the world stays in step.
        t = torch.ones(3, dtype=torch.int64, device=dev)
        try:
            dist.all_reduce(t, op=R.AVG)
        except RuntimeError as e:
            assert "AVG needs a floating-point tensor" in str(e), str(e)
        else:
            raise AssertionError("AVG on int64 did not raise")
        _close(torch, t, torch.ones(3, dtype=torch.int64))  # untouched

    yield "bad_input_raises", bad_input_raises

    def functional_eager():
        import torch.distributed._functional_collectives as fc
        x = ins((2, 3), torch.float32)
        y = fc.all_reduce(x[rank].to(dev), "sum", dist.group.WORLD)
        _close(torch, y, torch.stack(x).sum(0))
        g = fc.all_gather_tensor(x[rank].to(dev), 0, dist.group.WORLD)
        _close(torch, g, torch.cat(x))
        z = ins((2 * W, 2), torch.float32)
        rs = fc.reduce_scatter_tensor(z[rank].to(dev), "sum", 0, dist.group.WORLD)
        _close(torch, rs, torch.stack(z).sum(0)[2 * rank: 2 * rank + 2])

    yield "functional_eager", functional_eager

    def functional_compiled():
        import torch.distributed._functional_collectives as fc

        def f(x):
            y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
            return torch.relu(y) + 1

        import torchtpu
        before = torchtpu.metrics.metrics()
        x = ins((4, 4), torch.float32)
        out = torch.compile(f, backend="tpu", fullgraph=True)(x[rank].to(dev))
        _close(torch, out, torch.relu(2 * torch.stack(x).sum(0)) + 1)
        after = torchtpu.metrics.metrics()
        # Compiled around the collective, not run op by op.
        assert after.get("compile_split_graphs", 0) == before.get("compile_split_graphs", 0) + 1
        assert after.get("compile_graphs_eager", 0) == before.get("compile_graphs_eager", 0)

    yield "functional_compiled", functional_compiled


def _train_reference(torch, model, batches, lr, steps):
    """`steps` of SGD on CPU over the whole batch: what every parallel run
    below must reproduce."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches[:steps]:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def _batches(torch, world, n=3, per_rank=4, d_in=8, d_out=4):
    g = torch.Generator().manual_seed(123)
    return [(torch.randn(world * per_rank, d_in, generator=g),
             torch.randn(world * per_rank, d_out, generator=g)) for _ in range(n)]


def _mlp(torch, seed=0, d_in=8, hidden=16, d_out=4):
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                         nn.Tanh(), nn.Linear(hidden, d_out))


def _parallel_checks(c):
    import copy
    torch, dist, rank, W = c.torch, c.dist, c.rank, c.world
    dev = torch.device("tpu")
    F = torch.nn.functional

    def init():
        dist.init_process_group()  # no backend named: tpu's default is tpudist
        assert dist.get_backend_config() and "tpu:tpudist" in dist.get_backend_config(), \
            dist.get_backend_config()

    yield "init_default_backend", init

    def torch_mesh_first():
        # torch's own init_device_mesh as the first call after the group
        # (TorchTitan's order): it set_device(LOCAL_RANK)s a runtime not yet
        # started, an index a process that sees one device does not have.
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("tpu", (W,))
        assert mesh.size() == W and mesh.get_local_rank() == rank
        assert torch.tpu.current_device() == 0

    yield "torch_device_mesh_first", torch_mesh_first

    def train_shard(model, opt, batches):
        """SGD on this rank's 4 rows of each batch."""
        for x, y in batches:
            lo, hi = rank * 4, rank * 4 + 4
            opt.zero_grad()
            F.mse_loss(model(x[lo:hi].to(dev)), y[lo:hi].to(dev)).backward()
            opt.step()

    def assert_params(named, ref, full):
        for (name, p), q in zip(named, ref.parameters()):
            torch.testing.assert_close(full(p).detach().cpu(), q.detach(), rtol=1e-4,
                                       atol=1e-5, msg=lambda m: f"{name}: {m}")

    def ddp():
        from torch.nn.parallel import DistributedDataParallel as DDP
        batches = _batches(torch, W)
        ref = _train_reference(torch, _mlp(torch), batches, 0.1, 3)
        model = DDP(_mlp(torch).to(dev))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        train_shard(model, opt, batches)
        assert_params(model.module.named_parameters(), ref, lambda p: p)

    yield "ddp_equals_single_process", ddp

    def fsdp2():
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor
        batches = _batches(torch, W)
        ref = _train_reference(torch, _mlp(torch, seed=1), batches, 0.1, 3)
        model = _mlp(torch, seed=1).to(dev)
        for layer in (model[0], model[2], model[4]):
            fully_shard(layer)
        fully_shard(model)
        assert isinstance(model[0].weight, DTensor)
        # Each rank holds 1/W of every parameter's rows.
        assert model[2].weight.to_local().shape[0] == 16 // W
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        train_shard(model, opt, batches)
        assert_params(model.named_parameters(), ref, lambda p: p.full_tensor())

    yield "fsdp2_equals_unsharded", fsdp2

    def tensor_parallel():
        # TinyGPT with DTensor's Megatron split over the world, compiled:
        # the losses of a single-device run (each rank computes it too).
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        from torch.distributed.device_mesh import init_device_mesh

        from tiny_gpt import TinyGPT, batches, make_corpus
        from tiny_gpt_tp import tensor_parallel as split
        data, vocab = make_corpus()

        def train(tp):
            torch.manual_seed(0)
            torch._dynamo.reset()
            model = TinyGPT(len(vocab), dim=64, heads=4, layers=2, max_len=64).to(dev)
            if tp:
                split(model, init_device_mesh("tpu", (W,)))
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
            run = torch.compile(model, backend="tpu")
            stream = batches(data, 4, 16, 0)
            losses = []
            for _ in range(4):
                x, y = next(stream)
                loss = run(x.to(dev), y.to(dev))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.detach())
            return torch.stack(losses).cpu()

        ref, got = train(False), train(True)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)

    yield "tensor_parallel_tiny_gpt", tensor_parallel

    def dtensor():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        mesh = init_device_mesh("tpu", (W,))
        g = torch.Generator().manual_seed(5)
        a, b = torch.randn(4 * W, 6, generator=g), torch.randn(6, 2 * W, generator=g)
        A = distribute_tensor(a.to(dev), mesh, [Shard(0)])
        B = distribute_tensor(b.to(dev), mesh, [Replicate()])
        assert A.to_local().device.type == "tpu" and A.to_local().shape == (4, 6)
        C = A @ B
        assert C.placements == (Shard(0),), C.placements
        torch.testing.assert_close(C.full_tensor().cpu(), a @ b, rtol=1e-4, atol=1e-5)
        # Column-sharded weight: a Shard(1) result; then redistributions.
        Bc = distribute_tensor(b.to(dev), mesh, [Shard(1)])
        Ar = distribute_tensor(a.to(dev), mesh, [Replicate()])
        D = Ar @ Bc
        assert D.placements == (Shard(1),), D.placements
        torch.testing.assert_close(D.redistribute(mesh, [Replicate()]).to_local().cpu(), a @ b,
                                   rtol=1e-4, atol=1e-5)
        E = D.redistribute(mesh, [Shard(0)])
        torch.testing.assert_close(E.to_local().cpu(), (a @ b)[4 * rank: 4 * rank + 4],
                                   rtol=1e-4, atol=1e-5)
        # A contraction over the sharded dimension: a Partial sum, reduced.
        P = distribute_tensor(a.t().contiguous().to(dev), mesh, [Shard(1)]) @ \
            distribute_tensor(a.to(dev), mesh, [Shard(0)])
        torch.testing.assert_close(P.full_tensor().cpu(), a.t() @ a, rtol=1e-4, atol=1e-4)

    yield "dtensor_matmul_redistribute", dtensor

    def pipeline():
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
        # One Linear per stage; stage r runs on rank r.
        torch.manual_seed(2)
        widths = [8] + [12] * (W - 1) + [4]
        blocks = [torch.nn.Sequential(torch.nn.Linear(widths[i], widths[i + 1]),
                                      *([torch.nn.Tanh()] if i < W - 1 else []))
                  for i in range(W)]
        batches = _batches(torch, 1, per_rank=8)
        ref = _train_reference(torch, copy.deepcopy(torch.nn.Sequential(*blocks)), batches,
                               0.1, 3)
        part = blocks[rank].to(dev)
        stage = PipelineStage(part, stage_index=rank, num_stages=W, device=dev)
        schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=F.mse_loss)
        opt = torch.optim.SGD(part.parameters(), lr=0.1)
        for x, y in batches:
            opt.zero_grad()
            # The ranks run different programs: input, middle, loss.
            if rank == 0:
                schedule.step(x.to(dev))
            elif rank == W - 1:
                losses = []
                schedule.step(target=y.to(dev), losses=losses)
                assert len(losses) == 2
            else:
                schedule.step()
            opt.step()
        assert_params(part.named_parameters(), ref[rank], lambda p: p)

    yield "pipeline_stages", pipeline

    def topology_mesh():
        import torchtpu.distributed as td
        from torch.distributed.tensor import Shard, distribute_tensor
        shape = (2, W // 2)
        mesh = td.init_device_mesh(shape, mesh_dim_names=("dp", "tp"))
        # The CPU plugin reports no coordinates: rank order.
        assert mesh.mesh.tolist() == torch.arange(W).reshape(shape).tolist(), mesh.mesh
        assert mesh.device_type == "tpu"
        g = torch.Generator().manual_seed(9)
        a, b = torch.randn(4, 2 * W, generator=g), torch.randn(2 * W, 3, generator=g)
        A = distribute_tensor(a.to(dev), mesh, [Shard(0), Shard(1)])
        assert A.to_local().shape == (2, 4), A.to_local().shape
        torch.testing.assert_close(A.full_tensor().cpu(), a)
        B = distribute_tensor(b.to(dev), mesh, [Shard(0), Shard(0)])
        torch.testing.assert_close(B.full_tensor().cpu(), b)
        # Collectives along one mesh dimension reach only that sub-group.
        t = torch.full((2,), float(rank), device=dev)
        dist.all_reduce(t, group=mesh.get_group("tp"))
        row = mesh.mesh[rank // (W // 2)].tolist()
        torch.testing.assert_close(t.cpu(), torch.full((2,), float(sum(row))))

    yield "topology_mesh", topology_mesh


def _dead_rank_checks(c):
    import datetime
    torch, dist, rank = c.torch, c.dist, c.rank

    def init():
        dist.init_process_group("tpudist", timeout=datetime.timedelta(seconds=30))
        dist.barrier()

    yield "init", init

    def peer_dies():
        t = torch.ones(4, device="tpu")
        if rank == 1:
            os._exit(3)  # dies without a word
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except Exception as e:  # noqa: BLE001 - any clear error will do
            elapsed = time.monotonic() - start
            assert elapsed < 35, f"raised only after {elapsed:.1f} s"
            assert str(e), "an error without a message"
            return
        raise AssertionError("all_reduce with a dead peer returned")

    yield "peer_dies", peer_dies


SCENARIOS = {"collectives": _collective_checks, "parallel": _parallel_checks,
             "dead_rank": _dead_rank_checks}


# --------------------------------------------------------------------------
# Tests (pytest side).

def _collective_names(world):
    import torch

    class _Fake:
        def __init__(self):
            self.torch, self.dist, self.rank, self.world = torch, _FakeDist, 0, world

    return [name for name, _ in _collective_checks(_Fake())]


class _FakeDist:
    """Enough of torch.distributed to list the checks without running them."""

    class ReduceOp:
        SUM = MAX = MIN = PRODUCT = AVG = None

    @staticmethod
    def _make_nccl_premul_sum(factor):
        return None


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", _collective_names(2))
def test_collective(world, name, tmp_path_factory):
    _check(_world(world, "collectives", tmp_path_factory), name)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", ["init_default_backend", "torch_device_mesh_first",
                                  "ddp_equals_single_process",
                                  "fsdp2_equals_unsharded", "tensor_parallel_tiny_gpt",
                                  "dtensor_matmul_redistribute",
                                  "pipeline_stages", "topology_mesh"])
def test_parallel(world, name, tmp_path_factory):
    _check(_world(world, "parallel", tmp_path_factory), name)


def test_dead_rank_raises(tmp_path_factory):
    results, logs = _world(2, "dead_rank", tmp_path_factory)
    assert results[0].get("peer_dies") == "ok", (results[0], logs[0])


@pytest.mark.parametrize("script", ["ddp_train.py", "fsdp2_train.py"])
def test_example_under_torchrun(script):
    """The examples, launched the way the README says (torchrun)."""
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHTPU_FALLBACK="error")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(_free_port()), os.path.join(ROOT, "examples", script),
         "--steps", "6"], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "step   5" in proc.stdout, proc.stdout


if __name__ == "__main__":
    _worker_main(sys.argv[1], sys.argv[2])
