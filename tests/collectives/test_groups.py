"""Group checks and shape keys (``collectives.groups``) against their one-member-at-a-time form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.collectives.groups import normalise_groups, shape_key
from simulator.errors import InputError
from simulator.network import build_cluster


@pytest.fixture(scope="module")
def cluster(topo):
    base = topo("dgx-h100")
    small = base.fabric.model_copy(update={"switch_radix": 4, "oversubscription": 1.0})  # 2 nodes per block
    return build_cluster(base.model_copy(update={"fabric": small}), 5)


def _shape_loop(c, groups):
    per_block, g = c.layout.nodes_per_block, c.gpus_per_node
    blocks: dict[int, int] = {}
    nodes: dict[int, int] = {}
    rows = []
    for members in groups:
        for m in members:
            k, i = divmod(m, g)
            b = k // per_block
            rows.append((blocks.setdefault(b, len(blocks)), min(per_block, c.nodes - b * per_block),
                         nodes.setdefault(k, len(nodes)), i))
    return tuple(rows)


def _partition(draw, n_gpus):
    perm = draw(st.permutations(range(n_gpus)))
    size = draw(st.integers(1, 8))
    count = draw(st.integers(1, max(1, n_gpus // size)))
    return [list(perm[k * size:(k + 1) * size]) for k in range(count)]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_shape_key_is_a_relabelling_of_the_loop_key(cluster, data):
    a = _partition(data.draw, cluster.n_gpus)
    b = _partition(data.draw, cluster.n_gpus)
    na, nb = normalise_groups(cluster, "all_reduce", a), normalise_groups(cluster, "all_reduce", b)
    assert na == [sorted(g) for g in a]
    same_loop = len(na) == len(nb) and len(na[0]) == len(nb[0]) and _shape_loop(cluster, na) == _shape_loop(cluster, nb)
    assert (shape_key(cluster, na) == shape_key(cluster, nb)) == same_loop


@pytest.mark.parametrize("groups", [[[0, 1], [1, 2]], [[0, 0]], [[0, 40]], [[0, 1.0]], [[0, 1], [2]], "abc"])
def test_bad_groups_raise_on_the_fast_and_slow_paths(cluster, groups):
    with pytest.raises(InputError):
        normalise_groups(cluster, "all_reduce", groups)
