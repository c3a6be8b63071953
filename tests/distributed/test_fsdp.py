"""FSDP2 (fully_shard) with kiln on 2 CPU processes (gloo) against eager FSDP2."""
import pytest

from tests.distributed.harness import section
from tests.distributed.fsdp_workers import SCENARIOS

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def results(cpu_ranks):
    per_rank = section(cpu_ranks, "fsdp")
    return {name: [r[name] for r in per_rank] for name in SCENARIOS}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fsdp2_matches_eager(results, name):
    tol = 1e-5 if "bf16" not in name else 1e-2
    for run in results[name]:
        assert run["param_diff"] <= tol and run["loss_diff"] <= tol, run
        if name.startswith("per_block"):
            assert run["graphs"] == 3 and not run["breaks"], run  # one graph per block, hooks outside
        else:
            assert any("has hooks" in reason for reason in run["breaks"]), run
