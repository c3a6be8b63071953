"""GPU benchmarks (H100): eager vs torch.compile (default, reduce-overhead) vs kiln (default, reduce-overhead).

    python benchmarks/gpu.py                       # everything: copy bandwidth, kernels, models, compile times
    python benchmarks/gpu.py --sections kernels    # one part (overhead, kernels, families, models, compile); --quick: small sizes
    python benchmarks/gpu.py --sections families --backends eager,torch.compile,kiln   # scans, sorts, scatters,
                                                   # gathers (benchmarks/gpu_families.py): GB/s, share of copy bandwidth
    python benchmarks/gpu.py --json out.json
    python benchmarks/gpu.py --sections models --models mlp,hf_bert --dtypes bf16 --backends eager,kiln,kiln_ro
    python benchmarks/gpu.py --sections models --set standard --dtypes bf16   # issue 19's configs
    python benchmarks/gpu.py --sections models --modes max-autotune   # models also with torch.compile and
                                                   # kiln max-autotune ("ma"; slow: matmul configs are timed)

Timing: each row compiles every backend (first call, accuracy) before timing any, then times all of
them in 5 interleaved rounds (each round starts with another backend) and reports the median call
time (CUDA events): the host's CPU speed drifts, and backends timed one after the other let the drift
decide a row.

Kernels: large fused pointwise, softmax, layer_norm and a transpose, reported as milliseconds and as achieved
bandwidth (bytes read + written once) over the device's measured copy bandwidth. Kernel rows are timed
with calls back to back (the host's work for a call overlaps the GPU's work for the one before: the
GPU's time, as triton.testing.do_bench measures kernels); the time with a wait after each call, which
adds the host's per-call work, is kept as ``synced_ms`` in the JSON. Models: inference of
small models, HF BERT / GPT-2 / a Llama-style model (small configs, random weights), timm resnet50 and
vit_base (random weights) where installed, in float32 and bfloat16; speedups over eager and their
geomeans. Compile: first-call latency in fresh processes (one per backend) with cold caches, then warm caches.
Prints a table and writes JSON (stdout when --json is not given). Without CUDA it stops with a message.

Accuracy (``!`` in the table): as torch's own benchmarks do, each output is compared with a float64
run of the same model: a backend passes when its RMS error against float64 is at most 2x (float32)
or 3x (bfloat16/float16) eager's, plus tol/10 (tol 1e-3 for float32 with TF32 on, 1e-2 for 16-bit
floats). Errors are printed under the row; for kiln, the graph count, graph breaks and ops that ran
with ATen kernels are listed too.
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpu_families

import torch  # noqa: E402

BACKENDS = ("eager", "torch.compile", "torch.compile ro", "kiln", "kiln ro")
MODE_BACKENDS = {"max-autotune": ("torch.compile ma", "kiln ma")}  # --modes: extra columns of the models section
BACKENDS_SELECTED = BACKENDS  # --backends
MODEL_EXTRA: tuple = ()  # --modes


# --------------------------------------------------------------------------------------- timing


def call_times_ms(fn, args, iters: int, pipelined: bool = False) -> list[float]:
    """``iters`` call times of ``fn(*args)`` in milliseconds (CUDA events around each call).

    By default the host waits for each call to finish before making the next, so a time includes
    the host's work for the call (guards, wrapper, launches) while the GPU idles. ``pipelined``
    makes the calls back to back and waits once at the end: the host's work for a call overlaps the
    GPU's work for the one before, and a time is the GPU's time whenever that is the longer one
    (how kernel bandwidth is measured)."""
    events = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        if not pipelined:
            end.synchronize()
        events.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def median_ms(fn, args, iters: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    return statistics.median(call_times_ms(fn, args, iters))


def interleaved_medians_ms(fns: dict, args, iters: int, rounds: int = 5, warmup: int = 3,
                           pipelined: bool = False) -> dict:
    """{name: median ms, or the exception it raised} of each callable in ``fns``, timed in ``rounds`` interleaved rounds (each round
    times every callable, starting with a different one) of about ``iters / rounds`` calls each: the
    host's CPU speed drifts over seconds, and timing backends one after the other let the drift
    decide a row. The median is over all calls."""
    names = list(fns)
    samples = {n: [] for n in names}
    failed: dict = {}
    per_round = max(iters // rounds, 3)
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            if n in failed:
                continue
            try:
                for _ in range(warmup):
                    fns[n](*args)
                torch.cuda.synchronize()
                samples[n] += call_times_ms(fns[n], args, per_round, pipelined)
            except Exception as exc:  # noqa: BLE001 -- that backend's timing fails, not the row
                failed[n] = exc
    return {n: failed[n] if n in failed else statistics.median(v) for n, v in samples.items()}


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    x = torch.empty(nbytes // 4, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), (), iters=20)
    return 2 * nbytes / ms / 1e6


def make_compiled(backend: str, fn):
    """``fn`` compiled by ``backend``; the caller resets compiler state between backends."""
    if backend == "eager":
        return fn
    mode = {"ro": "reduce-overhead", "ma": "max-autotune"}.get(backend.split()[-1])
    if backend.startswith("torch.compile"):
        return torch.compile(fn, mode=mode)
    import kiln

    return kiln.compile(fn, mode=mode)


def wait_for_kiln_guard_library() -> str:
    """kiln builds its C++ tensor-guard library once per machine (about 15 s of one core, in the background
    from the first ``kiln.compile``; cached in the kiln cache) and reads tensors' attributes from Python
    until it loads: on a fresh machine a benchmark would time those reads (0.2 ms a call for GPT-2's 148
    parameters on the H200 host) instead of kiln's steady state. Starts the build and waits for it."""
    from kiln.capture import tensor_guard_build
    from kiln.options import default_options

    tensor_guard_build.ensure(default_options())
    tensor_guard_build.wait(300)
    return tensor_guard_build.status()


