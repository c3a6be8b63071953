"""The DDP, FSDP2 and functional-collective checks on 2 GPUs with NCCL (skipped without 2 CUDA devices)."""
import pytest

from tests.distributed import ddp_workers, fsdp_workers
from tests.distributed.harness import run_ranks, two_gpus

pytestmark = [pytest.mark.distributed, pytest.mark.cuda,
              pytest.mark.skipif(not two_gpus(), reason="needs 2 CUDA devices and NCCL")]

DDP_NAMES = ["outer_small_buckets", "inner_adamw_small_buckets", "outer_find_unused", "inner_no_sync",
             "outer_kiln_backend"]
FSDP_NAMES = ["per_block", "whole_bf16", "per_block_kiln_bf16"]


def test_ddp_on_nccl():
    per_rank = run_ranks(ddp_workers.run_scenarios, timeout=600, process_group="nccl", names=DDP_NAMES, device="cuda")
    for name in DDP_NAMES:
        for run in (r[name] for r in per_rank):
            tol = 1e-5 if "kiln" in name else 1e-6
            assert run["param_diff"] <= tol and run["loss_diff"] <= tol and not run["fallbacks"], (name, run)
            assert run["functions"] >= 3, (name, run)


def test_fsdp2_on_nccl():
    per_rank = run_ranks(fsdp_workers.run_scenarios, timeout=600, process_group="nccl", names=FSDP_NAMES,
                         device="cuda")
    for name in FSDP_NAMES:
        for run in (r[name] for r in per_rank):
            tol = 1e-2 if "bf16" in name else 1e-5
            assert run["param_diff"] <= tol and run["loss_diff"] <= tol, (name, run)
