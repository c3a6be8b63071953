"""Changing shapes: compiles, compile time, steady-state speed and total wall time over a sweep of sizes,
for eager, torch.compile (dynamic=None and dynamic=True) and kiln (dynamic=None and dynamic=True), each
backend in a process of its own.

    python benchmarks/dynamic.py                                    # CPU, small configs, all models
    python benchmarks/dynamic.py --device cuda --scale standard     # GPU, standard configs
    python benchmarks/dynamic.py --device cuda --mode reduce-overhead
    python benchmarks/dynamic.py --models gpt2 --backends eager,kiln --calls 16 --json out.json

Models (issue 18): HF BERT and GPT-2 inference over ``--calls`` calls with sequence lengths drawn from
16..512 (fixed seed; batch 8 standard / 2 small), a ResNet-50-like CNN over batch sizes 1..64, and a BERT
fine-tuning loop with dynamic padding (each batch padded to its longest sequence). Per backend:

- compiles: graphs compiled during the sweep (kiln: graphs with a compiled entry; torch: Dynamo's
  unique graphs);
- compile s: sum over calls of (first-pass time - second-pass time of the same call): what the first
  pass spent beyond running;
- steady ms: mean per-call time of the second pass over the same inputs (everything compiled), and its
  median (the mean includes one-off costs of the second pass: speed races, CUDA-graph recordings);
- wall s: the whole first pass (compiles included);
- ok: every output of the first pass equals eager's within tolerance.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("bert", "gpt2", "resnet", "bert_train")
BACKENDS = ("eager", "torch", "torch_dynamic", "kiln", "kiln_dynamic")
# also: "kiln_static" (dynamic=False, a compile per size: the steady speed dynamic graphs are held to)


def _configs(scale: str):
    if scale == "standard":
        return dict(layers=12, hidden=768, heads=12, inter=3072, batch=8, cnn_width=64, cnn_blocks=(3, 4, 6, 3))
    return dict(layers=2, hidden=128, heads=4, inter=256, batch=2, cnn_width=16, cnn_blocks=(1, 1, 1, 1))


def _make_model(name: str, scale: str, device: str, dtype):
    import torch

    cfg = _configs(scale)
    torch.manual_seed(0)
    if name in ("bert", "bert_train"):
        from transformers import BertConfig, BertForSequenceClassification, BertModel

        conf = BertConfig(num_hidden_layers=cfg["layers"], hidden_size=cfg["hidden"], num_attention_heads=cfg["heads"],
                          intermediate_size=cfg["inter"], vocab_size=30522, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)
        model = BertForSequenceClassification(conf) if name == "bert_train" else BertModel(conf)
    elif name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        conf = GPT2Config(n_layer=cfg["layers"], n_embd=cfg["hidden"], n_head=cfg["heads"], vocab_size=50257,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(conf)
    else:
        model = _resnet(cfg["cnn_width"], cfg["cnn_blocks"])
    model = model.to(device)
    if name != "bert_train":
        model = model.eval().to(dtype)
    return model


def _resnet(width: int, blocks):
    """A ResNet-50-shaped CNN (bottleneck blocks) that needs no torchvision."""
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            cout = mid * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + self.skip(x))

    layers = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = width
    for i, n in enumerate(blocks):
        mid = width * 2 ** i
        for j in range(n):
            layers.append(Bottleneck(cin, mid, 2 if j == 0 and i > 0 else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*layers)


def _inputs(name: str, scale: str, calls: int, device: str, seed: int):
    import random

    import torch

    rng = random.Random(seed)
    cfg = _configs(scale)
    out = []
    for _ in range(calls):
        if name == "resnet":
            n = rng.randint(1, 64 if scale == "standard" else 16)
            side = 224 if scale == "standard" else 64
            out.append(((n, 3, side, side), None))
        elif name == "bert_train":
            lengths = [rng.randint(16, 512 if scale == "standard" else 128) for _ in range(cfg["batch"])]
            out.append(((cfg["batch"], max(lengths)), lengths))
        else:
            out.append(((cfg["batch"], rng.randint(16, 512 if scale == "standard" else 128)), None))
    return out


def _make_call(name: str, model, device: str, dtype):
    import torch

    if name == "bert_train":
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step(compiled, shape, lengths):
            g = torch.Generator().manual_seed(shape[1])
            ids = torch.randint(0, 30522, shape, generator=g).to(device)
            mask = torch.zeros(shape, dtype=torch.long)
            for i, n in enumerate(lengths):
                mask[i, :n] = 1
            labels = torch.randint(0, 2, (shape[0],), generator=g).to(device)
            out = compiled(input_ids=ids, attention_mask=mask.to(device), labels=labels)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return out.logits.detach()
        return step

    def infer(compiled, shape, lengths):
        g = torch.Generator().manual_seed(shape[0] * 1000 + shape[1])
        if name == "resnet":
            x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
        else:
            x = torch.randint(0, 30522 if name == "bert" else 50257, shape, generator=g).to(device)
        with torch.no_grad():
            out = compiled(x)
        return out[0] if isinstance(out, tuple) else (out.last_hidden_state if hasattr(out, "last_hidden_state")
                                                       else getattr(out, "logits", out))
    return infer


def _compile(backend: str, model, mode):
    import torch

    if backend == "eager":
        return model
    if backend.startswith("torch"):
        torch._dynamo.config.cache_size_limit = 64
        return torch.compile(model, mode=mode, dynamic=True if backend == "torch_dynamic" else None)
    import kiln

    if backend == "kiln_static":
        return kiln.compile(model, mode=mode, dynamic=False, options={"recompile_limit": 1000})
    return kiln.compile(model, mode=mode, dynamic=True if backend == "kiln_dynamic" else None)


def _compiles(backend: str, compiled) -> int:
    if backend == "eager":
        return 0
    if backend.startswith("torch"):
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    from kiln.api import config_of

    return sum(1 for r in config_of(compiled).compiler.records if r.graph is not None)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads) if args.threads else None
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    model = _make_model(args.models, args.scale, args.device, dtype)
    inputs = _inputs(args.models, args.scale, args.calls, args.device, args.seed)
    call = _make_call(args.models, model, args.device, dtype)
    reference = None
    if args.backend != "eager" and args.models != "bert_train":
        reference = [call(model, shape, lengths).float().cpu() for shape, lengths in inputs]
    compiled = _compile(args.backend, model, args.mode)
    first, ok = [], True
    for i, (shape, lengths) in enumerate(inputs):
        _sync(args.device)
        t = time.perf_counter()
        out = call(compiled, shape, lengths)
        _sync(args.device)
        first.append(time.perf_counter() - t)
        if reference is not None:  # error relative to the output's scale (bf16 logits reach ~1e2)
            tol = 1e-3 if dtype is torch.float32 else 3e-2
            got, ref = out.float().cpu(), reference[i]
            if got.shape != ref.shape or (got - ref).abs().max() > tol * max(1.0, ref.abs().max().item()):
                ok = False
    compiles = _compiles(args.backend, compiled)
    second = _timed_pass(call, compiled, inputs, args.device)
    extra = [a - b for a, b in zip(first, second)]
    detail = {}
    if args.per_call:  # a third pass, and what compiled after the first pass: is the second pass steady?
        third = _timed_pass(call, compiled, inputs, args.device)
        detail["per_call"] = [[list(s), round(a * 1e3, 2), round(b * 1e3, 2), round(c * 1e3, 2)]
                              for (s, _), a, b, c in zip(inputs, first, second, third)]
        detail["third_ms"] = round(statistics.mean(third) * 1000, 3)
        if args.backend.startswith("kiln"):
            import kiln

            detail["kiln_stats"] = {k: getattr(kiln.stats, k) for k in (
                "kernel_compiles", "kernel_cache_hits", "cudagraph_recordings", "aten_fallbacks", "speed_choices")}
    return detail | {"model": args.models, "backend": args.backend, "device": args.device, "mode": args.mode,
            "compiles": compiles, "compile_s": round(sum(e for e in extra if e > 0), 3),
            "steady_ms": round(statistics.mean(second) * 1000, 3), "wall_s": round(sum(first), 3),
            # (the mean counts one-off costs that land in the second pass: a static graph's speed race on
            # its second call, a recurring shape's CUDA-graph race on its third; the median does not)
            "steady_median_ms": round(statistics.median(second) * 1000, 3),
            "ok": ok, "calls": len(inputs),
            "recompiles_after_sweep": _compiles(args.backend, compiled) - compiles,
            "cudagraph_record_ms": _record_ms(args.backend),
            "why": _why(args.backend)}


def _timed_pass(call, compiled, inputs, device: str) -> list[float]:
    """Seconds of each call of one pass over ``inputs`` (synchronized)."""
    times = []
    for shape, lengths in inputs:
        _sync(device)
        t = time.perf_counter()
        call(compiled, shape, lengths)
        _sync(device)
        times.append(time.perf_counter() - t)
    return times


def _record_ms(backend: str):
    """kiln with CUDA graphs: mean time to record one new shape (ms), and how many were recorded."""
    if not backend.startswith("kiln"):
        return None
    import kiln

    n = kiln.stats.cudagraph_recordings
    return [round(1000 * kiln.stats.seconds["cudagraph_record"] / n, 2), n] if n else None


def _why(backend: str) -> list:
    """kiln: what made it compile again (the failing guards) and why sizes became static, if ever."""
    if not backend.startswith("kiln"):
        return []
    import kiln

    return [r[:160] for r in kiln.stats.recompilations] + [f"static: {r[:160]}" for r in kiln.stats.dynamic_fallbacks]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--backend", default=None, help=argparse.SUPPRESS)  # worker mode
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16 (GPU default)")
    ap.add_argument("--scale", default=None, help="small (CPU default) or standard (GPU default)")
    ap.add_argument("--mode", default=None, help="e.g. reduce-overhead")
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--json", default=None)
    ap.add_argument("--per-call", action="store_true",
                    help="also a third pass, and each call's time in all three passes (to see warm-up)")
    args = ap.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    args.scale = args.scale or ("standard" if args.device == "cuda" else "small")
    if args.backend:  # one (model, backend) in this process
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return 0
    rows = []
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            cmd = [sys.executable, os.path.abspath(__file__), "--models", model, "--backend", backend,
                   "--device", args.device, "--dtype", args.dtype, "--scale", args.scale, "--calls", str(args.calls),
                   "--seed", str(args.seed), "--threads", str(args.threads)] + (["--per-call"] if args.per_call else []) + (["--mode", args.mode] if args.mode else [])
            paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                found = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
                row = json.loads(found[-1][7:]) if found else {"model": model, "backend": backend,
                                                                "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
            except subprocess.TimeoutExpired:
                row = {"model": model, "backend": backend, "error": f"timeout after {args.timeout} s"}
            rows.append(row)
            _print_row(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


def _print_row(row: dict) -> None:
    if "error" in row:
        print(f"{row['model']:<11} {row['backend']:<14} ERROR {row['error']}", flush=True)
        return
    print(f"{row['model']:<11} {row['backend']:<14} compiles {row['compiles']:>3}  compile {row['compile_s']:>8.2f} s  "
          f"steady {row['steady_ms']:>9.2f} ms (median {row.get('steady_median_ms', float('nan')):.2f})  wall {row['wall_s']:>8.2f} s  {'ok' if row['ok'] else 'MISMATCH'}"
          + (f"  (CUDA graph recording {row['cudagraph_record_ms'][0]} ms per shape, {row['cudagraph_record_ms'][1]} shapes)"
             if row.get("cudagraph_record_ms") else ""), flush=True)
    for shape, a, b, c in row.get("per_call", []):
        print(f"{'':27}{str(shape):<16} first {a:>9.2f} ms  second {b:>8.2f} ms  third {c:>8.2f} ms", flush=True)
    if "kiln_stats" in row:
        print(f"{'':27}third pass {row['third_ms']} ms/call; {row['kiln_stats']}", flush=True)
    for why in row.get("why", [])[:6]:
        print(f"{'':27}{why}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