def reset_all():
    import kiln

    kiln.reset()
    kiln.stats.reset()
    torch._dynamo.reset()


def stats_reset():
    """Between backends of one row: kiln's notes count that backend's compile only. Caches are not
    reset (that would make the backends compiled before recompile while they are timed)."""
    import kiln

    kiln.stats.reset()


def gpu_time_ms(f, args, calls: int = 20) -> float:
    """Device time per call of ``f`` (torch.profiler: its kernels' and copies' own time, without the
    host's time between them): what a kernel costs once launch overhead is hidden."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    f(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            f(*args)
        torch.cuda.synchronize()
    device_events = [e for e in prof.key_averages()
                     if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    return sum(e.self_device_time_total for e in device_events) / calls / 1000.0


def bench_backends(fn, args, backends=BACKENDS, iters=30, ref64=None, pipelined=False, gpu_time=False) -> dict:
    """{backend: {"ms":..., "first_call_s":..., "matches_eager":..., "error":...}}; outputs are checked
    against ``ref64`` (the float64 outputs) when given, else against eager with per-dtype tolerances.
    Every backend is compiled (first call, accuracy) before any is timed; then all are timed in
    interleaved rounds (``interleaved_medians_ms``), so all stay alive together (CUDA-graph pools
    included). ``first_call_s`` is with the in-process caches the backends before it left (the
    compile section measures cold and warm starts in fresh processes)."""
    out, compiled_fns = {}, {}
    with torch.no_grad():
        want = fn(*args)
    reset_all()
    for b in backends:
        try:
            with torch.no_grad():
                stats_reset()
                compiled = make_compiled(b, fn)
                t0 = time.perf_counter()
                got = compiled(*args)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                ok, err = accuracy(got, want, ref64)
                del got
            out[b] = {"first_call_s": first, "matches_eager": ok, "error_vs_reference": err}
            if b.startswith("kiln"):
                out[b]["kiln"] = kiln_notes()
            compiled_fns[b] = compiled
        except Exception as exc:  # a backend failing is a result, not the end of the run
            out[b] = {"error": f"{type(exc).__name__}: {str(exc)[:600]}"}
    del want
    with torch.no_grad():
        for b, ms in interleaved_medians_ms(compiled_fns, args, iters).items():
            if isinstance(ms, Exception):
                out[b]["error"] = f"timing: {type(ms).__name__}: {str(ms)[:600]}"
            else:
                out[b]["ms"] = ms
        if pipelined:  # "ms" becomes the back-to-back time; the waited-for time stays as "synced_ms"
            for b, ms in interleaved_medians_ms(compiled_fns, args, iters, pipelined=True).items():
                if not isinstance(ms, Exception) and "ms" in out[b]:
                    out[b]["synced_ms"], out[b]["ms"] = out[b]["ms"], ms
        if gpu_time:  # "gpu_ms": the device's time per call alone (host overhead is not in it)
            for b, f in compiled_fns.items():
                if "ms" in out[b]:
                    try:
                        out[b]["gpu_ms"] = gpu_time_ms(f, args)
                    except Exception as exc:  # noqa: BLE001 -- a profiler failure leaves the row without it
                        out[b]["gpu_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def _rmse(a, b) -> float:
    return torch.sqrt(torch.mean((a.double() - b.double()) ** 2)).item()


def accuracy(got, want, ref64=None) -> tuple[bool, str]:
    """(passes, a short description of the worst output's error), as torch's benchmarks judge it."""
    from torch.utils._pytree import tree_flatten

    g, w = tree_flatten(got)[0], tree_flatten(want)[0]
    r = tree_flatten(ref64)[0] if ref64 is not None else [None] * len(w)
    if len(g) != len(w):
        return False, f"{len(g)} outputs, eager has {len(w)}"
    notes = []
    for a, b, ref in zip(g, w, r):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point():
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                return False, "integer output differs"
            continue
        if a.shape != b.shape:
            return False, f"shape {tuple(a.shape)} != {tuple(b.shape)}"
        low = a.dtype in (torch.float16, torch.bfloat16)
        tol = 1e-2 if low else 1e-3
        if ref is None or ref.shape != a.shape:
            ok = torch.allclose(a.float(), b.float(), atol=tol, rtol=tol, equal_nan=True)
            notes.append(f"max|diff| {(a.float() - b.float()).abs().max().item():.2e}")
        else:
            res_err, eager_err = _rmse(a, ref), _rmse(b, ref)
            ok = res_err <= (3.0 if low else 2.0) * eager_err + tol / 10
            notes.append(f"rmse {res_err:.2e} (eager {eager_err:.2e})")
        if not ok:
            return False, notes[-1]
    return True, "; ".join(notes[:2])


def fp64_reference(model, args):
    """The outputs of a float64 copy of ``model`` (None when it cannot run in float64)."""
    import copy

    try:
        m64 = copy.deepcopy(model).to(torch.float64)
        a64 = tuple(a.to(torch.float64) if a.is_floating_point() else a for a in args)
        with torch.no_grad():
            out = m64(*a64)
        del m64
        return out
    except Exception as exc:  # noqa: BLE001 -- fall back to comparing with eager
        print(f"    (no float64 reference: {type(exc).__name__}: {str(exc)[:120]})")
        return None


def kiln_notes() -> dict:
    """What kiln did for the last compiled model: graphs, breaks, ops run with ATen kernels."""
    import kiln

    st = kiln.stats
    return {"graphs": st.graphs, "graph_breaks": sum(st.graph_breaks.values()),
            "recompilations": sum(st.recompilations.values()), "eager_frames": dict(st.eager_fallbacks),
            "aten_fallbacks": dict(st.aten_fallbacks), "kernels": st.kernels_generated,
            "matmul_choices": dict(st.matmul_choices), "speed_choices": dict(st.speed_choices),
            "stages_s": {k: round(v, 3) for k, v in st.seconds.items()}}  # where the first call's time went


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

    def transpose(x):
        return x.t().contiguous() * 2

    cases = []
    for dtype in (torch.float32, torch.bfloat16):
        e = torch.tensor([], dtype=dtype).element_size()
        x3 = [torch.randn(n, device="cuda", dtype=dtype) for _ in range(3)]
        cases.append((f"pointwise 3-in 1-out {n} {_short(dtype)}", pointwise, x3, 4 * n * e))
        x = torch.randn(rows, cols, device="cuda", dtype=dtype)
        cases.append((f"softmax {rows}x{cols} {_short(dtype)}", softmax, [x], 2 * rows * cols * e))
        w, b = torch.randn(cols, device="cuda", dtype=dtype), torch.randn(cols, device="cuda", dtype=dtype)
        cases.append((f"layer_norm {rows}x{cols} {_short(dtype)}", layer_norm, [x, w, b], 2 * rows * cols * e))
        side = 2048 if quick else 8192
        xt = torch.randn(side, side, device="cuda", dtype=dtype)
        cases.append((f"transpose {side}x{side} {_short(dtype)}", transpose, [xt], 2 * side * side * e))
    long_rows = torch.randn(256 if quick else 2048, 32768, device="cuda")
    cases.append((f"softmax {long_rows.shape[0]}x32768 f32 (looped)", softmax, [long_rows], 2 * long_rows.numel() * 4))
    return cases


def run_kernels(quick: bool, copy_gbs: float) -> list[dict]:
    rows = []
    for name, fn, args, nbytes in kernel_cases(quick):
        with torch.no_grad():
            ref64 = fn(*[a.double() for a in args])
        res = bench_backends(fn, args, backends=BACKENDS_SELECTED, ref64=ref64, pipelined=True)
        del ref64
        for b, r in res.items():
            if "ms" in r:
                r["bandwidth_fraction"] = nbytes / r["ms"] / 1e6 / copy_gbs
                r["synced_bandwidth_fraction"] = nbytes / r["synced_ms"] / 1e6 / copy_gbs
        rows.append({"case": name, "bytes": nbytes, "results": res})
        _print_row(name, res, extra="bandwidth_fraction")
        synced = [f"{b} {r['synced_bandwidth_fraction']:.0%}" for b, r in res.items() if "synced_ms" in r]
        print(f"    with a wait after each call: {', '.join(synced)}")
    return rows


def run_overhead() -> list[dict]:
    """Per-call wall time (µs) of tiny graphs, where launch overhead is everything: eager, kiln with
    Triton's launch path, kiln with the fast launcher, kiln with CUDA graphs."""
    import kiln
    from kiln.backends.kiln import kiln_backend
    from kiln.options import default_options
    import torch.fx as fx

    def one_kernel(x):
        return torch.softmax(x * 2, -1)

    def five_kernels(x):  # reductions over different dims do not fuse
        a = torch.softmax(x, -1)
        b = torch.softmax(x, 0)
        return a.sum(0) + b.sum(-1), (a * b).amax(), x.t().contiguous().relu()

    rows = []
    x = torch.randn(64, 64, device="cuda")
    for name, fn in (("1 kernel", one_kernel), ("5 kernels", five_kernels)):
        times = {}
        for label, changes in (("eager", None), ("kiln triton launch", dict(triton_fast_launch=False)),
                               ("kiln fast launch", {}), ("kiln cuda graphs", dict(cudagraphs=True))):
            kiln.reset()
            f = fn if changes is None else kiln_backend(fx.symbolic_trace(fn), [x], default_options().replace(**changes))
            for _ in range(20):
                f(x)
            torch.cuda.synchronize()
            n = 2000
            t0 = time.perf_counter()
            for _ in range(n):
                f(x)
            torch.cuda.synchronize()
            times[label] = (time.perf_counter() - t0) / n * 1e6
        rows.append({"case": name, "us_per_call": times})
        print(f"{name:<12} " + "  ".join(f"{k} {v:7.1f} us" for k, v in times.items()))
    return rows


# the Llama-style model of the models section (grouped-query attention: 16 heads, 4 KV heads)
LLAMA_GQA = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                 num_key_value_heads=4, vocab_size=32000)


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
                cfg = transformers.LlamaConfig(**LLAMA_GQA)
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


