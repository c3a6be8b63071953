"""FSDP2 (fully_shard per block and on the root) with kiln-compiled blocks or a kiln-compiled root, run
on every rank (tests/distributed/test_fsdp.py): compared with eager FSDP2 after a few AdamW steps."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import kiln


class Block(torch.nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + F.gelu(self.fc(self.norm(x)))


class Net(torch.nn.Module):
    def __init__(self, width=16, depth=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make(how, backend, mixed_precision, device="cpu", options=None):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = Net().to(device)
    # the mesh names the device type: without it fully_shard picks CUDA whenever a GPU exists
    kwargs = {"mesh": init_device_mesh("cpu" if device == "cpu" else "cuda", (dist.get_world_size(),))}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    if how == "per_block":  # FSDP's hooks run around each compiled block
        for i, block in enumerate(model.blocks):
            model.blocks[i] = kiln.compile(block, backend=backend, options=options)
    elif how == "whole":  # the graph breaks at each sharded block's hooks
        return model, kiln.compile(model, backend=backend, options=options)
    return model, model


def train(model, rank, steps=4, device="cpu", accumulate=1):
    """AdamW steps; ``accumulate`` micro-batches per step, gradients reduced on the last one only (FSDP's
    ``set_requires_gradient_sync``, called on the root, which reaches the compiled blocks)."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        for micro in range(accumulate):
            if accumulate > 1:
                model.set_requires_gradient_sync(micro == accumulate - 1)
            x, y = torch.randn(6, 16, generator=g).to(device), torch.randn(6, 4, generator=g).to(device)
            loss = F.mse_loss(model(x).float(), y)
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def scenario(rank, how, backend="aot_eager", mixed_precision=False, device="cpu", options=None, accumulate=1):
    kiln.reset()
    kiln.stats.reset()
    ref, _ = make("eager", backend, mixed_precision, device)
    ref_losses = train(ref, rank, device=device, accumulate=accumulate)
    params, model = make(how, backend, mixed_precision, device, options)
    losses = train(model, rank, device=device, accumulate=accumulate)
    diffs = [(a.full_tensor() - b.full_tensor()).abs().max().item()
             for a, b in zip(ref.parameters(), params.parameters())]
    return {"param_diff": max(diffs), "loss_diff": max(abs(a - b) for a, b in zip(ref_losses, losses)),
            "graphs": kiln.stats.graphs, "breaks": dict(kiln.stats.graph_breaks)}


SCENARIOS = {
    "per_block": dict(how="per_block"),
    "whole": dict(how="whole"),
    "per_block_bf16": dict(how="per_block", mixed_precision=True),
    "whole_bf16": dict(how="whole", mixed_precision=True),
    "per_block_kiln_bf16": dict(how="per_block", backend="kiln", mixed_precision=True),
    # FSDP's methods reach the compiled blocks (their wrappers share the blocks' FSDP state)
    "per_block_accumulate": dict(how="per_block", accumulate=2),
}


def run_scenarios(rank, world_size, names, device="cpu"):
    device = device if device == "cpu" else f"cuda:{rank}"
    return {name: scenario(rank, device=device, **SCENARIOS[name]) for name in names}
