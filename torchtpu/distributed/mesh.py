"""A device mesh laid out on the physical torus.

DeviceMesh groups ranks along mesh dimensions by their position in the mesh
tensor; collectives along a dimension are fastest when its consecutive
members are neighbours on the interconnect (TPU chips sit on a 2-D or 3-D
torus and report their place as the device attribute "coords"). mesh_layout
chooses that tensor from the ranks' coordinates; init_device_mesh gathers
them and builds the DeviceMesh.
"""
import itertools
import math
import operator

import torch

__all__ = ["init_device_mesh", "mesh_layout"]


def mesh_layout(coords, mesh_shape):
    """The rank at each mesh position, as an int64 tensor of `mesh_shape`.

    coords[r] is the physical coordinate tuple (x, y[, z]) of rank r's device,
    x the fastest axis, or None when unknown. Mesh dimensions are given to
    physical axes from the innermost outward: a dimension takes a factor of an
    axis, or spans several axes in snake order so that consecutive members
    stay neighbours; the order of the axes that makes the most neighbours,
    innermost dimension first, wins. Unknown coordinates, coordinates that
    are not a full grid, or sizes that do not factor onto the axes give plain
    rank order.
    """
    mesh_shape = _check_shape(mesh_shape)
    world = len(coords)
    if math.prod(mesh_shape) != world:
        raise ValueError(f"mesh_shape {mesh_shape} holds {math.prod(mesh_shape)} "
                         f"ranks, but there are {world} coordinates")
    rank_order = torch.arange(world, dtype=torch.int64).reshape(mesh_shape)
    if any(c is None for c in coords):
        return rank_order
    points = [tuple(int(v) for v in c) for c in coords]
    lengths = {len(p) for p in points}
    if len(lengths) != 1:
        raise ValueError(f"coordinates of different lengths {sorted(lengths)}: {points}")
    if lengths == {0}:
        return rank_order
    first_rank = {}
    for rank, p in enumerate(points):
        if p in first_rank:
            raise ValueError(f"ranks {first_rank[p]} and {rank} have the same "
                             f"coordinates {p}")
        first_rank[p] = rank

    # Axis values compressed to 0..size-1 (a slice need not start at 0).
    values = [sorted({p[a] for p in points}) for a in range(len(points[0]))]
    sizes = [len(v) for v in values]
    if math.prod(sizes) != world:  # not a full grid: no torus to follow
        return rank_order
    index = [{v: i for i, v in enumerate(vs)} for vs in values]
    grid = {tuple(index[a][v] for a, v in enumerate(p)): r for r, p in enumerate(points)}

    best = None
    for axes in itertools.permutations(range(len(sizes))):
        pieces = _factor(mesh_shape, [sizes[a] for a in axes])
        if pieces is None:
            continue
        positions = _positions(mesh_shape, pieces, axes, len(sizes))
        score = _neighbour_score(positions, mesh_shape, sizes)
        if best is None or score > best[0]:
            best = (score, positions)
    if best is None:
        return rank_order
    ranks = [grid[p] for p in best[1]]
    return torch.tensor(ranks, dtype=torch.int64).reshape(mesh_shape)


def init_device_mesh(mesh_shape, mesh_dim_names=None, device_type="tpu"):
    """torch.distributed's DeviceMesh over every rank, laid out by
    mesh_layout from the coordinates of each rank's current device. Needs
    an initialised process group; every rank computes the same layout."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("init_device_mesh needs torch.distributed.init_process_group() first")
    mesh_shape = _check_shape(mesh_shape)
    if mesh_dim_names is not None:
        mesh_dim_names = tuple(mesh_dim_names)
        if len(mesh_dim_names) != len(mesh_shape):
            raise ValueError(f"{len(mesh_dim_names)} mesh_dim_names for a "
                             f"{len(mesh_shape)}-D mesh_shape {mesh_shape}")
    gathered = [None] * dist.get_world_size()
    # Reading the current device starts the runtime, so DeviceMesh leaves
    # the device alone instead of setting tpu:LOCAL_RANK (an index that need
    # not exist under TORCHTPU_VISIBLE_DEVICES).
    dist.all_gather_object(gathered, _local_place())
    layout = mesh_layout(_coords_with_cores(gathered), mesh_shape)
    return DeviceMesh(device_type, layout, mesh_dim_names=mesh_dim_names)


def _check_shape(mesh_shape):
    try:
        shape = (operator.index(mesh_shape),) if not hasattr(mesh_shape, "__iter__") \
            else tuple(operator.index(m) for m in mesh_shape)
    except TypeError:
        shape = ()
    if not shape or any(m < 1 for m in shape):
        raise ValueError(f"mesh_shape must be positive ints, got {mesh_shape!r}")
    return shape


def _local_place():
    """(coords, core_on_chip) of this process's current tpu device."""
    from ..runtime import devices_info

    attributes = devices_info()[torch.tpu.current_device()]["attributes"]
    coords = attributes.get("coords")
    return (tuple(coords) if coords else None, attributes.get("core_on_chip"))