def standard_model_cases():
    """``--set standard``: the configs issue 19 measures, at the sizes users run (inference): an MLP
    (256x1024 -> 4096 -> 1024), a hand-written attention block (batch 16, seq 128, 512 wide, 8 heads, causal
    mask), HF BERT-base (batch 16, seq 256), GPT-2 124M with its LM head and 50257-word vocabulary (batch 8,
    seq 512, logits), a Llama-style causal LM with grouped-query attention (1024 wide, 8 layers, 4 KV heads,
    batch 8, seq 512, logits), nanoGPT at GPT-2 size (12 layers, 768 wide, vocab 50304, batch 8, seq 512),
    timm ResNet-50 (batch 32) and torchvision ResNet-18 (batch 64) at 224x224."""
    import torch.nn as nn

    from cpu_models import NanoGPT, _Field
    from tests.models.test_small_models import TransformerBlock

    def mlp():
        m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024), nn.LayerNorm(1024))
        return m, (torch.randn(256, 1024),)

    def attention_block():
        return TransformerBlock(dim=512, heads=8), (torch.randn(16, 128, 512),)

    def hf(kind):
        def build():
            import transformers

            if kind == "bert":
                cfg = transformers.BertConfig()
                return (_Field(transformers.BertModel(cfg), "last_hidden_state"),
                        (torch.randint(0, cfg.vocab_size, (16, 256)),))
            if kind == "gpt2":
                cfg = transformers.GPT2Config()
                model = transformers.GPT2LMHeadModel(cfg)
            else:
                cfg = transformers.LlamaConfig(**LLAMA_GQA)
                model = transformers.LlamaForCausalLM(cfg)
            return _Field(model, "logits"), (torch.randint(0, cfg.vocab_size, (8, 512)),)

        return build

    def nanogpt():
        m = NanoGPT(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, bias=False)
        return m, (torch.randint(0, 50304, (8, 512)),)

    def image(name, batch):
        def build():
            if name == "resnet18":
                import torchvision

                return torchvision.models.resnet18(), (torch.randn(batch, 3, 224, 224),)
            import timm

            return timm.create_model(name, pretrained=False), (torch.randn(batch, 3, 224, 224),)

        return build

    return [("mlp", mlp), ("attention_block", attention_block), ("hf_bert", hf("bert")), ("hf_gpt2_lm", hf("gpt2")),
            ("llama_gqa_lm", hf("llama")), ("nanogpt", nanogpt), ("timm_resnet50", image("resnet50", 32)),
            ("tv_resnet18", image("resnet18", 64))]


