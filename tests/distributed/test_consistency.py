"""A rank whose compile fails runs that graph eagerly and every rank goes on (no hang); with
``distributed_agreement_timeout`` the ranks agree: the same graphs on all ranks, or eager on all."""
import pytest

from tests.distributed.harness import section

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def results(cpu_ranks):
    return section(cpu_ranks, "consistency")  # a hang fails cpu_ranks with RanksHung


def test_ddp_graphs_agree_with_the_option(results):
    """Inside a DDP forward every rank compiles the same pieces in step: a piece that fails on rank 1
    runs eagerly on every rank (Options.ddp_agreement_timeout > 0; off by default)."""
    rank0, rank1 = (r["ddp_fail_rank1"] for r in results)
    assert rank0["fallbacks"] > 0 and rank0["fallbacks"] == rank1["fallbacks"], (rank0, rank1)
    assert rank0["pieces"] >= 3 and rank0["param_diff"] <= 1e-6 and rank1["param_diff"] <= 1e-6
    for r in results:
        assert r["ddp_ok"]["fallbacks"] == 0 and r["ddp_ok"]["param_diff"] <= 1e-6, r["ddp_ok"]


def test_fsdp_block_graphs_agree_with_the_option(results):
    """A block sharded with fully_shard compiles inside its forward on every rank in step: a compile
    failing on rank 1 sends that block's graph to eager on both ranks."""
    rank0, rank1 = (r["fsdp_fail_rank1"] for r in results)
    assert rank0["fallbacks"] == rank0["graphs"] == 3 and rank1["fallbacks"] == 3, (rank0, rank1)
    assert rank0["param_diff"] <= 1e-6 and rank1["param_diff"] <= 1e-6


def test_failing_rank_runs_eagerly_alone_without_agreement(results):
    rank0, rank1 = (r["ddp_fail_rank1_no_agreement"] for r in results)
    assert rank0["fallbacks"] == 0 and rank1["fallbacks"] > 0
    assert rank0["param_diff"] <= 1e-6 and rank1["param_diff"] <= 1e-6


def test_agreement_makes_every_rank_eager(results):
    for r in results:
        run_ = r["ddp_fail_rank1_agree"]
        assert run_["fallbacks"] > 0 and run_["param_diff"] <= 1e-6, run_
        run_ = r["collective_fail_rank0_agree"]
        assert run_["fallbacks"] > 0 and run_["diff"] <= 1e-6, run_


def test_agreement_keeps_compiled_graphs_when_all_succeed(results):
    for r in results:
        run_ = r["ddp_ok_agree"]
        assert run_["fallbacks"] == 0 and run_["pieces"] >= 3 and run_["param_diff"] <= 1e-6, run_


def test_collective_graph_failing_on_one_rank(results):
    rank0, rank1 = (r["collective_fail_rank0"] for r in results)
    assert rank0["fallbacks"] > 0 and rank1["fallbacks"] == 0
    assert rank0["diff"] <= 1e-6 and rank1["diff"] <= 1e-6
