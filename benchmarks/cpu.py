"""CPU speed of kiln's generated code: eager vs torch.compile (inductor) vs kiln, side by side in one run.

    python benchmarks/cpu.py                          # all cases, default sizes
    python benchmarks/cpu.py --cases softmax,bert --size small --iters 30
    python benchmarks/cpu.py --no-compile-time --json out.json
    python benchmarks/cpu.py --threads 2              # OMP/torch threads (default: all cores)
    python benchmarks/cpu.py --threads 1 --timer cpu  # on a busy shared machine: CPU time, one thread
    python benchmarks/cpu.py --interleave             # backends alternate call batches round by round (noisy boxes)
    python benchmarks/cpu.py --cases issue19 --isolate --threads 1 --timer cpu --interleave --no-compile-time
                                                      # issue 19's models (cpu_models.py), batch 1, float32; every
                                                      # compiler in a process of its own (timed against eager there)

On the 16-core GPU host (one command is limited to 10 minutes), split the run in two:

    python benchmarks/cpu.py --no-compile-time --json $OUT/cpu_speed.json
    python benchmarks/cpu.py --cases mlp,convnet,transformer_block,bert,gpt2 --iters 3 --min-time 0 --json $OUT/cpu_compile.json

Every case is checked against eager before it is timed: kiln's result must match eager (or be as close
to a float64 reference as eager is, for reductions whose summation order differs); a mismatch is a
bug and is reported in the table (the case is not timed). Times are medians over ``--iters`` calls
after warm-up; with ``--interleave`` the backends take turns (one batch of calls each per round, in
rotating order) and a backend's time is the median over rounds of its per-call batch time, so that load
from other processes hits all backends alike. Compile time (``--compile-time``, on by default for models) is measured in fresh
processes: "cold" with empty kiln / inductor cache directories, "warm" in a second process with the
caches filled; it is the time of the first call (capture + compile + one run).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SIZES = {
    # name: (pointwise/reduction matrix side, (batch, seq, hidden), model scale)
    "tiny": (256, (2, 16, 64), "tiny"),
    "small": (1024, (4, 64, 256), "small"),
    "default": (4096, (8, 128, 768), "default"),
}


# ------------------------------------------------------------------------------------------ cases


def _micro_cases(size: str):
    import torch
    import torch.nn.functional as F

    n, (b, t, h), _ = SIZES[size]

    def pointwise_chain(x):
        y = x
        for _ in range(4):
            y = torch.relu(y * 1.01 + 0.1) - 0.05
        return torch.sigmoid(y) * x + torch.tanh(x)

    def softmax(x):
        return torch.softmax(x, -1)

    def layer_norm(x, w, bias):
        return F.layer_norm(x, (x.shape[-1],), w, bias)

    def gelu_mlp(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    def sum_dim0(x):
        return x.sum(0)

    def sum_dim1(x):
        return x.sum(1)

    def sum_all(x):
        return x.sum()

    def amax_dim1(x):
        return x.amax(1)

    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    return {
        "pointwise_chain": lambda: (pointwise_chain, (r(n, n),), f"[{n},{n}] 4x(mul,add,relu,sub)+sigmoid,mul,tanh,add"),
        "softmax": lambda: (softmax, (r(b, t, h),), f"[{b},{t},{h}] dim -1"),
        "layer_norm": lambda: (layer_norm, (r(b, t, h), r(h), r(h)), f"[{b},{t},{h}]"),
        "gelu_mlp": lambda: (gelu_mlp, (r(b * t, h), r(4 * h, h) * h ** -0.5, r(4 * h), r(h, 4 * h) * (4 * h) ** -0.5, r(h)),
                             f"[{b * t},{h}] -> {4 * h} -> {h}"),
        "sum_dim0": lambda: (sum_dim0, (r(n, n),), f"[{n},{n}]"),
        "sum_dim1": lambda: (sum_dim1, (r(n, n),), f"[{n},{n}]"),
        "sum_all": lambda: (sum_all, (r(n, n),), f"[{n},{n}]"),
        "amax_dim1": lambda: (amax_dim1, (r(n, n),), f"[{n},{n}]"),
        **_scan_sort_cases(n, r),
    }


def _scatter_cases(size: str):
    """Scatters and gathers (kiln/lower/scatter.py, indexing.py): random positions, duplicates where the
    op combines them."""
    import torch

    n, (b, t, h), _ = SIZES[size]
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    def ri(high, *shape):
        return torch.randint(0, high, shape, generator=g)

    def rows_perm(rows, k, high):  # distinct positions per row (overwrite scatters are deterministic)
        return torch.argsort(torch.rand(rows, high, generator=g), dim=1)[:, :k].contiguous()

    q = n // 4
    return {
        "scatter_add_dim1": lambda: (lambda x, i, s: x.scatter_add(1, i, s), (r(n, q), ri(q, n, n), r(n, n)),
                                     f"[{n},{q}] += [{n},{n}] along 1"),
        "scatter_add_dim0": lambda: (lambda x, i, s: x.scatter_add(0, i, s), (r(q, n), ri(q, n, n), r(n, n)),
                                     f"[{q},{n}] += [{n},{n}] along 0"),
        "scatter_src_relu": lambda: (lambda x, i, s: x.scatter(1, i, s.relu()) * 2, (r(n, n), rows_perm(n, n // 2, n), r(n, n // 2)),
                                     f"[{n},{n}] <- relu([{n},{n // 2}]), *2"),
        "scatter_amax": lambda: (lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False),
                                 (r(n, q), ri(q, n, n), r(n, n)), f"[{n},{q}] amax [{n},{n}] along 1"),
        "embedding_backward": lambda: (lambda w, i, gr: torch.ops.aten.embedding_dense_backward(gr, i, w.shape[0], -1, False),
                                       (r(4 * q, h), ri(4 * q, b, t), r(b, t, h)), f"[{b},{t},{h}] into [{4 * q},{h}]"),
        "index_add": lambda: (lambda x, i, s: x.index_add(0, i, s), (r(q, n), ri(q, n), r(n, n)), f"[{q},{n}] += [{n},{n}]"),
        "gather_dim1": lambda: (lambda x, i: torch.gather(x, 1, i), (r(n, n), ri(n, n, n // 2)), f"[{n},{n}] -> [{n},{n // 2}]"),
        "index_select": lambda: (lambda x, i: x.index_select(0, i), (r(n, n), ri(n, n // 2)), f"[{n},{n}] rows -> [{n // 2},{n}]"),
    }


def _scan_sort_cases(n, r):
    """Scans and sorts (``--cases`` with these names; ``copy`` is the bandwidth yardstick)."""
    import torch

    m = max(n // 4, 1)  # rows of the sort cases: a sort costs n log n per row
    cases = {
        "copy": lambda: (lambda x: x * 1.0, (r(n, n),), f"[{n},{n}] x * 1.0"),
        "cumsum_dim1": lambda: (lambda x: torch.cumsum(x, 1), (r(n, n),), f"[{n},{n}]"),
        "cumsum_dim0": lambda: (lambda x: torch.cumsum(x, 0), (r(n, n),), f"[{n},{n}]"),
        "cumsum_fused": lambda: (lambda x: torch.cumsum(torch.relu(x) * 2, 1) + 1, (r(n, n),), f"[{n},{n}] relu,mul,cumsum,add"),
        "cummax_dim1": lambda: (lambda x: torch.cummax(x, 1), (r(n, n),), f"[{n},{n}] values+indices"),
        "logcumsumexp_dim1": lambda: (lambda x: torch.logcumsumexp(x, 1), (r(n, n),), f"[{n},{n}]"),
        "cumprod_dim0": lambda: (lambda x: torch.cumprod(x, 0), (r(n, n),), f"[{n},{n}]"),
        "sort_dim1": lambda: (lambda x: torch.sort(x, 1), (r(m, n),), f"[{m},{n}] values+indices"),
        "argsort_stable": lambda: (lambda x: torch.argsort(x, dim=1, stable=True), (r(m, n),), f"[{m},{n}]"),
        "topk_dim1": lambda: (lambda x: torch.topk(x, 16, 1), (r(m, n),), f"[{m},{n}] k=16"),
        "median_dim1": lambda: (lambda x: torch.median(x, 1), (r(m, n),), f"[{m},{n}]"),
    }
    return cases


SCAN_SORT_CASES = ("copy", "cumsum_dim1", "cumsum_dim0", "cumsum_fused", "cummax_dim1", "logcumsumexp_dim1",
                   "cumprod_dim0", "sort_dim1", "argsort_stable", "topk_dim1", "median_dim1")


def _model_cases(size: str):
    import torch

    _, (b, t, h), scale = SIZES[size]
    sys.path.insert(0, ROOT)
    from tests.models.test_small_models import MLP, ConvNet, TransformerBlock

    dims = {"tiny": (32, 2, 2), "small": (256, 4, 4), "default": (768, 4, 12)}[scale]
    d, layers, heads = dims

    def mlp():
        torch.manual_seed(0)
        return MLP(d=d, hidden=4 * d, out=10), (torch.randn(b * t, d),), f"[{b * t},{d}] hidden {4 * d}"

    def convnet():
        torch.manual_seed(0)
        side = {"tiny": 16, "small": 32, "default": 64}[scale]
        return ConvNet(), (torch.randn(b, 3, side, side),), f"[{b},3,{side},{side}]"

    def transformer_block():
        torch.manual_seed(0)
        return TransformerBlock(dim=d, heads=heads), (torch.randn(b, t, d),), f"[{b},{t},{d}] heads {heads}"

    def nn_encoder():  # torch.nn's own layers: eval + no_grad take the fused _transformer_encoder_layer_fwd
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, dropout=0.0)
        model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        return model, (torch.randn(b, t, d),), f"[{b},{t},{d}] heads {heads} layers {layers}"

    def bert():
        import transformers

        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=1000, hidden_size=d, num_hidden_layers=layers,
                                         num_attention_heads=heads, intermediate_size=4 * d,
                                         max_position_embeddings=max(512, t))
        model = _LastHidden(transformers.BertModel(config))
        ids = torch.randint(0, 1000, (b, t))
        return model, (ids, torch.ones(b, t, dtype=torch.long)), f"[{b},{t}] hidden {d} layers {layers}"

    def gpt2():
        import transformers

        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=1000, n_embd=d, n_layer=layers, n_head=heads,
                                         n_positions=max(512, t))
        model = _LastHidden(transformers.GPT2Model(config))
        return model, (torch.randint(0, 1000, (b, t)),), f"[{b},{t}] hidden {d} layers {layers}"

    return {"mlp": mlp, "convnet": convnet, "transformer_block": transformer_block, "nn_encoder": nn_encoder,
            "bert": bert, "gpt2": gpt2}


def _LastHidden(model):
    """An nn.Module returning the HF model's ``last_hidden_state`` (a tensor to compare)."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(*args).last_hidden_state

    return LastHidden(model)