def on_gpu(model, args, dtype):
    """``model`` in eval mode and its example ``args`` on the GPU, floating point ones in ``dtype``."""
    model = model.eval().to("cuda")
    if dtype != torch.float32:
        model = model.to(dtype)
    return model, tuple(a.to("cuda", dtype) if a.is_floating_point() else a.to("cuda") for a in args)


def run_models(quick: bool, only: list[str] | None, dtypes=(torch.float32, torch.bfloat16),
               model_set: str = "small") -> list[dict]:
    rows = []
    cases = standard_model_cases() if model_set == "standard" else model_cases(quick)
    for name, build in cases:
        if only and name not in only:
            continue
        for dtype in dtypes:
            label = f"{name} {_short(dtype)}"
            try:
                model, args = build()
            except ImportError as exc:
                rows.append({"case": label, "skipped": f"not installed: {exc}"})
                print(f"{label:<44} skipped ({exc})")
                continue
            model, args = on_gpu(model, args, dtype)
            ref64 = fp64_reference(model, args)
            res = bench_backends(model, args, backends=BACKENDS_SELECTED + MODEL_EXTRA, iters=20, ref64=ref64)
            del ref64
            rows.append({"case": label, "results": res})
            _print_row(label, res)
            _print_notes(res)
    return rows


