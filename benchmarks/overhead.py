"""Per-call overhead of compiled tiny functions (one without and one with a graph break): guard check + dispatch, with a backend that runs the
captured graph as is ("eager"), against torch.compile(backend="eager") and a direct call, in one run.

    python benchmarks/overhead.py [--calls 20000] [--repeats 7] [--json out.json]

Prints a table of median microseconds per call and ratios; writes JSON when asked.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import kiln


def tiny(x, y):
    return (x + y).relu() * 2


def with_module_and_loop(x, layers):
    for layer in layers:
        x = layer(x)
    return x


def with_one_break(x, y):
    s = (x * y).sum().item()  # .item() breaks the graph in kiln and in torch.compile
    return (x + y) * s


class ConvBlock(torch.nn.Module):
    """A ResNet-style block: its guards are mostly about the module tree (guard gates skip them)."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.bn2(self.conv2(self.act(self.bn1(self.conv1(x))))) + x)


def per_call_us(fn, args, calls: int, repeats: int) -> float:
    for _ in range(50):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    x, y = torch.randn(8), torch.randn(8)
    layers = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)]).eval()
    cases = {
        "tiny pointwise fn (2 tensor args)": (tiny, (x, y)),
        "4 nn.Linear in a Sequential": (with_module_and_loop, (x, layers)),
        "fn with one graph break (.item())": (with_one_break, (x, y)),
        "26 conv blocks (52 convs, as ResNet-50)": (with_module_and_loop, (torch.randn(1, 2, 2, 2), torch.nn.Sequential(
            *[ConvBlock(2) for _ in range(26)]).eval())),
    }
    rows = []
    for name, (fn, fn_args) in cases.items():
        calls = args.calls if "conv" not in name else max(args.calls // 50, 100)
        kiln.reset()
        torch._dynamo.reset()
        with torch.no_grad():
            direct = per_call_us(fn, fn_args, calls, args.repeats)
            k = per_call_us(kiln.compile(fn, backend="eager"), fn_args, calls, args.repeats)
            tc = per_call_us(torch.compile(fn, backend="eager"), fn_args, calls, args.repeats)
        rows.append({"case": name, "direct_us": direct, "kiln_us": k, "torch_compile_us": tc,
                     "kiln_overhead_us": k - direct, "torch_compile_overhead_us": tc - direct,
                     "kiln_over_torch_compile": (k - direct) / max(tc - direct, 1e-9)})

    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, median of {args.repeats} x {args.calls} calls")
    header = f"{'case':40} {'direct':>9} {'kiln':>9} {'t.compile':>10} {'kiln ovh':>9} {'tc ovh':>9} {'ovh ratio':>10}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['case']:40} {r['direct_us']:8.2f}u {r['kiln_us']:8.2f}u {r['torch_compile_us']:9.2f}u "
              f"{r['kiln_overhead_us']:8.2f}u {r['torch_compile_overhead_us']:8.2f}u {r['kiln_over_torch_compile']:9.2f}x")
    print("(ovh = per-call time minus the direct call; ratio < 1 means kiln adds less than torch.compile)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
