"""DDP scenarios run on every rank (tests/distributed/test_ddp.py): eager DDP against kiln-compiled DDP,
both ways round, parameters compared after a few steps."""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import kiln
from tests.distributed.harness import max_difference

SMALL_BUCKET_MB = 0.004  # 4194 bytes: one 32x32 Linear (4224 bytes) per bucket


class Net(torch.nn.Module):
    """Five Linear layers (with in-place ReLUs) and a branch used only when asked."""

    def __init__(self, width=32, extra=False, break_after=None):
        super().__init__()
        self.break_after = break_after
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(4))
        self.head = torch.nn.Linear(width, 4)
        self.extra = torch.nn.Linear(4, 4) if extra else None

    def forward(self, x, use_extra=False):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x), inplace=True)
            if i == self.break_after:
                kiln.graph_break()  # two graphs, each split at its buckets
        y = self.head(x)
        if use_extra:
            y = self.extra(y)
        return y


def make_net(extra=False, break_after=None):
    torch.manual_seed(0)
    return Net(extra=extra, break_after=break_after)


def wrap(model, how, backend, ddp_kwargs):
    if next(model.parameters()).is_cuda:
        ddp_kwargs = {**ddp_kwargs, "device_ids": [torch.cuda.current_device()]}
    if how == "eager":
        return DDP(model, **ddp_kwargs)
    if how == "outer":  # kiln.compile(DDP(m))
        return kiln.compile(DDP(model, **ddp_kwargs), backend=backend)
    return DDP(kiln.compile(model, backend=backend), **ddp_kwargs)  # DDP(kiln.compile(m))


def train(model, rank, steps, optimizer="sgd", accumulate=1, unused_every=0, bf16=False):
    params = list(model.parameters())
    device = params[0].device
    opt = torch.optim.SGD(params, lr=0.05) if optimizer == "sgd" else torch.optim.AdamW(params, lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for step in range(steps):
        x, y = torch.randn(6, 32, generator=g).to(device), torch.randn(6, 4, generator=g).to(device)
        use_extra = bool(unused_every) and step % unused_every == 0
        if accumulate > 1 and step % accumulate != accumulate - 1:
            with model.no_sync():
                F.mse_loss(model(x, use_extra), y).backward()
            continue
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):  # around the compiled call
            out = model(x, use_extra)
        loss = F.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def compiled_functions_in_backward(output) -> list[set[int]]:
    """From the output back: per kiln autograd Function node, ids of the parameters whose gradient
    accumulators it feeds."""
    found, seen, todo = [], set(), [output.grad_fn]
    while todo:
        node = todo.pop(0)
        if node is None or node in seen:
            continue
        seen.add(node)
        if "CompiledFunction" in type(node).__name__:
            found.append({id(n.variable) for n, _ in node.next_functions if hasattr(n, "variable")})
        todo.extend(n for n, _ in node.next_functions)
    return found


def scenario(rank, how, backend="aot_eager", steps=6, ddp_kwargs=None, device="cpu", break_after=None,
             **train_kwargs):
    ddp_kwargs = ddp_kwargs or {}
    kiln.reset()
    kiln.stats.reset()
    extra = bool(train_kwargs.get("unused_every"))
    ref = make_net(extra, break_after).to(device)
    ref_losses = train(wrap(ref, "eager", backend, ddp_kwargs), rank, steps, **train_kwargs)
    net = make_net(extra, break_after).to(device)
    model = wrap(net, how, backend, ddp_kwargs)
    losses = train(model, rank, steps, **train_kwargs)
    out = model(torch.randn(6, 32, device=device))
    functions = compiled_functions_in_backward(out)
    out.sum().backward()
    explained = ""
    if how == "outer":  # explain compiles DDP(net) again and shows the split
        report = kiln.explain(model)(torch.randn(6, 32, device=device))
        report.result.sum().backward()
        explained = str(report)
    head = {id(p) for p in net.head.parameters()}
    first = {id(p) for p in net.layers[0].parameters()}
    return {
        "param_diff": max_difference(ref.parameters(), net.parameters()),
        "loss_diff": max(abs(a - b) for a, b in zip(ref_losses, losses)),
        "pieces": kiln.stats.ddp_pieces,
        "functions": len(functions),
        # the Function nearest the output (its backward runs first) holds the head, not the first layer
        "head_first": bool(functions) and head <= functions[0] and not (first & functions[0]),
        "fallbacks": dict(kiln.stats.eager_fallbacks),
        "breaks": sum(kiln.stats.graph_breaks.values()),
        "explain": explained,
    }


SCENARIOS = {
    "outer_sgd_default_buckets": dict(how="outer"),
    "inner_adamw_small_buckets": dict(how="inner", optimizer="adamw", ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB}),
    "outer_small_buckets": dict(how="outer", ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB}),
    "outer_find_unused": dict(how="outer", unused_every=2,
                              ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB, "find_unused_parameters": True}),
    "inner_no_sync": dict(how="inner", accumulate=2, steps=8, ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB}),
    "outer_static_graph": dict(how="outer", ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB, "static_graph": True}),
    "outer_autocast_bf16": dict(how="outer", bf16=True, ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB}),
    "inner_graph_break": dict(how="inner", break_after=1, ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB}),
    "outer_kiln_backend": dict(how="outer", backend="kiln", steps=3, ddp_kwargs={"bucket_cap_mb": SMALL_BUCKET_MB}),
}


def run_scenarios(rank, world_size, names, device="cpu"):
    results = {}
    for name in names:
        start = time.perf_counter()
        results[name] = scenario(rank, device=device if device == "cpu" else f"cuda:{rank}", **SCENARIOS[name])
        results[name]["seconds"] = time.perf_counter() - start
    return results