def run_compile_times(quick: bool, only: list[str] | None = None) -> list[dict]:
    """First-call latency on a few models: with cold caches, then warm caches (kiln and torch.compile),
    and kiln cold with its compile workers off (KILN_COMPILE_WORKERS=0). Each backend and phase runs in
    a fresh process of its own (so neither backend finds modules the other imported, nor CUDA state
    it set up), after one eager call of the model (CUDA, cuBLAS and cuDNN are initialized then). The
    time runs from the compile call (``kiln.compile`` / ``torch.compile``, which import their
    compiler) to the first result."""
    rows = []
    for name in ("mlp", "transformer_block", "hf_gpt2", "llama_small", "timm_resnet50"):
        if only and name not in only:
            continue
        times = {}
        for phase, cache in (("cold", None), ("warm", "same"), ("cold, no workers", None)):
            if cache is None:
                cache_dir = tempfile.mkdtemp(prefix="kiln-bench-cache-")
            env = dict(os.environ, KILN_CACHE_DIR=cache_dir, TRITON_CACHE_DIR=os.path.join(cache_dir, "triton-bin"),
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir, "inductor"))
            backends = ("kiln", "torch.compile")
            if phase == "cold, no workers":
                env.update(KILN_COMPILE_WORKERS="0")
                backends = ("kiln",)
            times[phase] = {}
            for backend in backends:
                cmd = [sys.executable, os.path.abspath(__file__), "--probe", name] + (["--quick"] if quick else [])
                done = subprocess.run(cmd, env=dict(env, PROBE_BACKEND=backend), capture_output=True, text=True,
                                      timeout=900)
                line = [ln for ln in done.stdout.splitlines() if ln.startswith("PROBE ")]
                times[phase].update(json.loads(line[-1][6:]) if line else {f"{backend} error": done.stderr[-500:]})
        rows.append({"case": name, "first_call_s": times})
        t = {p: (v.get("kiln_s", "err"), v.get("torch_compile_s", "-")) for p, v in times.items()}
        print(f"{name:<44} first call (s): kiln cold {t['cold'][0]}, warm {t['warm'][0]}, cold without workers "
              f"{t['cold, no workers'][0]}; torch.compile cold {t['cold'][1]}, warm {t['warm'][1]}")
        for phase in ("cold", "warm"):
            print(f"    kiln {phase} by stage: {times[phase].get('kiln_stages', times[phase].get('kiln error'))}; "
                  f"kernel configs compiled by workers: {times[phase].get('kiln_precompiled')}")
    return rows