def all_cases(size: str) -> dict:
    """name -> (kind, builder); a builder returns (callable, args, description)."""
    out = {name: ("micro", fn) for name, fn in _micro_cases(size).items()}
    out.update({name: ("micro", fn) for name, fn in _scatter_cases(size).items()})
    out.update({name: ("model", fn) for name, fn in _model_cases(size).items()})
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cpu_models import issue19_cases

    out.update({name: ("model", fn) for name, fn in issue19_cases(size).items()})
    return out


def build(name: str, size: str):
    import torch

    kind, fn = all_cases(size)[name]
    f, args, desc = fn()
    if isinstance(f, torch.nn.Module):
        f.eval()
    return kind, f, args, desc


# --------------------------------------------------------------------------------------- checking


def _tensors(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _reference64(f, args):
    """The case in float64 (a reference for how close float32 results can be)."""
    import torch

    f64 = copy.deepcopy(f).double() if isinstance(f, torch.nn.Module) else f
    args64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    with torch.no_grad():
        return f64(*args64)


def check(f, args, got, expected) -> str | None:
    """None when ``got`` matches eager's ``expected``; else what differs."""
    import torch

    gs, es = _tensors(got), _tensors(expected)
    if len(gs) != len(es):
        return f"{len(gs)} outputs, eager gives {len(es)}"
    ref = None
    for g, e in zip(gs, es):
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {tuple(g.shape)} {g.dtype}, eager gives {tuple(e.shape)} {e.dtype}"
        if torch.allclose(g, e, rtol=1.3e-6, atol=1e-5, equal_nan=True):
            continue
        # summation order differs from ATen's: as close to float64 as eager is (within 4x) is a pass
        if ref is None:
            ref = _tensors(_reference64(f, args))
        i = [t is g for t in gs].index(True)
        r = ref[i].to(g.dtype) if ref[i].is_floating_point() else ref[i]
        err_g = (g.double() - ref[i].double()).abs().max().item()
        err_e = (e.double() - ref[i].double()).abs().max().item()
        if not (err_g <= 4 * err_e + 1e-6 * max(1.0, r.abs().max().item())):
            return f"max error vs float64 {err_g:.3g} (eager {err_e:.3g})"
    return None


# ---------------------------------------------------------------------------------------- timing


CLOCK = time.perf_counter  # --timer cpu: time.process_time (CPU seconds of all threads; for busy machines)


def median_time(fn, args, iters: int, min_time: float) -> float:
    """Median seconds per call over at least ``iters`` calls (and at least ``min_time`` seconds)."""
    for _ in range(3):
        fn(*args)
    samples = []
    start = time.perf_counter()
    while len(samples) < iters or time.perf_counter() - start < min_time:
        t0 = CLOCK()
        fn(*args)
        samples.append(CLOCK() - t0)
        if len(samples) >= 20 * iters:
            break
    return statistics.median(samples)


def interleaved_times(fns: dict, args, rounds: int, min_time: float) -> dict:
    """Seconds per call of each of ``fns`` (name -> callable): ``rounds`` rounds in which every function
    runs one batch of calls (about ``min_time / rounds`` seconds; the first function to run in a round
    rotates); a function's time is the median over rounds of its batch's time per call."""
    for fn in fns.values():
        for _ in range(3):
            fn(*args)
    batch = {}
    for name, fn in fns.items():  # calls per batch: enough for ~min_time/rounds seconds (at least 1)
        t0 = time.perf_counter()
        fn(*args)
        one = max(time.perf_counter() - t0, 1e-7)
        batch[name] = max(1, min(1000, int(min_time / max(rounds, 1) / one)))
    names = list(fns)
    samples = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            fn, n = fns[name], batch[name]
            t0 = CLOCK()
            for _ in range(n):
                fn(*args)
            samples[name].append((CLOCK() - t0) / n)
    return {name: statistics.median(s) for name, s in samples.items()}


def make_compiled(backend: str, f):
    import torch

    if backend == "eager":
        return f
    if backend == "inductor":
        return torch.compile(f)
    import kiln

    return kiln.compile(f)


def run_case(name: str, size: str, backends, iters: int, min_time: float, interleave: bool = False) -> dict:
    import torch

    kind, f, args, desc = build(name, size)
    row = {"case": name, "kind": kind, "shape": desc, "ms": {}, "errors": {}}
    with torch.no_grad():
        expected = f(*args)
        row["bytes"] = sum(t.nbytes for t in _tensors(list(args)) + _tensors(expected))
        timed = {}
        for backend in backends:
            try:
                cf = make_compiled(backend, f)
                t0 = time.perf_counter()
                got = cf(*args)
                row.setdefault("first_call_s", {})[backend] = time.perf_counter() - t0
                problem = check(f, args, got, expected) if backend != "eager" else None
            except Exception as exc:  # reported in the table, the run goes on
                problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
                cf = None
            if problem:
                row["errors"][backend] = problem
                if backend == "kiln" or cf is None:
                    continue  # a wrong kiln result is a bug: not timed (the others' are only reported)
            timed[backend] = cf
            if backend == "kiln":
                row["kiln_kernels"] = _kiln_kernel_count(cf)
        if interleave:
            secs = interleaved_times(timed, args, iters, max(min_time, 0.2))
        else:
            secs = {backend: median_time(cf, args, iters, min_time) for backend, cf in timed.items()}
        row["ms"] = {backend: 1e3 * s for backend, s in secs.items()}
    if "kiln" in timed:  # graphs whose generated code runs (k) / eager runs (e): backends/choose_faster.py
        import kiln

        row["kiln_choice"] = dict(kiln.stats.speed_choices)
    return row


def _kiln_kernel_count(cf):
    import kiln

    return kiln.stats.kernels_generated


def isolated_case(name: str, args, backends) -> dict:
    """``run_case`` with every compiler in a fresh process of its own, timed there against eager (the
    compilers' thread pools, caches and allocations do not meet). The row's eager time is the median
    of the children's; ``eager_ms_by`` keeps each child's eager time (the ratio that counts compares a
    compiler with the eager time measured beside it: ``ratio_vs_eager``)."""
    compilers = [b for b in backends if b != "eager"] or ["eager"]
    row, eager_ms = None, {}
    for backend in compilers:
        cmd = [sys.executable, os.path.abspath(__file__), "--child-run", name, "--size", args.size,
               "--backends", ",".join(dict.fromkeys(["eager", backend])), "--iters", str(args.iters),
               "--min-time", str(args.min_time), "--timer", args.timer] + (["--interleave"] if args.interleave else [])
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        done = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=3600)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            got = {"case": name, "kind": "model", "shape": "?", "ms": {},
                   "errors": {backend: (done.stderr.strip().splitlines() or ["?"])[-1][:160]}}
        else:
            got = json.loads(lines[-1][len("RESULT "):])
        if row is None:
            row = {**got, "ms": {}, "errors": {}}
        row["errors"].update(got["errors"])
        if backend in got["ms"]:
            row["ms"][backend] = got["ms"][backend]
        if "eager" in got["ms"]:
            eager_ms[backend] = got["ms"]["eager"]
        for key in ("kiln_kernels", "kiln_choice"):
            if key in got:
                row[key] = got[key]
    if eager_ms:
        row["ms"]["eager"] = statistics.median(eager_ms.values())
        row["eager_ms_by"] = eager_ms
    return row


