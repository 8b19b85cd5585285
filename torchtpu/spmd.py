"""SPMD over the local devices: one process drives every tpu device of the
host, and ``torch.compile`` runs each graph as ONE XLA program partitioned
over them, with the collectives inside it.

The vocabulary is PyTorch's: a device mesh of the local devices
(``init_device_mesh``) and DTensor's placements ``Shard(dim)`` and
``Replicate()`` per mesh dimension. Tensors stay plain ``tpu`` tensors that
hold their whole (global) value on the mesh's first device;
``mark_sharding`` / ``distribute_module`` annotate how each should be split.
When a graph compiled with ``backend="tpu"`` is called with an annotated
input, its StableHLO parameters carry the shardings (``mhlo.sharding``),
XLA's SPMD partitioner splits the program over the mesh and inserts the
all-reduces and all-gathers, and one PJRT execution runs it on every
device. Unannotated inputs are replicated; results are replicated, so each
is the whole value on the mesh's first device and every number equals a
single-device run up to the order of floating-point sums. Annotations never
change results, only where the work runs.

Shards move between devices device to device (``bytes_device_to_device``),
never through host memory, and a tensor's shards are kept until it is
written (its version counter), so replicated parameters are copied once
per optimizer step. For one process per device (multi-host, torchrun) use
``tpudist`` instead (README: Distributed).
"""

import math
import weakref

import torch
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard

from . import _C

__all__ = ["DeviceMesh", "init_device_mesh", "mark_sharding", "distribute_module",
           "sharding_of", "clear_sharding", "Shard", "Replicate"]


class DeviceMesh:
    """An n-dimensional arrangement of local tpu devices (as
    ``torch.distributed.device_mesh.DeviceMesh``, inside one process)."""

    def __init__(self, mesh_shape, mesh_dim_names=None, devices=None):
        shape = tuple(int(s) for s in mesh_shape)
        if not shape or any(s < 1 for s in shape):
            raise ValueError(f"torchtpu.spmd: mesh shape {mesh_shape} must be positive sizes")
        n = math.prod(shape)
        count = torch.tpu.device_count()
        devices = list(range(n)) if devices is None else [int(d) for d in devices]
        if len(devices) != n:
            raise ValueError(f"torchtpu.spmd: a {shape} mesh needs {n} devices, "
                             f"got {len(devices)}")
        if len(set(devices)) != n or any(d < 0 or d >= count for d in devices):
            raise ValueError(f"torchtpu.spmd: mesh devices {devices} must be distinct tpu "
                             f"device indices below {count} (TORCHTPU_NUM_DEVICES sets the "
                             "CPU plugin's count)")
        if mesh_dim_names is not None:
            mesh_dim_names = tuple(mesh_dim_names)
            if len(mesh_dim_names) != len(shape):
                raise ValueError("torchtpu.spmd: one name per mesh dimension")
        self.shape, self.mesh_dim_names, self.devices = shape, mesh_dim_names, tuple(devices)
        self.device_type = "tpu"

    @property
    def ndim(self):
        return len(self.shape)

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            return len(self.devices)
        return self.shape[self._dim(mesh_dim)]

    def _dim(self, mesh_dim):
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"torchtpu.spmd: the mesh has no dimension {mesh_dim!r}")
            return self.mesh_dim_names.index(mesh_dim)
        return int(mesh_dim)

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and (self.shape, self.devices) == (
            other.shape, other.devices)

    def __hash__(self):
        return hash((self.shape, self.devices))

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('tpu', shape={self.shape}, devices={list(self.devices)}{names})"


def init_device_mesh(mesh_shape, mesh_dim_names=None, devices=None):
    """A mesh of the local tpu devices (``device_type`` is implied), as
    ``torch.distributed.device_mesh.init_device_mesh("tpu", ...)``."""
    return DeviceMesh(mesh_shape, mesh_dim_names, devices)


# ---- annotations ---------------------------------------------------------------

class _Entry:
    """How one tensor (a geometry in a storage) is split over a mesh, and
    its pieces on the mesh's devices as of `version`."""
    __slots__ = ("storage", "geometry", "whole", "mesh", "placements", "version", "pieces")

    def __init__(self, t, mesh, placements, table):
        s = t.untyped_storage()
        ptr = s.data_ptr()
        # The entry lives as long as the storage (not the Python tensor:
        # AOTAutograd hands a graph other tensor objects viewing it, as a
        # parameter saved for the backward).
        self.storage = weakref.ref(s, lambda _ref: _forget(table, ptr))
        self.geometry = _geometry(t)
        # Its tensor is its whole storage, contiguous: its pieces are copies
        # of the storage, which any other view of it can index.
        self.whole = (t.is_contiguous() and t.storage_offset() == 0
                      and t.numel() * t.element_size() == s.nbytes())
        self.mesh, self.placements = mesh, placements
        self.version, self.pieces = None, None
        entries = table.setdefault(ptr, [])
        entries[:] = [e for e in entries if e.geometry != self.geometry and e.storage() is not None]
        entries.append(self)


