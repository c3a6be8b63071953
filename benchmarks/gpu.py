"""GPU benchmarks (H100): eager vs torch.compile (default, reduce-overhead) vs kiln (default, reduce-overhead).

    python benchmarks/gpu.py                       # everything: copy bandwidth, kernels, models, compile times
    python benchmarks/gpu.py --sections kernels    # one part (kernels, models, compile); --quick for small sizes
    python benchmarks/gpu.py --json out.json

Kernels: large fused pointwise, softmax and layer_norm, reported as milliseconds and as achieved
bandwidth (bytes read + written once) over the device's measured copy bandwidth. Models: inference of
small models, HF BERT / GPT-2 / a Llama-style model (small configs, random weights), timm resnet50 and
vit_base (random weights) where installed, in float32 and bfloat16; speedups over eager and their
geomeans. Compile: first-call latency with cold caches, and in a fresh process with warm caches.
Prints a table and writes JSON (stdout when --json is not given). Without CUDA it stops with a message.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

BACKENDS = ("eager", "torch.compile", "torch.compile ro", "kiln", "kiln ro")


# --------------------------------------------------------------------------------------- timing


def median_ms(fn, args, iters: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    x = torch.empty(nbytes // 4, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), (), iters=20)
    return 2 * nbytes / ms / 1e6


def make_compiled(backend: str, fn):
    """``fn`` compiled by ``backend``; the caller resets compiler state between backends."""
    if backend == "eager":
        return fn
    if backend.startswith("torch.compile"):
        return torch.compile(fn, mode="reduce-overhead" if backend.endswith("ro") else None)
    import kiln

    return kiln.compile(fn, mode="reduce-overhead" if backend.endswith("ro") else None)


def reset_all():
    import kiln

    kiln.reset()
    torch._dynamo.reset()


def bench_backends(fn, args, backends=BACKENDS, iters=30) -> dict:
    """{backend: {"ms":..., "first_call_s":..., "error":...}} with outputs checked against eager."""
    out = {}
    with torch.no_grad():
        want = fn(*args)
    for b in backends:
        reset_all()
        try:
            with torch.no_grad():
                compiled = make_compiled(b, fn)
                t0 = time.perf_counter()
                got = compiled(*args)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                ok = _close(got, want)
                ms = median_ms(compiled, args, iters=iters)
            out[b] = {"ms": ms, "first_call_s": first, "matches_eager": ok}
        except Exception as exc:  # a backend failing is a result, not the end of the run
            out[b] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


def _close(got, want) -> bool:
    from torch.utils._pytree import tree_flatten

    g, w = tree_flatten(got)[0], tree_flatten(want)[0]
    for a, b in zip(g, w):
        if isinstance(a, torch.Tensor):
            tol = 1e-2 if a.dtype in (torch.float16, torch.bfloat16) else 1e-3
            if a.shape != b.shape or not torch.allclose(a.float(), b.float(), atol=tol, rtol=tol, equal_nan=True):
                return False
    return True


# ------------------------------------------------------------------------------------- sections


def kernel_cases(quick: bool):
    n = 1 << (22 if quick else 26)
    rows, cols = (1024, 4096) if quick else (16384, 4096)

    def pointwise(x, y, z):
        return torch.relu(x * y + z) * 0.5

    def softmax(x):
        return torch.softmax(x, -1)

    def layer_norm(x, w, b):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)

    cases = []
    for dtype in (torch.float32, torch.bfloat16):
        e = torch.tensor([], dtype=dtype).element_size()
        x3 = [torch.randn(n, device="cuda", dtype=dtype) for _ in range(3)]
        cases.append((f"pointwise 3-in 1-out {n} {_short(dtype)}", pointwise, x3, 4 * n * e))
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        cases.append((f"softmax {rows}x{cols} {_short(dtype)}", softmax, [x], 2 * rows * cols * e))
        w, b = torch.randn(cols, device="cuda", dtype=dtype), torch.randn(cols, device="cuda", dtype=dtype)
        cases.append((f"layer_norm {rows}x{cols} {_short(dtype)}", layer_norm, [x, w, b], 2 * rows * cols * e))
    long_rows = torch.randn(256 if quick else 2048, 32768, device="cuda")
    cases.append((f"softmax {long_rows.shape[0]}x32768 f32 (looped)", softmax, [long_rows], 2 * long_rows.numel() * 4))
    return cases


def run_kernels(quick: bool, copy_gbs: float) -> list[dict]:
    rows = []
    for name, fn, args, nbytes in kernel_cases(quick):
        res = bench_backends(fn, args)
        for b, r in res.items():
            if "ms" in r:
                r["bandwidth_fraction"] = nbytes / r["ms"] / 1e6 / copy_gbs
        rows.append({"case": name, "bytes": nbytes, "results": res})
        _print_row(name, res, extra="bandwidth_fraction")
    return rows


def model_cases(quick: bool):
    """(name, builder) pairs; a builder returns (module, example args) or raises ImportError."""
    import torch.nn as nn

    def mlp():
        m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024), nn.LayerNorm(1024))
        return m, (torch.randn(256, 1024),)

    def transformer_block():
        m = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.0)
        return m, (torch.randn(16, 128, 512),)

    def hf(kind):
        def build():
            import transformers

            batch, seq = (4, 128) if quick else (8, 512)
            if kind == "bert":
                cfg = transformers.BertConfig()
                model = transformers.BertModel(cfg)
            elif kind == "gpt2":
                cfg = transformers.GPT2Config()
                model = transformers.GPT2Model(cfg)
            else:
                cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                               num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
                model = transformers.LlamaModel(cfg)
            ids = torch.randint(0, cfg.vocab_size, (batch, seq))
            return model, (ids,)

        return build

    def timm_model(name, size):
        def build():
            import timm

            return timm.create_model(name, pretrained=False), (torch.randn(8 if quick else 32, 3, size, size),)

        return build

    return [("mlp", mlp), ("transformer_block", transformer_block), ("hf_bert", hf("bert")),
            ("hf_gpt2", hf("gpt2")), ("llama_small", hf("llama")), ("timm_resnet50", timm_model("resnet50", 224)),
            ("timm_vit_base", timm_model("vit_base_patch16_224", 224))]


def run_models(quick: bool, only: list[str] | None) -> list[dict]:
    rows = []
    for name, build in model_cases(quick):
        if only and name not in only:
            continue
        for dtype in (torch.float32, torch.bfloat16):
            label = f"{name} {_short(dtype)}"
            try:
                model, args = build()
            except ImportError as exc:
                rows.append({"case": label, "skipped": f"not installed: {exc}"})
                print(f"{label:<44} skipped ({exc})")
                continue
            model = model.eval().to("cuda")
            if dtype != torch.float32:
                model = model.to(dtype)
            args = tuple(a.to("cuda", dtype) if a.is_floating_point() else a.to("cuda") for a in args)
            res = bench_backends(model, args, iters=20)
            rows.append({"case": label, "results": res})
            _print_row(label, res)
    return rows


def run_compile_times(quick: bool) -> list[dict]:
    """First-call latency of kiln on a few models: cold caches, then a fresh process with warm caches."""
    rows = []
    for name in ("mlp", "transformer_block", "hf_gpt2"):
        cache = tempfile.mkdtemp(prefix="kiln-bench-cache-")
        times = {}
        for phase in ("cold", "warm"):
            env = dict(os.environ, KILN_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton-bin"))
            cmd = [sys.executable, os.path.abspath(__file__), "--probe", name] + (["--quick"] if quick else [])
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            line = [ln for ln in done.stdout.splitlines() if ln.startswith("PROBE ")]
            times[phase] = json.loads(line[-1][6:]) if line else {"error": done.stderr[-500:]}
        rows.append({"case": name, "kiln": times})
        print(f"{name:<44} kiln first call: cold {times['cold'].get('kiln_s', 'err')} s, "
              f"warm {times['warm'].get('kiln_s', 'err')} s; torch.compile cold {times['cold'].get('torch_compile_s', 'err')} s")
    return rows


def probe(name: str, quick: bool) -> None:
    """Child process of run_compile_times: first-call seconds of kiln and torch.compile on one model."""
    build = dict(model_cases(quick))[name]
    model, args = build()
    model = model.eval().cuda()
    args = tuple(a.cuda() for a in args)
    out = {}
    for key, backend in (("kiln_s", "kiln"), ("torch_compile_s", "torch.compile")):
        reset_all()
        with torch.no_grad():
            compiled = make_compiled(backend, model)
            t0 = time.perf_counter()
            compiled(*args)
            torch.cuda.synchronize()
            out[key] = round(time.perf_counter() - t0, 3)
    print("PROBE " + json.dumps(out))


# --------------------------------------------------------------------------------------- report


def _short(dtype) -> str:
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]


def _print_row(name, res, extra=None):
    cells = []
    for b in BACKENDS:
        r = res.get(b, {})
        if "ms" not in r:
            cells.append(f"{'ERR':>9}")
            continue
        cell = f"{r['ms']:8.3f}" + ("" if r.get("matches_eager") else "!")
        if extra and extra in r:
            cell += f" ({r[extra]:.0%})"
        cells.append(f"{cell:>9}")
    print(f"{name:<44} " + " ".join(cells))


def geomean_speedups(rows) -> dict:
    out = {}
    for b in BACKENDS[1:]:
        ratios = [r["results"]["eager"]["ms"] / r["results"][b]["ms"] for r in rows
                  if "results" in r and "ms" in r["results"].get(b, {}) and "ms" in r["results"].get("eager", {})]
        if ratios:
            out[b] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="kernels,models,compile")
    parser.add_argument("--models", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA: benchmarks/gpu.py measures NVIDIA GPUs and found none (torch.cuda.is_available() is False); "
              "nothing was run.")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if args.probe:
        probe(args.probe, args.quick)
        return 0
    sections = set(args.sections.split(","))
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "quick": args.quick}
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
    copy_gbs = copy_bandwidth_gbs()
    report["copy_bandwidth_GBs"] = copy_gbs
    print(f"device: {report['device']}   copy bandwidth: {copy_gbs:.0f} GB/s")
    print(f"{'case (median ms; ! = differs from eager)':<44} " + " ".join(f"{b:>9}" for b in BACKENDS))
    if "kernels" in sections:
        report["kernels"] = run_kernels(args.quick, copy_gbs)
    if "models" in sections:
        report["models"] = run_models(args.quick, [m for m in args.models.split(",") if m] or None)
        report["model_geomean_speedup_over_eager"] = geomean_speedups(report["models"])
        print("geomean speedup over eager (models):",
              ", ".join(f"{b} {v:.2f}x" for b, v in report["model_geomean_speedup_over_eager"].items()))
    if "compile" in sections:
        report["compile_times"] = run_compile_times(args.quick)
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
