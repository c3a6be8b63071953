"""Where the GPU time of a model goes, per backend: a torch.profiler breakdown of the models of
``benchmarks/gpu.py``, side by side.

    python benchmarks/gpu_profile.py --models hf_gpt2,llama_small --dtypes bf16 --backends eager,kiln,torch.compile
    python benchmarks/gpu_profile.py --top 15        # all models, f32 and bf16, eager / kiln / torch.compile
    python benchmarks/gpu_profile.py --set standard --dtypes bf16 --backends kiln --top 3   # issue 19's configs:
                                                     # wall / GPU busy per model (goal: within 1.15)

Per model and backend it prints: the median wall time of a call (CUDA events), the GPU busy time per
call (the sum of the kernels' durations), the number of kernel launches per call, and the GPU time by
kind of kernel:
  - ``library``: cuBLAS/cuDNN/CUTLASS matmul and convolution, flash/efficient attention;
  - ``triton``: generated Triton kernels (kiln's and torch.compile's);
  - ``aten``: ATen's own elementwise/reduction/copy kernels;
then the top kernels by total time. Wall time well above the GPU time (and near the ``enqueue`` time,
the CPU's share) means the call is bound by the CPU (Python, launches): CUDA graphs
(``reduce-overhead``) help there, and ``--cpu-profile`` shows where that time goes; GPU time above
another backend's means slower or more kernels. With ``GPU_PROFILE_JSON=path`` every report also
appends one JSON line to that file: each kernel's microseconds and launches per call (also from
``benchmarks/train.py --profile``).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import torch  # noqa: E402

from gpu import (make_compiled, median_ms, model_cases, on_gpu, reset_all, standard_model_cases,  # noqa: E402
                 wait_for_kiln_guard_library)

LIBRARY_MARKERS = ("gemm", "cutlass", "cublas", "sm90_", "sm80_", "ampere", "hopper", "conv", "cudnn", "flash",
                   "fmha", "attention", "xmma", "implicit", "wgrad", "dgrad", "nchw", "nhwc", "winograd", "splitk")


def kind_of(name: str) -> str:
    low = name.lower()
    if low.startswith(("triton", "kiln_", "k_")) or "triton_" in low:
        return "triton"
    if any(m in low for m in LIBRARY_MARKERS):
        return "library"
    return "aten"


def profile_calls(fn, args, iters: int, counts: dict | None = None) -> tuple[dict, int]:
    """{kernel name: total microseconds} over ``iters`` calls, and the number of kernel launches
    (per kernel name in ``counts`` when one is given)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn(*args)
        torch.cuda.synchronize()
    times: dict = collections.Counter()
    launches = 0
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time > 0:
            times[ev.name] += ev.device_time
            launches += 1
            if counts is not None:
                counts[ev.name] = counts.get(ev.name, 0) + 1
    return times, launches


def enqueue_ms(fn, args, iters: int) -> float:
    """CPU milliseconds per call to queue the work, without waiting for the GPU (when it nears the wall
    time, the call is bound by the CPU)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn(*args)
    cpu = (time.perf_counter() - start) / iters * 1000
    torch.cuda.synchronize()
    return cpu


def python_profile(fn, args, iters: int, top: int) -> str:
    """cProfile's top functions by own time over ``iters`` calls (its overhead inflates small calls)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(iters):
        fn(*args)
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def report(label: str, backend: str, fn, args, iters: int, top: int, cpu_profile: bool = False) -> None:
    ms = median_ms(fn, args, iters=iters)
    cpu = enqueue_ms(fn, args, iters)
    counts: dict = {}
    times, launches = profile_calls(fn, args, iters, counts)
    if os.environ.get("GPU_PROFILE_JSON"):  # every kernel's time and launches per call, one JSON line per report
        import json

        with open(os.environ["GPU_PROFILE_JSON"], "a") as f:
            rows = {name: [us / iters, counts[name] / iters] for name, us in times.items()}
            f.write(json.dumps({"label": label, "backend": backend, "wall_ms": ms, "enqueue_ms": cpu,
                                "kernels": rows}) + "\n")
    busy = sum(times.values()) / iters / 1000
    by_kind: dict = collections.Counter()
    for name, us in times.items():
        by_kind[kind_of(name)] += us / iters / 1000
    kinds = "  ".join(f"{k} {v:.3f}" for k, v in sorted(by_kind.items()))
    print(f"{label:<24} {backend:<16} wall {ms:8.3f} ms  enqueue {cpu:8.3f} ms  gpu {busy:8.3f} ms  "
          f"wall/gpu {ms / busy if busy else float('nan'):5.2f}  launches {launches / iters:6.0f}  | {kinds}")
    for name, us in times.most_common(top):
        print(f"      {us / iters / 1000:8.4f} ms  {kind_of(name):<7} {name[:110]}")
    if cpu_profile:
        print(python_profile(fn, args, iters, 3 * top))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="", help="comma-separated model names of benchmarks/gpu.py (default: all)")
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--backends", default="eager,kiln,torch.compile",
                        help="eager, kiln, kiln_ro, kiln_ma, torch.compile, torch.compile_ro, ...")
    parser.add_argument("--set", dest="model_set", choices=("small", "standard"), default="small",
                        help="benchmarks/gpu.py's model set: small (the default) or standard (issue 19's configs)")
    parser.add_argument("--warmup", type=int, default=20,
                        help="calls before any timing (kiln's default mode decides between plain launches and "
                             "CUDA-graph replay over its first calls: the profile is of the steady state)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--cpu-profile", action="store_true",
                        help="also print a cProfile of each backend's calls (where the CPU time goes)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA: nothing to profile")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    only = [m for m in args.models.split(",") if m]
    dtypes = [{"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[d] for d in args.dtypes.split(",")]
    backends = [b.replace("_", " ") for b in args.backends.split(",") if b]
    cases = standard_model_cases() if args.model_set == "standard" else model_cases(quick=False)
    if any(b.startswith("kiln") for b in backends):
        print(f"kiln tensor guards: {wait_for_kiln_guard_library()}")
    for name, build in cases:
        if only and name not in only:
            continue
        for dtype in dtypes:
            try:
                model, margs = build()
            except ImportError as exc:
                print(f"{name}: not installed ({exc})")
                continue
            model, margs = on_gpu(model, margs, dtype)
            label = f"{name} {str(dtype).replace('torch.', '')}"
            for b in backends:
                reset_all()
                try:
                    with torch.no_grad():
                        fn = make_compiled(b, model)
                        for _ in range(max(1, args.warmup)):
                            fn(*margs)
                        torch.cuda.synchronize()
                        report(label, b, fn, margs, args.iters, args.top, args.cpu_profile)
                        if b.startswith("kiln"):
                            import kiln

                            print(f"      kiln's speed choices: {dict(kiln.stats.speed_choices) or 'none'}")
                except Exception as exc:  # noqa: BLE001 -- one backend failing is a result
                    print(f"{label:<24} {b:<16} error: {type(exc).__name__}: {str(exc)[:300]}")
            del model
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