def _geometry(t):
    return tuple(t.shape), t.stride(), t.storage_offset()


def _forget(table, ptr):
    entries = table.get(ptr)
    if entries is not None:
        entries[:] = [e for e in entries if e.storage() is not None]
        if not entries:
            table.pop(ptr, None)


# storage address -> [_Entry]: the annotations users make, and the results
# of partitioned graphs (replicated: their copies on the other devices,
# reused when a later graph reads them, as a backward its saved values).
_annotations = {}
_results = {}


def _find(table, t):
    """(entry for t's exact geometry, or a replicated whole-storage entry
    t is a view of, or None; whether t is that entry's tensor)."""
    s = t.untyped_storage()
    entries = table.get(s.data_ptr())
    if not entries:
        return None, False
    geometry, view = _geometry(t), None
    for e in entries:
        if e.storage() is not s:
            continue
        if e.geometry == geometry:
            return e, True
        if view is None and e.whole and all(isinstance(p, Replicate) for p in e.placements):
            view = e
    return view, False


def _placements(mesh, placements, t):
    if isinstance(placements, Placement):
        placements = [placements]
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"torchtpu.spmd: {len(placements)} placements for a "
                         f"{mesh.ndim}-dimensional mesh")
    for axis, p in enumerate(placements):
        if isinstance(p, Partial):
            raise NotImplementedError(
                "torchtpu.spmd: Partial placements are not supported on inputs (a tensor holds "
                "its whole value); use Shard or Replicate")
        if not isinstance(p, (Shard, Replicate)):
            raise TypeError(f"torchtpu.spmd: {p!r} is not a Shard or Replicate placement")
        if isinstance(p, Shard):
            if not -t.dim() <= p.dim < max(t.dim(), 1) or t.dim() == 0:
                raise ValueError(f"torchtpu.spmd: Shard({p.dim}) of a {t.dim()}-dimensional "
                                 "tensor")
    splits = _splits(mesh, placements, t.dim())
    for d, axes in enumerate(splits):
        k = math.prod(mesh.shape[a] for a in axes)
        if t.shape[d] % k:
            raise ValueError(f"torchtpu.spmd: dim {d} of size {t.shape[d]} does not split "
                             f"evenly into {k} shards")
    return placements


def _splits(mesh, placements, ndim):
    """Per tensor dim, the mesh axes that split it (outer first)."""
    splits = [[] for _ in range(ndim)]
    for axis, p in enumerate(placements):
        if isinstance(p, Shard):
            splits[p.dim % ndim].append(axis)
    return splits


