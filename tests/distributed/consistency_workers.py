"""A rank whose compile fails must not stop the others (tests/distributed/test_consistency.py)."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import kiln
from kiln.backends.aot_eager import compile_aot_eager
from tests.distributed.ddp_workers import SMALL_BUCKET_MB, make_net, train
from tests.distributed.harness import max_difference


def failing_on(rank_to_fail):
    def backend(gm, example_inputs):
        if dist.get_rank() == rank_to_fail:
            raise RuntimeError("injected compile failure")
        return compile_aot_eager(gm, example_inputs)
    return backend


def ddp_run(rank, backend, options):
    kiln.reset()
    kiln.stats.reset()
    ref = make_net()
    train(DDP(ref, bucket_cap_mb=SMALL_BUCKET_MB), rank, 4)
    net = make_net()
    model = kiln.compile(DDP(net, bucket_cap_mb=SMALL_BUCKET_MB), backend=backend, options=options)
    train(model, rank, 4)
    return {"param_diff": max_difference(ref.parameters(), net.parameters()),
            "fallbacks": sum(kiln.stats.eager_fallbacks.values()), "pieces": kiln.stats.ddp_pieces}


def fsdp_run(rank, backend):
    from tests.distributed.fsdp_workers import scenario

    out = scenario(rank, "per_block", backend=backend, options={"ddp_agreement_timeout": 30.0})  # (resets kiln.stats)
    return {**out, "fallbacks": sum(kiln.stats.eager_fallbacks.values())}


def normalize_then_mix(x):
    y = F.normalize(x, dim=-1)
    return fc.all_reduce(y, "sum", dist.group.WORLD) * 2


def collective_run(rank, backend, options):
    kiln.reset()
    kiln.stats.reset()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
    got = kiln.compile(normalize_then_mix, backend=backend, options=options)(x)
    want = normalize_then_mix(x)
    return {"diff": (got - want).abs().max().item(), "fallbacks": sum(kiln.stats.eager_fallbacks.values())}


def run(rank, world_size):
    agree = {"distributed_agreement_timeout": 30.0}
    return {
        "ddp_fail_rank1": ddp_run(rank, failing_on(1), {"ddp_agreement_timeout": 30.0}),  # DDP graphs
        "ddp_fail_rank1_no_agreement": ddp_run(rank, failing_on(1), {"ddp_agreement_timeout": 0.0}),
        "ddp_ok": ddp_run(rank, "aot_eager", None),
        "fsdp_fail_rank1": fsdp_run(rank, failing_on(1)),  # FSDP2 block graphs (KILN_DDP_AGREEMENT_TIMEOUT)
        "ddp_fail_rank1_agree": ddp_run(rank, failing_on(1), agree),
        "ddp_ok_agree": ddp_run(rank, "aot_eager", agree),
        "collective_fail_rank0_agree": collective_run(rank, failing_on(0), agree),
        "collective_fail_rank0": collective_run(rank, failing_on(0), None),
    }
