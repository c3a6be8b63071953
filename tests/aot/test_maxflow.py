"""The partition's max-flow / min-cut (kiln.aot.maxflow) against hand-made networks and networkx."""
import random

import pytest

from kiln.aot.maxflow import FlowNetwork, Unbounded


def _network(n, edges):
    net = FlowNetwork()
    for _ in range(n):
        net.add_vertex()
    for u, v, *cap in edges:
        net.add_edge(u, v, *cap)
    return net


def test_diamond_cut_and_sink_side():
    # 0 -> 1 -> 3 and 0 -> 2 -> 3; the cheap edges 1->3 (2) and 0->2 (3) form the cut
    net = _network(4, [(0, 1, 10), (1, 3, 2), (0, 2, 3), (2, 3, 10)])
    value, sink_side = net.min_cut(0, 3)
    assert value == 5
    assert sink_side == {2, 3}


def test_largest_source_side_among_equal_cuts():
    # a chain 0 -> 1 -> 2 -> 3 with equal capacities: every edge is a minimum cut; the one next to
    # the sink is taken (the partition's choice: compute in the forward, recompute nothing)
    net = _network(4, [(0, 1, 4), (1, 2, 4), (2, 3, 4)])
    value, sink_side = net.min_cut(0, 3)
    assert value == 4 and sink_side == {3}


def test_infinite_edges_and_unbounded():
    net = _network(3, [(0, 1), (1, 2, 7)])
    assert net.min_cut(0, 2) == (7, {2})
    with pytest.raises(Unbounded):
        _network(3, [(0, 1), (1, 2)]).min_cut(0, 2)


def test_long_chain_is_not_recursive():
    n = 20000  # deeper than Python's recursion limit
    net = _network(n, [(i, i + 1, 5 if i == n // 2 else 9) for i in range(n - 1)])
    value, sink_side = net.min_cut(0, n - 1)
    assert value == 5 and min(sink_side) == n // 2 + 1


def test_random_networks_match_networkx():
    nx = pytest.importorskip("networkx")
    rng = random.Random(0)
    for trial in range(40):
        n = rng.randint(4, 30)
        edges = []
        for _ in range(rng.randint(n, 4 * n)):
            u, v = rng.randrange(n), rng.randrange(n)
            if u != v:
                edges.append((u, v, rng.choice([1, 2, 3, 8, 100, None])))
        ref = nx.DiGraph()
        ref.add_nodes_from(range(n))
        for u, v, cap in edges:
            if ref.has_edge(u, v):  # networkx merges parallel edges: keep one
                continue
            ref.add_edge(u, v, **({} if cap is None else {"capacity": cap}))
        net = _network(n, [(u, v) if ref[u][v].get("capacity") is None else (u, v, ref[u][v]["capacity"])
                           for u, v in ref.edges])
        try:
            expected, (_, expected_sink) = nx.minimum_cut(ref, 0, n - 1)
        except nx.NetworkXUnbounded:
            with pytest.raises(Unbounded):
                net.min_cut(0, n - 1)
            continue
        value, sink_side = net.min_cut(0, n - 1)
        assert value == expected, trial
        # the sink side: what reaches the sink in the residual network (networkx's choice too)
        assert sink_side == set(expected_sink), trial
