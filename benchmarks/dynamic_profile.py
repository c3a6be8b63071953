"""GPU time of kiln's size-generic (dynamic) graph against its static graph for the same shape: the
kernels that cost more when sizes are symbols.

    python benchmarks/dynamic_profile.py --model gpt2 --seq 256 --top 12

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    import kiln
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dynamic import _make_model

    model = _make_model(args.model, "standard", "cuda", torch.bfloat16)
    x = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    warm = torch.randint(0, 50257, (args.batch, args.seq + 8), device="cuda")
    for name, dynamic in (("dynamic", True), ("static", False)):
        kiln.reset()
        c = kiln.compile(model, dynamic=dynamic)
        with torch.no_grad():
            if dynamic:
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
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    c(x)
                torch.cuda.synchronize()
        kernels = collections.Counter()
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                kernels[e.name[:90]] += e.device_time / 5
        print(f"== {name}: wall {1000 * statistics.median(times):.2f} ms, GPU {sum(kernels.values()) / 1000:.2f} ms/call, "
              f"{len(kernels)} kernels, fallbacks {dict(kiln.stats.dynamic_fallbacks)}")
        for k, us in kernels.most_common(args.top):
            print(f"   {us:9.1f} us  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
