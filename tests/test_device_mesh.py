"""torchtpu.distributed.mesh: mesh layouts on synthetic tori (no device, no
processes), and init_device_mesh on a one-process group."""
import itertools
import random

import pytest
import torch

from torchtpu.distributed import mesh
from torchtpu.distributed.mesh import init_device_mesh, mesh_layout


def torus_coords(sizes, seed=0):
    """coords[r] for every point of a torus of `sizes` (x first), given to
    ranks in a shuffled order."""
    points = [p[::-1] for p in itertools.product(*[range(n) for n in reversed(sizes)])]
    random.Random(seed).shuffle(points)
    return points


def distance(a, b, sizes):
    return sum(min(abs(x - y), n - abs(x - y)) for x, y, n in zip(a, b, sizes))


def pairs_along(layout, dim, closed=False):
    """Consecutive rank pairs along mesh dimension `dim` (the ring's closing
    pair too when closed)."""
    rows = layout.movedim(dim, -1).reshape(-1, layout.shape[dim]).tolist()
    for row in rows:
        yield from zip(row, row[1:])
        if closed and len(row) > 2:
            yield row[-1], row[0]


def check_neighbours(layout, coords, sizes, dims, closed=False):
    for d in dims:
        for a, b in pairs_along(layout, d, closed):
            assert distance(coords[a], coords[b], sizes) == 1, (d, coords[a], coords[b])


# torus sizes, mesh shape, mesh dims that match a physical axis
CASES = [
    ((2, 2), (2, 2), [0]),
    ((2, 4), (2, 4), [0]),
    ((2, 4), (4, 2), [0]),
    ((2, 4), (2, 2, 2), []),
    ((4, 4), (4, 4), [0]),
    ((4, 4), (2, 8), []),
    ((4, 4), (8, 2), []),
    ((2, 2, 2), (2, 2, 2), [0, 1]),
    ((4, 4, 4), (4, 16), [0]),
    ((4, 4, 4), (16, 4), [0]),
    ((4, 4, 4), (4, 4, 4), [0, 1]),
]


@pytest.mark.parametrize("sizes,shape,matched", CASES)
def test_layout_follows_the_torus(sizes, shape, matched):
    coords = torus_coords(sizes)
    layout = mesh_layout(coords, shape)
    assert tuple(layout.shape) == shape and layout.dtype == torch.int64
    assert sorted(layout.flatten().tolist()) == list(range(len(coords)))
    check_neighbours(layout, coords, sizes, [len(shape) - 1] + matched)


@pytest.mark.parametrize("sizes", [(2, 2), (2, 4), (4, 2), (4, 4), (2, 2, 2), (4, 4, 4)])
def test_one_dimension_is_a_ring(sizes):
    coords = torus_coords(sizes, seed=1)
    layout = mesh_layout(coords, (len(coords),))
    assert sorted(layout.tolist()) == list(range(len(coords)))
    check_neighbours(layout, coords, sizes, [0], closed=True)


def test_layout_depends_on_coordinates_not_their_origin():
    coords = torus_coords((4, 4))
    shifted = [(x + 8, y + 3) for x, y in coords]
    assert torch.equal(mesh_layout(shifted, (4, 4)), mesh_layout(coords, (4, 4)))


def test_rank_order_without_a_usable_torus():
    rank_order = torch.arange(8).reshape(2, 4)
    assert torch.equal(mesh_layout([None] * 8, (2, 4)), rank_order)
    coords = torus_coords((2, 4))
    assert torch.equal(mesh_layout(coords[:7] + [None], (2, 4)), rank_order)
    # Not a full grid: (9, 9) leaves holes.
    assert torch.equal(mesh_layout(coords[:7] + [(9, 9)], (2, 4)), rank_order)
    # 6 neither divides nor is a multiple of 4 or 9.
    coords = torus_coords((4, 9))
    assert torch.equal(mesh_layout(coords, (6, 6)), torch.arange(36).reshape(6, 6))
    assert torch.equal(mesh_layout([()], 1), torch.arange(1))


def test_bad_arguments_raise():
    coords = torus_coords((2, 2))
    with pytest.raises(ValueError, match="holds 8 ranks, but there are 4"):
        mesh_layout(coords, (2, 4))
    with pytest.raises(ValueError, match="same coordinates"):
        mesh_layout([(0, 0), (1, 0), (0, 1), (0, 0)], (4,))
    with pytest.raises(ValueError, match="different lengths"):
        mesh_layout([(0, 0), (1, 0), (0, 1), (1, 1, 0)], (4,))
    for shape in [(), (0, 4), (2, -2), (2.0, 2)]:
        with pytest.raises(ValueError, match="positive ints"):
            mesh_layout(coords, shape)


def test_cores_sharing_a_chip_become_the_fastest_axis():
    chips = torus_coords((2, 2))
    places = [(c, core) for c in chips for core in (0, 1)]
    coords = mesh._coords_with_cores(places)
    assert coords[:2] == [(0,) + chips[0], (1,) + chips[0]]
    layout = mesh_layout(coords, (4, 2))
    check_neighbours(layout, coords, (2, 2, 2), [1, 0])
    # Without core numbers the duplicate is reported.
    with pytest.raises(ValueError, match="same coordinates"):
        mesh_layout(mesh._coords_with_cores([(c, None) for c, _ in places]), (8,))


def test_init_device_mesh_on_one_process():
    import torch.distributed as dist

    with pytest.raises(RuntimeError, match="init_process_group"):
        init_device_mesh((1,))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        m = init_device_mesh((1, 1), mesh_dim_names=("dp", "tp"))
        assert m.device_type == "tpu"
        assert m.mesh.tolist() == [[0]]
        assert m["tp"].size() == 1 and m.get_group("dp").size() == 1
        with pytest.raises(ValueError, match="mesh_dim_names"):
            init_device_mesh((1,), mesh_dim_names=("dp", "tp"))
    finally:
        dist.destroy_process_group()