def _coords_with_cores(places):
    """Coordinates per rank; chips with several cores (TPU v2/v3) report the
    same coords for each, so the core becomes the fastest axis."""
    coords = [c for c, _ in places]
    if any(c is None for c in coords) or len(set(coords)) == len(coords):
        return coords
    if any(core is None for _, core in places):
        return coords  # mesh_layout names the duplicate
    return [(int(core),) + c for c, core in places]


def _factor(mesh_shape, sizes):
    """Pieces per mesh dimension, each (axis, count, stride): the dimension
    walks `count` values of that axis `stride` apart; a dimension's pieces
    are listed fastest first. Innermost dimensions take the first axes.
    None when a size neither divides nor is a multiple of what is left of
    an axis."""
    pieces = [[] for _ in mesh_shape]
    axis, used = 0, 1  # used: the part of sizes[axis] already given out
    for d in reversed(range(len(mesh_shape))):
        need = mesh_shape[d]
        while need > 1:
            while axis < len(sizes) and sizes[axis] == used:
                axis, used = axis + 1, 1
            if axis == len(sizes):
                return None
            left = sizes[axis] // used
            take = need if left % need == 0 else left if need % left == 0 else 0
            if not take:
                return None
            pieces[d].append((axis, take, used))
            used *= take
            need //= take
    return pieces


def _snake(k, counts):
    """Digit values (fastest first) of step k along a boustrophedon walk over
    a grid of `counts`: each block is walked backwards after an odd step of
    the digit above it, so consecutive steps change one digit by one."""
    digits = []
    for i in reversed(range(len(counts))):
        inner = math.prod(counts[:i])
        high, k = divmod(k, inner)
        digits.append(high)
        if high % 2:
            k = inner - 1 - k
    return digits[::-1]


def _positions(mesh_shape, pieces, axes, naxes):
    """Physical grid index of each mesh position, in row-major mesh order."""
    steps = []
    for d, m in enumerate(mesh_shape):
        counts = [count for _, count, _ in pieces[d]]
        along = []
        for k in range(m):
            offset = [0] * naxes
            for (axis, _, stride), digit in zip(pieces[d], _snake(k, counts)):
                offset[axes[axis]] += digit * stride
            along.append(offset)
        steps.append(along)
    return [tuple(map(sum, zip(*combo))) for combo in itertools.product(*steps)]


def _neighbour_score(positions, mesh_shape, sizes):
    """Per mesh dimension, innermost first: how many of its consecutive pairs
    (the ring's closing pair included) are torus neighbours."""
    score = []
    for d in reversed(range(len(mesh_shape))):
        m, stride = mesh_shape[d], math.prod(mesh_shape[d + 1:])
        count = 0
        for flat, here in enumerate(positions):
            k = flat // stride % m
            if m == 1 or (m == 2 and k == 1):
                continue  # no pair, or the same pair again
            there = positions[flat + ((k + 1) % m - k) * stride]
            count += _torus_distance(here, there, sizes) == 1
        score.append(count)
    return tuple(score)


def _torus_distance(a, b, sizes):
    return sum(min(abs(x - y), n - abs(x - y)) for x, y, n in zip(a, b, sizes))