def probe(name: str, quick: bool) -> None:
    """Child process of run_compile_times: first-call seconds of one backend (PROBE_BACKEND) on one model."""
    build = dict(model_cases(quick))[name]
    model, args = build()
    model = model.eval().cuda()
    args = tuple(a.cuda() for a in args)
    backend = os.environ.get("PROBE_BACKEND", "kiln")
    with torch.no_grad():
        model(*args)  # CUDA, cuBLAS and cuDNN initialized: not the compiler's time
        torch.cuda.synchronize()
        t0 = time.perf_counter()  # from the compile call (imports of the compiler included) to the result
        compiled = make_compiled(backend, model)
        compiled(*args)
        torch.cuda.synchronize()
        seconds = round(time.perf_counter() - t0, 3)
    if backend != "kiln":
        out = {"torch_compile_s": seconds}
    else:  # and where kiln's first call went, by stage
        import kiln

        out = {"kiln_s": seconds, "kiln_stages": {k: round(v, 3) for k, v in kiln.stats.seconds.items()},
               "kiln_precompiled": kiln.stats.triton_precompiled}
    print("PROBE " + json.dumps(out))


# --------------------------------------------------------------------------------------- report


def columns() -> tuple:
    return BACKENDS + MODEL_EXTRA


def _short(dtype) -> str:
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[dtype]


def _print_row(name, res, extra=None):
    cells = []
    for b in columns():
        r = res.get(b, {})
        if b not in res:
            cells.append(f"{'-':>9}")
            continue
        if "ms" not in r:
            cells.append(f"{'ERR':>9}")
            continue
        cell = f"{r['ms']:8.3f}" + ("" if r.get("matches_eager") else "!")
        if extra and extra in r:
            cell += f" ({r[extra]:.0%})"
        cells.append(f"{cell:>9}")
    print(f"{name:<44} " + " ".join(cells))