# ---------------------------------------------------------------------------------- compile time


def child_compile(name: str, size: str, backend: str) -> None:
    """Run in a fresh process: print the seconds of the first call (capture + compile + run)."""
    import torch

    kind, f, args, _ = build(name, size)
    with torch.no_grad():
        cf = make_compiled(backend, f)
        t0 = time.perf_counter()
        cf(*args)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        cf(*args)
        second = time.perf_counter() - t0
    extra = {}
    if backend == "kiln":
        import kiln

        snap = kiln.stats.snapshot()
        extra = {"kernel_compiles": snap["kernel_compiles"], "stages": snap["seconds"]}
    print("RESULT " + json.dumps({"compile_s": first - second, **extra}))


def compile_times(name: str, size: str, backend: str, threads: int | None) -> dict:
    """Cold (empty caches) and warm (second process, caches filled) compile seconds."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="kiln_bench_cache_") as cache:
        env = dict(os.environ, KILN_CACHE_DIR=os.path.join(cache, "kiln"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(cache, "triton"), PYTHONPATH=ROOT)
        env.pop("KILN_DEBUG_DIR", None)
        cmd = [sys.executable, os.path.abspath(__file__), "--child-compile", name, backend, "--size", size]
        if threads:
            cmd += ["--threads", str(threads)]
        for label in ("cold", "warm"):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if done.returncode != 0 or not lines:
                out[label] = {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:160]}
                continue
            out[label] = json.loads(lines[-1][len("RESULT "):])
    return out


# ---------------------------------------------------------------------------------------- report


def _fmt_ms(v):
    return f"{v:9.3f}" if v is not None else "        -"


def _bandwidth_lines(rows, backends) -> list[str]:
    """GB/s (bytes read and written once / time) of the scan and sort cases, and the share of the
    ``copy`` case's bandwidth for the same backend."""
    chosen = [r for r in rows if r["case"] in SCAN_SORT_CASES and r.get("bytes")]
    if not chosen:
        return []
    copy = next((r for r in chosen if r["case"] == "copy"), None)
    lines = ["", f"{'bandwidth':<18} " + "".join(f" {b + ' GB/s (copy%)':>24}" for b in backends)]
    for r in chosen:
        cells = []
        for b in backends:
            ms = r["ms"].get(b)
            gbs = r["bytes"] / (ms * 1e6) if ms else None
            ref = copy["bytes"] / (copy["ms"][b] * 1e6) if copy and copy["ms"].get(b) else None
            share = f" ({100 * gbs / ref:3.0f}%)" if gbs and ref else ""
            cells.append(f"{gbs:8.2f}{share}" if gbs else "-")
        lines.append(f"{r['case']:<18} " + "".join(f" {c:>24}" for c in cells))
    return lines


