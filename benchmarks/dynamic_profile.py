"""GPU time of kiln's size-generic (dynamic) graph against its static graph for the same shape: the
kernels that cost more when sizes are symbols.

    python benchmarks/dynamic_profile.py --model gpt2 --seq 256 --top 12
    python benchmarks/dynamic_profile.py --model bert --seq 77,256,500 --top 0   # ratios only
    python benchmarks/dynamic_profile.py --model bert --seq 128 --plain          # no CUDA-graph replay

Compiles GPT-2 (standard config, bf16, batch 8) twice in one process: ``dynamic=True`` (one graph for
every sequence length) and ``dynamic=False``, runs both at ``--seq``, and prints per variant the median
wall time, GPU busy time per call and the top kernels by GPU time (torch.profiler).
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _input(model: str, batch: int, seq: int):
    import torch

    g = torch.Generator().manual_seed(seq)
    if model == "resnet":  # (--seq is the batch size)
        return torch.randn((seq, 3, 224, 224), generator=g).to("cuda", torch.bfloat16)
    return torch.randint(0, 30522 if model.startswith("bert") else 50257, (batch, seq), generator=g).to("cuda")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--seq", default="256", help="sequence lengths, comma-separated (resnet: batch sizes)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--plain", action="store_true",
                    help="no CUDA-graph replay in default mode for the static graph (Options.default_cudagraphs "
                         "off): both variants launch their kernels one by one, so the ratio compares the code")
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    import kiln
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dynamic import _make_model

    model = _make_model(args.model, "standard", "cuda", torch.bfloat16)
    seqs = [int(n) for n in str(args.seq).split(",")]
    walls: dict = {}
    gpu: dict = {}
    for name, dynamic in (("dynamic", True), ("static", False)):
        kiln.reset()
        options = {"recompile_limit": 1000, **({"default_cudagraphs": False} if args.plain else {})}
        c = kiln.compile(model, dynamic=dynamic, options=options)
        for seq in seqs:
            x, warm = _input(args.model, args.batch, seq), _input(args.model, args.batch, seq + 8)
            with torch.no_grad():
                if dynamic and seq == seqs[0]:
                    c(warm)  # the graph was compiled for another length
                for _ in range(3):
                    c(x)
                torch.cuda.synchronize()
                times = []
                for _ in range(args.iters):
                    t = time.perf_counter()
                    c(x)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                walls[name, seq] = 1000 * statistics.median(times)
                if not args.top:
                    continue
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        c(x)
                    torch.cuda.synchronize()
            kernels = collections.Counter()
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kernels[e.name[:90]] += e.device_time / 5
            gpu[name, seq] = sum(kernels.values()) / 1000
            print(f"== {name} seq {seq}: wall {walls[name, seq]:.2f} ms, GPU {sum(kernels.values()) / 1000:.2f} ms/call, "
                  f"{len(kernels)} kernels, fallbacks {dict(kiln.stats.dynamic_fallbacks)}")
            for k, us in kernels.most_common(args.top):
                print(f"   {us:9.1f} us  {k}")
        print(f"{name}: dynamic graphs {kiln.stats.dynamic_graphs}, static fallbacks {dict(kiln.stats.dynamic_fallbacks)}")
    for seq in seqs:
        d, st = walls["dynamic", seq], walls["static", seq]
        line = f"{args.model} seq {seq}: dynamic {d:.2f} ms  static {st:.2f} ms  dynamic/static {d / st:.3f}"
        if ("dynamic", seq) in gpu:
            line += f"  (GPU time {gpu['dynamic', seq]:.2f} / {gpu['static', seq]:.2f} ms: {gpu['dynamic', seq] / gpu['static', seq]:.3f})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