def _print_notes(res):
    for b, r in res.items():
        if "error" in r:
            print(f"    {b}: {r['error']}")
        elif not r.get("matches_eager"):
            print(f"    {b}: differs: {r.get('error_vs_reference')}")
        notes = r.get("kiln")
        if notes and notes.get("matmul_choices"):
            print(f"    {b}: matmul templates by path picked: {notes['matmul_choices']}")
        if notes and b == "kiln":
            fallbacks = "; ".join(f"{k} x{v}" for k, v in list(notes["aten_fallbacks"].items())[:6]) or "none"
            print(f"    kiln: {notes['graphs']} graphs, {notes['graph_breaks']} breaks, "
                  f"{notes['recompilations']} recompiles, {notes['kernels']} kernels; ATen fallbacks: {fallbacks}")
            print(f"    kiln: speed choices {notes.get('speed_choices') or 'none'}")
            stages = sorted(notes.get("stages_s", {}).items(), key=lambda kv: -kv[1])[:6]
            if stages:
                print(f"    kiln first call {r.get('first_call_s', 0):.2f} s, by stage: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in stages))
            for why, n in list(notes["eager_frames"].items())[:4]:
                print(f"      frame run eagerly x{n}: {why[:150]}")


def geomean_speedups(rows) -> dict:
    out = {}
    for b in columns()[1:]:
        ratios = [r["results"]["eager"]["ms"] / r["results"][b]["ms"] for r in rows
                  if "results" in r and "ms" in r["results"].get(b, {}) and "ms" in r["results"].get("eager", {})]
        if ratios:
            out[b] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="overhead,kernels,models,compile")
    parser.add_argument("--models", default="", help="comma-separated model names (default: all)")
    parser.add_argument("--dtypes", default="f32,bf16", help="model dtypes: f32,bf16")
    parser.add_argument("--backends", default=",".join(b.replace(" ", "_") for b in BACKENDS),
                        help="comma-separated backends (spaces as _): " + ",".join(b.replace(" ", "_") for b in BACKENDS))
    parser.add_argument("--modes", default="", help="extra compile modes for the models section: "
                        + ",".join(MODE_BACKENDS) + " (torch.compile and kiln with that mode; off by default: slow)")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--set", dest="model_set", choices=("small", "standard"), default="small",
                        help="the models section's models: small (the default) or standard (issue 19's configs: "
                        "MLP, attention block, BERT-base 16x256, GPT-2 LM 8x512, Llama GQA LM, nanoGPT 124M, "
                        "ResNet-50 b32, ResNet-18 b64)")
    parser.add_argument("--families", default="scan,sort,scatter,gather", help="the families section's families")
    parser.add_argument("--family-dtypes", default="f32,bf16", help="the families section's dtypes")
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
    global BACKENDS_SELECTED, MODEL_EXTRA
    BACKENDS_SELECTED = tuple(b.replace("_", " ") for b in args.backends.split(",") if b)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODE_BACKENDS):
        parser.error(f"unknown modes {sorted(set(modes) - set(MODE_BACKENDS))}; known: {list(MODE_BACKENDS)}")
    MODEL_EXTRA = tuple(b for m in modes for b in MODE_BACKENDS[m])
    unknown = set(BACKENDS_SELECTED) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}")
    dtypes = tuple({"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[d] for d in args.dtypes.split(","))
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "quick": args.quick}
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
    if any(b.startswith("kiln") for b in BACKENDS_SELECTED + MODEL_EXTRA):
        print(f"kiln tensor guards: {wait_for_kiln_guard_library()}")
    copy_gbs = copy_bandwidth_gbs()
    report["copy_bandwidth_GBs"] = copy_gbs
    print(f"device: {report['device']}   copy bandwidth: {copy_gbs:.0f} GB/s")
    print(f"{'case (median ms; ! = differs from eager)':<44} " + " ".join(f"{b:>9}" for b in columns()))
    if "overhead" in sections:
        report["overhead"] = run_overhead()
    if "kernels" in sections:
        report["kernels"] = run_kernels(args.quick, copy_gbs)
    if "families" in sections:
        from gpu_families import run_families

        family_dtypes = tuple({"f32": torch.float32, "bf16": torch.bfloat16}[d] for d in args.family_dtypes.split(","))
        report["families"] = run_families(bench_backends, BACKENDS_SELECTED, copy_gbs, "quick" if args.quick else "full",
                                          [f for f in args.families.split(",") if f], family_dtypes)
    if "models" in sections:
        report["models"] = run_models(args.quick, [m for m in args.models.split(",") if m] or None, dtypes,
                                      args.model_set)
        report["model_geomean_speedup_over_eager"] = geomean_speedups(report["models"])
        print("geomean speedup over eager (models):",
              ", ".join(f"{b} {v:.2f}x" for b, v in report["model_geomean_speedup_over_eager"].items()))
    if "compile" in sections:
        report["compile_times"] = run_compile_times(args.quick, [m for m in args.models.split(",") if m] or None)
    text = json.dumps(report, indent=1, default=str)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
