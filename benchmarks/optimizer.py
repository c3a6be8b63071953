"""Optimizer step time: eager's optimizer.step() vs torch.compile'd step vs kiln's fused step, in one run.

The parameters are those of a model at its standard size (GPT-2 small's 124M, BERT-base's 110M, an MLP);
gradients are random. Each variant runs on its own copy of the parameters and optimizer; after the
timed steps the parameters are compared with eager's (max abs difference printed).

    python benchmarks/optimizer.py                              # CPU, small models
    python benchmarks/optimizer.py --device cuda --models gpt2,bert,mlp --opt adamw,sgd
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import kiln  # noqa: E402
from benchmarks.train import _sync, median_ms  # noqa: E402


def params_of(name: str, device: str) -> list[torch.nn.Parameter]:
    if name == "mlp":
        model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])
    elif name == "small":
        model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(4)])
    else:
        import transformers

        if name == "gpt2":
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=50257, n_embd=768, n_layer=12, n_head=12))
        elif name == "bert":
            model = transformers.BertForMaskedLM(transformers.BertConfig())
        else:
            raise SystemExit(f"unknown model {name}")
    return [p.detach().to(device).requires_grad_() for p in model.parameters()]


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.01),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-4),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9),
}


def run(variant: str, params, make_opt, device, steps, warmup, profile=False):
    params = [p.detach().clone().requires_grad_() for p in params]
    opt = make_opt(params)
    g = torch.Generator(device=device).manual_seed(0)
    grads = [torch.randn(p.shape, generator=g, device=device) for p in params]
    for p, gr in zip(params, grads):
        p.grad = gr
    if variant == "eager":
        step = opt.step
    elif variant == "torch.compile":
        import torch._dynamo as dynamo

        dynamo.reset()

        @torch.compile
        def step():
            opt.step()
    else:
        kiln.reset()
        step = kiln.compile(opt.step, options=kiln.Options(fused_optimizer="all"))
    _sync(device)
    start = time.perf_counter()
    step()  # the first step makes the state (eagerly, in every variant but torch.compile's)
    step()  # kiln: compiles here
    _sync(device)
    first = time.perf_counter() - start
    for _ in range(warmup):
        step()
    if profile and variant == "kiln":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            _sync(device)
        print("kiln compile stages (s):", {k: round(v, 2) for k, v in sorted(kiln.stats.stages.items(), key=lambda kv: -kv[1])},
              "kernels generated:", kiln.stats.kernels_generated)
        print(prof.key_averages().table(sort_by="self_cuda_time_total" if device == "cuda" else "self_cpu_time_total",
                                        row_limit=12))
    return median_ms(step, steps, device), first, params


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="small,mlp")
    parser.add_argument("--opt", default="adamw,sgd")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variants", default="eager,torch.compile,kiln")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print the profiler's top ops of kiln's step")
    args = parser.parse_args(argv)
    variants = args.variants.split(",")
    print(f"{'model':6} {'opt':6} {'params':>8} " + " ".join(f"{v + ' ms':>16}" for v in variants)
          + " " + " ".join(f"{v + ' first s':>18}" for v in variants[1:]) + "  max |diff| vs eager")
    for name in args.models.split(","):
        params = params_of(name, args.device)
        count = sum(p.numel() for p in params)
        for opt_name in args.opt.split(","):
            results = {v: run(v, params, OPTIMIZERS[opt_name], args.device, args.steps, args.warmup, args.profile)
                       for v in variants}
            ref = results.get("eager", next(iter(results.values())))[2]
            diffs = {v: max((a - b).abs().max().item() for a, b in zip(r[2], ref)) for v, r in results.items()}
            print(f"{name:6} {opt_name:6} {count / 1e6:7.1f}M " + " ".join(f"{results[v][0]:16.3f}" for v in variants)
                  + " " + " ".join(f"{results[v][1]:18.2f}" for v in variants[1:]) + "  "
                  + ", ".join(f"{v} {d:.1e}" for v, d in diffs.items() if v != "eager"))
    print(f"(torch {torch.__version__}, {args.device}; median of {args.steps} steps; kiln: {kiln.stats.optimizer_steps})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