def mark_sharding(tensor, mesh, placements):
    """Annotates `tensor` (a tpu tensor holding the whole value) with how it
    is split over `mesh`: one placement per mesh dimension (``Shard(d)``
    splits tensor dim d, ``Replicate()`` copies it). Returns `tensor`."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "tpu":
        raise ValueError("torchtpu.spmd.mark_sharding: expected a tpu tensor")
    if not isinstance(mesh, DeviceMesh):
        raise TypeError("torchtpu.spmd.mark_sharding: mesh must be a torchtpu.spmd.DeviceMesh")
    placements = _placements(mesh, placements, tensor)
    _Entry(tensor, mesh, placements, _annotations)
    return tensor


def clear_sharding(tensor):
    entries = _annotations.get(tensor.untyped_storage().data_ptr(), [])
    entries[:] = [e for e in entries if e.geometry != _geometry(tensor)]


def sharding_of(tensor):
    """(mesh, placements) of an annotated tensor, else None."""
    e, exact = _find(_annotations, tensor)
    return (e.mesh, e.placements) if exact else None


def distribute_module(module, mesh, plan=None):
    """Annotates every parameter and buffer of `module` (already on tpu):
    `plan` maps a name (``"attn.c_attn.weight"``, matched as a suffix of
    the qualified name, or ``"*"``) to placements; the rest are replicated.
    Returns `module`."""
    plan = dict(plan or {})
    replicated = tuple(Replicate() for _ in range(mesh.ndim))
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        chosen = replicated
        for pattern, placements in plan.items():
            if pattern == "*" or name == pattern or name.endswith("." + pattern):
                chosen = placements
        mark_sharding(t, mesh, chosen)
    return module


# ---- running a compiled graph partitioned -------------------------------------

def _gspmd(mesh, placements, ndim):
    """GSPMD's text form of a sharding: the partition ids (mesh positions,
    row-major) laid out as the tile grid of the tensor's dims, the
    replicating mesh axes last."""
    if placements is None or ndim == 0:
        return None
    splits = _splits(mesh, placements, ndim)
    split_axes = [a for axes in splits for a in axes]
    if not split_axes:
        return None
    rest = [a for a in range(mesh.ndim) if a not in split_axes]
    order = split_axes + rest
    ids = torch.arange(len(mesh.devices)).reshape(mesh.shape).permute(order).flatten().tolist()
    tiles = [math.prod(mesh.shape[a] for a in axes) for axes in splits]
    repl = math.prod(mesh.shape[a] for a in rest)
    dims = tiles + ([repl] if repl > 1 else [])
    tail = " last_tile_dim_replicate" if repl > 1 else ""
    return "{devices=[%s]%s%s}" % (",".join(map(str, dims)), ",".join(map(str, ids)), tail)


def _pieces(t, mesh, placements):
    """t's shard for each partition, on that partition's device."""
    splits = _splits(mesh, placements, t.dim()) if placements is not None else None
    out = []
    for p, device in enumerate(mesh.devices):
        piece = t
        if splits and any(splits):
            coords = []
            rest = p
            for size in reversed(mesh.shape):
                coords.append(rest % size)
                rest //= size
            coords.reverse()
            index = []
            for d, axes in enumerate(splits):
                i, k = 0, 1
                for a in axes:
                    i, k = i * mesh.shape[a] + coords[a], k * mesh.shape[a]
                n = t.shape[d] // k
                index.append(slice(i * n, (i + 1) * n))
            piece = t[tuple(index)]
        out.append(piece if device == t.device.index else piece.to(f"tpu:{device}"))
    return out


def _shards(t, mesh, placements):
    """The pieces of an input, kept with its annotation (or, for a result of
    a partitioned graph, its replicas) until it is written."""
    replicated = all(isinstance(p, Replicate) for p in placements)
    for table in (_annotations, _results):
        e, exact = _find(table, t)
        if e is None or e.mesh != mesh or (exact and e.placements != placements) or (
                not exact and not replicated):
            continue
        if e.pieces is None or e.version != t._version:
            owner = t.as_strided(*e.geometry)
            e.pieces, e.version = _pieces(owner, mesh, e.placements), t._version
        if exact:
            return e.pieces
        # a view of a replicated tensor: the same view of each replica
        return [p.as_strided(t.shape, t.stride(), t.storage_offset()) for p in e.pieces]
    return _pieces(t, mesh, placements)


def _input_shardings(tensors):
    """(mesh, placements per input) when some input is annotated, else None."""
    if not _annotations:
        return None
    mesh, found = None, []
    for t in tensors:
        e, exact = _find(_annotations, t)
        if e is not None:
            if mesh is not None and e.mesh != mesh:
                raise ValueError(f"torchtpu.spmd: a graph's inputs are annotated on two "
                                 f"meshes: {mesh} and {e.mesh}")
            mesh = e.mesh
        found.append(e.placements if exact else None)
    if mesh is None:
        return None
    return mesh, found


_programs = {}


def _run(text, specs, out_specs, tensors, mesh, placements):
    """Runs a compiled graph's text partitioned over `mesh`; the results
    (replicated) as tensors on the first input's device."""
    replicated = tuple(Replicate() for _ in range(mesh.ndim))
    placements = [p if p is not None else replicated for p in placements]
    shardings = [_gspmd(mesh, p, len(shape)) for p, (_, shape) in zip(placements, specs)]
    key = (text, mesh.devices, tuple(shardings))
    program = _programs.get(key)
    if program is None:
        sharded = _C._shard_graph_text(text, specs, shardings)
        program = _programs[key] = _C._SpmdProgram(sharded, list(mesh.devices))
    per_input = [_shards(t, mesh, p) for t, p in zip(tensors, placements)]
    per_device = [[pieces[d] for pieces in per_input] for d in range(len(mesh.devices))]
    outs = program.run(per_device)
    home = tensors[0].device.index if tensors else mesh.devices[0]
    first = mesh.devices.index(home) if home in mesh.devices else 0
    results = []
    for k, (_, shape) in enumerate(out_specs):
        r = outs[first][k].view(shape)
        if r.device.index != home:
            r = r.to(f"tpu:{home}")
        else:
            e = _Entry(r, mesh, replicated, _results)
            e.version, e.pieces = r._version, [outs[d][k].view(shape) for d in
                                               range(len(mesh.devices))]
        results.append(r)
    return results
