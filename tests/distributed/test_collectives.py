"""Functional collectives in compiled code on 2 CPU processes (gloo): one graph, eager's values."""
import pytest
import torch

from tests.distributed.harness import section

pytestmark = pytest.mark.distributed


BACKENDS = ["aot_eager", "kiln"]


@pytest.fixture(scope="module")
def all_results(cpu_ranks):
    return section(cpu_ranks, "collectives")


@pytest.fixture(params=BACKENDS)
def results(all_results, request):
    return [per_rank[request.param] for per_rank in all_results]


@pytest.mark.parametrize("name", ["reduce_twice", "gather_and_scatter", "in_place_all_reduce", "rank_dependent"])
def test_collectives_are_graph_ops(results, name):
    for rank_results in results:
        r = rank_results[name]
        assert r["graphs"] == 1 and not r["breaks"] and not r["fallbacks"], r
        assert len(r["got"]) == len(r["want"])
        for got, want in zip(r["got"], r["want"]):
            torch.testing.assert_close(got, want)


def test_async_all_reduce_breaks_the_graph(results):
    for rank_results in results:
        r = rank_results["async_all_reduce"]
        assert any("async_op=True" in reason for reason in r["breaks"]), r
        torch.testing.assert_close(r["got"][0], r["want"][0])