def format_table(rows, backends) -> str:
    head = f"{'case':<18} {'shape':<34}" + "".join(f" {b + ' ms':>11}" for b in backends)
    head += f" {'eager/kiln':>10} {'ind/kiln':>9} {'kern':>5}  chose"
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = r["ms"]
        line = f"{r['case']:<18} {r['shape'][:34]:<34}" + "".join(f" {_fmt_ms(ms.get(b)):>11}" for b in backends)
        k = ms.get("kiln")
        beside = dict(ms, eager=r.get("eager_ms_by", {}).get("kiln", ms.get("eager")))  # isolated: kiln's own eager
        ratio = lambda other: f"{beside[other] / k:.2f}x" if k and beside.get(other) else "-"  # noqa: E731
        line += f" {ratio('eager'):>10} {ratio('inductor'):>9} {str(r.get('kiln_kernels', '-')):>5}"
        choice = r.get("kiln_choice") or {}
        line += f"  {'+'.join(f'{n}{k[0]}' for k, n in sorted(choice.items()) if n)}"
        lines.append(line)
        for b, err in r["errors"].items():
            lines.append(f"    !! {b}: {err}")
    lines += _bandwidth_lines(rows, backends)
    compile_rows = [r for r in rows if r.get("compile")]
    if compile_rows:
        lines += ["", f"{'compile time (s)':<18} " + "".join(f" {b + ' cold':>14} {b + ' warm':>14}" for b in ("kiln", "inductor"))]
        for r in compile_rows:
            cells = []
            for b in ("kiln", "inductor"):
                for label in ("cold", "warm"):
                    v = r["compile"].get(b, {}).get(label, {})
                    cells.append(f"{v['compile_s']:14.2f}" if "compile_s" in v else f"{'err' if v else '-':>14}")
            lines.append(f"{r['case']:<18} " + " ".join(cells))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    parser.add_argument("--size", default="default", choices=sorted(SIZES))
    parser.add_argument("--backends", default="eager,inductor,kiln")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds of timed calls per measurement, at least")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timer", choices=["wall", "cpu"], default="wall",
                        help="cpu: CPU time of the process (all threads), steadier on a shared machine")
    parser.add_argument("--interleave", action="store_true",
                        help="alternate the backends' calls round by round (--iters rounds) and take medians over rounds")
    parser.add_argument("--compile-time", dest="compile_time", action="store_true", default=True)
    parser.add_argument("--no-compile-time", dest="compile_time", action="store_false")
    parser.add_argument("--compile-time-micro", action="store_true", help="also measure compile time of microbenchmarks")
    parser.add_argument("--json", default=None)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--isolate", action="store_true",
                        help="each compiler in a process of its own, timed there against eager (interleaved with --interleave)")
    parser.add_argument("--child-compile", nargs=2, metavar=("CASE", "BACKEND"), help=argparse.SUPPRESS)
    parser.add_argument("--child-run", metavar="CASE", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.timer == "cpu":
        global CLOCK
        CLOCK = time.process_time
    if args.child_compile:
        child_compile(args.child_compile[0], args.size, args.child_compile[1])
        return 0
    backends = args.backends.split(",")
    if args.child_run:
        print("RESULT " + json.dumps(run_case(args.child_run, args.size, backends, args.iters, args.min_time,
                                              args.interleave)), flush=True)
        return 0
    names = list(all_cases(args.size))
    if args.list:
        print("\n".join(names))
        return 0
    from cpu_models import ISSUE19_CASES

    chosen = [c for group in args.cases.split(",") for c in (ISSUE19_CASES if group == "issue19" else [group])] \
        if args.cases else names
    unknown = [c for c in chosen if c not in names]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {names}")
    os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln_bench_"))

    import kiln

    rows = []
    for name in chosen:
        kiln.reset()
        kiln.stats.reset()
        torch._dynamo.reset()
        if args.isolate:
            row = isolated_case(name, args, backends)
        else:
            row = run_case(name, args.size, backends, args.iters, args.min_time, args.interleave)
        if args.compile_time and (row["kind"] == "model" or args.compile_time_micro):
            row["compile"] = {b: compile_times(name, args.size, b, args.threads) for b in backends if b != "eager"}
        rows.append(row)
        print(format_table([row], backends).splitlines()[2], flush=True)
    print()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, size {args.size}"
          + (", interleaved" if args.interleave else "") + (", isolated" if args.isolate else "") + (", cpu timer" if args.timer == "cpu" else ""))
    print(format_table(rows, backends))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "size": args.size,
                       "interleave": args.interleave, "rows": rows}, f, indent=1)
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
