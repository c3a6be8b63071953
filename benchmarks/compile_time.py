"""Compile time per model: first call cold and warm, ms/call of calls 2..20, and kiln's time by stage.

    python benchmarks/compile_time.py                 # CUDA if there is a GPU (bf16, full-size models)
    python benchmarks/compile_time.py --device cpu    # CPU, small configs and inputs (runs on 2 cores)
    python benchmarks/compile_time.py --models hf_bert,hf_gpt2 --compilers eager,kiln --json out.json
    # warm start on the CPU at standard sizes (float32, batch 1, sequence 128), the import alone, 3 warm runs,
    # and a cProfile of the first warm process per model:
    python benchmarks/compile_time.py --device cpu --full --batch 1 --seq 128 --models hf_gpt2,hf_bert \
        --compilers import,eager,kiln --warm-runs 3 --profile /tmp/kiln-prof
    # training steps (bf16 autocast, AdamW) at train.py's standard configs; kiln after torch.compile in one process:
    python benchmarks/compile_time.py --training
    python benchmarks/compile_time.py --after-torch --compilers kiln

Each (model, compiler, phase) runs in a process of its own. "cold": empty cache directories (kiln's
KILN_CACHE_DIR, torch.compile's TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR: a fresh temporary
directory per model and compiler); "warm": a second process with the same directories. The first
call is timed from the compile call (``kiln.compile`` / ``torch.compile``, with the import of the
compiler) to the result; the compilers' processes make one eager call of the model first, so that
CUDA/cuBLAS/cuDNN start-up is not charged to them; "eager" is the eager model's first call in a fresh
process (start-up included). Calls 2..20 are timed one by one (synchronized): the median is
steady state, and call 2 and 3 show how soon it is reached. kiln's per-stage seconds are
``kiln.stats.stages`` (exclusive; docs/caching.md lists the stages). The "import" compiler is
``import kiln`` alone in a fresh process (after ``import torch``), with whether it imported sympy;
kiln rows say whether sympy was imported by the end of the first call.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("hf_bert", "hf_gpt2", "llama_block", "timm_resnet50")  # and "torch_block" (plain PyTorch)
COMPILERS = ("eager", "kiln", "torch.compile")  # and "import" (``import kiln`` alone)


def build(name: str, device: str, small: bool, shape: tuple = (None, None)):
    """(model, args) on ``device``; raises ImportError where the model's package is missing. ``shape``:
    (batch, sequence) overriding the defaults of the HF models where not None."""
    import torch

    torch.manual_seed(0)
    if name.startswith("hf_"):
        import transformers

        batch, seq = (2, 64) if small else ((16, 256) if name == "hf_bert" else (8, 512))
        batch, seq = shape[0] or batch, shape[1] or seq
        layers = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=512) if small else {}
        if name == "hf_bert":
            cfg = transformers.BertConfig(**layers)
            model = transformers.BertModel(cfg)
        else:
            small_gpt = dict(n_layer=2, n_embd=128, n_head=4) if small else {}
            cfg = transformers.GPT2Config(**small_gpt)
            model = transformers.GPT2Model(cfg)
        args = (torch.randint(0, cfg.vocab_size, (batch, seq)),)
    elif name == "llama_block":
        import transformers

        width, layers = (128, 2) if small else (1024, 8)
        cfg = transformers.LlamaConfig(hidden_size=width, intermediate_size=width * 11 // 4, num_hidden_layers=layers,
                                       num_attention_heads=max(4, width // 64), num_key_value_heads=max(1, width // 256),
                                       vocab_size=32000)
        model = transformers.LlamaModel(cfg)
        args = (torch.randint(0, cfg.vocab_size, (2, 64) if small else (8, 512)),)
    elif name == "torch_block":  # plain PyTorch (no transformers: nothing imports sympy or torch._dynamo first)
        width, layers, (batch, seq) = (128, 2, (2, 64)) if small else (768, 12, (1, 128))
        batch, seq = shape[0] or batch, shape[1] or seq
        model = torch.nn.Sequential(*[_Block(width) for _ in range(layers)])
        args = (torch.randn(batch, seq, width),)
    elif name == "timm_resnet50":
        import timm

        model = timm.create_model("resnet50", pretrained=False)
        args = (torch.randn(2, 3, 64, 64) if small else torch.randn(32, 3, 224, 224),)
    else:
        raise ValueError(f"unknown model {name}")
    model = model.eval().to(device)
    if device == "cuda":
        model = model.to(torch.bfloat16)
        args = tuple(a.to(device, torch.bfloat16) if a.is_floating_point() else a.to(device) for a in args)
    return model, args


def build_training(name: str, device: str, small: bool):
    """(model in train mode, args, kwargs, loss function) for a training step: the configs of
    ``benchmarks/train.py --size standard`` (HF BERT-base masked LM 16x256, GPT-2 124M LM head 8x512 with
    its 50257-word vocabulary, the Llama-style causal LM 8x512, timm ResNet-50 batch 32), small ones with
    ``small``."""
    import torch

    torch.manual_seed(0)
    if name.startswith("hf_") or name == "llama_block":
        import transformers

        batch, seq = (2, 64) if small else ((16, 256) if name == "hf_bert" else (8, 512))
        tiny = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=512)
        if name == "hf_bert":
            cfg = transformers.BertConfig(**(tiny if small else {}))
            model = transformers.BertForMaskedLM(cfg)
        elif name == "hf_gpt2":
            cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0,
                                          **(dict(n_layer=2, n_embd=128, n_head=4) if small else {}))
            model = transformers.GPT2LMHeadModel(cfg)
        else:
            width, layers = (128, 2) if small else (1024, 8)
            cfg = transformers.LlamaConfig(hidden_size=width, intermediate_size=width * 11 // 4, num_hidden_layers=layers,
                                           num_attention_heads=max(4, width // 64),
                                           num_key_value_heads=max(1, width // 256), vocab_size=32000)
            model = transformers.LlamaForCausalLM(cfg)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
        kwargs = dict(input_ids=ids) if name == "hf_bert" else dict(input_ids=ids, labels=ids)

        def loss(out):
            if getattr(out, "loss", None) is not None:
                return out.loss
            return torch.nn.functional.cross_entropy(out.logits.float().flatten(0, 1), ids.flatten())
        return model.to(device).train(), (), kwargs, loss
    if name == "timm_resnet50":
        import timm

        model = timm.create_model("resnet50", pretrained=False)
        args = (torch.randn(2, 3, 64, 64, device=device) if small else torch.randn(32, 3, 224, 224, device=device),)
        return model.to(device).train(), args, {}, lambda out: out.float().square().mean()
    if name == "torch_block":
        model, args = build(name, "cpu", small)
        return model.to(device).train(), tuple(a.to(device) for a in args), {}, lambda out: out.float().square().mean()
    raise ValueError(f"unknown model {name}")


class _TrainStep:
    """One training step as users write it: zero_grad, forward (under bf16 autocast on the GPU), loss,
    backward, AdamW step. ``runner`` is the model or its compiled form."""

    def __init__(self, model, runner, args, kwargs, loss, device):
        import torch

        self.runner, self.args, self.kwargs, self.loss, self.device = runner, args, kwargs, loss, device
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def __call__(self):
        import torch

        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.device == "cuda"):
            loss = self.loss(self.runner(*self.args, **self.kwargs))
        loss.backward()
        self.opt.step()
        return loss.detach()


class _Block:
    """A pre-norm transformer block in plain PyTorch (made a Module subclass at first use: torch is
    imported by the child processes only)."""

    def __new__(cls, width: int):
        import torch

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
                self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
                self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                               torch.nn.Linear(4 * width, width))
                self.heads = max(1, width // 64)

            def forward(self, x):
                b, t, c = x.shape
                q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
                a = torch.softmax(q @ k.transpose(-1, -2) * (c // self.heads) ** -0.5, dim=-1) @ v
                x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
                return x + self.mlp(self.ln2(x))

        return Block()


def child_import() -> dict:
    """``import kiln`` alone (torch imported before: not kiln's time)."""
    import torch  # noqa: F401

    t0 = time.perf_counter()
    import kiln  # noqa: F401

    return {"first_s": round(time.perf_counter() - t0, 3), "calls_ms": [], "sympy": "sympy" in sys.modules,
            "modules": len([m for m in sys.modules if m.startswith("kiln")])}


def child(name: str, compiler: str, device: str, small: bool, calls: int, shape: tuple = (None, None),
          profile: str | None = None, training: bool = False, after_torch: bool = False) -> dict:
    """One measurement in this process: first-call seconds, then each later call's milliseconds. With
    ``profile`` (a file name), the first call runs under cProfile, written there. With ``training`` a
    call is a training step (``_TrainStep``). With ``after_torch``, torch.compile compiles and runs a copy
    of the model in this process first (its workers stay alive), as in a side-by-side benchmark."""
    import contextlib
    import copy

    import torch

    if compiler == "import":
        return child_import()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    if training:
        model, args, kwargs, loss = build_training(name, device, small)
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

        def make_call(runner, owner):
            return _TrainStep(owner, runner, args, kwargs, loss, device)
    else:
        model, args = build(name, device, small, shape)
        kwargs = {}

        def make_call(runner, owner):
            return lambda: runner(*args)

    out = {}
    if after_torch and compiler != "torch.compile":
        other = copy.deepcopy(model)
        t0 = time.perf_counter()
        with contextlib.nullcontext() if training else torch.no_grad():
            make_call(torch.compile(other), other)()
        sync()
        out["torch_compile_first_s"] = round(time.perf_counter() - t0, 3)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    with contextlib.nullcontext() if training else torch.no_grad():
        if compiler != "eager":
            if training:  # start-up of the device and its libraries (forward and backward): not the compiler's time
                loss(model(*args, **kwargs)).backward()
                model.zero_grad(set_to_none=True)
            else:
                model(*args)
            sync()
        if profiler is not None:
            profiler.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        if compiler == "kiln":
            import kiln

            fn = make_call(kiln.compile(model), model)
        elif compiler == "torch.compile":
            fn = make_call(torch.compile(model), model)
        else:
            fn = make_call(model, model)
        fn()
        sync()
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        later = []
        for _ in range(calls - 1):
            t = time.perf_counter()
            fn()
            sync()
            later.append(1000 * (time.perf_counter() - t))
    out.update({"first_s": round(first, 3), "first_cpu_s": round(first_cpu, 3),
                "calls_ms": [round(v, 3) for v in later]})
    if compiler == "kiln":
        import kiln

        out["stages_s"] = {k: round(v, 4) for k, v in kiln.stats.stages.items()}
        out["warm_cache"] = dict(kiln.stats.warm_cache)
        out["graphs"] = kiln.stats.graphs
        out["triton_worker_seconds"] = {k: round(v, 3) for k, v in kiln.stats.triton_worker_seconds.items()}
        out["triton_slowest_builds"] = list(kiln.stats.triton_slowest_builds)
        out["sympy"] = "sympy" in sys.modules
    return out


def run(name: str, compiler: str, phase: str, cache: str, args, profile: str | None = None) -> dict:
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(cache, "kiln"), KILN_WARM_CACHE="1",
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--compilers", compiler,
           "--device", args.device, "--calls", str(args.calls)] + (["--small"] if args.small else [])
    cmd += ["--full"] if args.full else []
    cmd += [f"--{k}={getattr(args, k)}" for k in ("batch", "seq") if getattr(args, k)]
    cmd += ["--profile", profile] if profile else []
    cmd += ["--training"] if args.training else []
    cmd += ["--after-torch"] if args.after_torch else []
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        tail = (done.stderr or done.stdout)[-400:]
        return {"error": "skipped (not installed)" if "ModuleNotFoundError" in tail else tail}
    return json.loads(lines[-1][7:])


def summary(r: dict) -> str:
    if "error" in r:
        return r["error"].strip().splitlines()[-1][:60] if r["error"].strip() else "error"
    later = r["calls_ms"]
    med = statistics.median(later) if later else float("nan")
    head = " ".join(f"{v:.2f}" for v in later[:2])
    sympy = "" if "sympy" not in r else f"  sympy imported: {'yes' if r['sympy'] else 'no'}"
    before = f"  (torch.compile first: {r['torch_compile_first_s']:.2f} s)" if "torch_compile_first_s" in r else ""
    return f"{r['first_s']:7.2f} s  {med:8.2f} ms  (calls 2,3: {head}){sympy}{before}"


def print_profile(path: str, top: int = 25) -> None:
    import pstats

    print(f"{'':<35} cProfile of the first call ({path}), by cumulative time:")
    pstats.Stats(path).sort_stats("cumulative").print_stats(top)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, choices=("cpu", "cuda"))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--compilers", default=",".join(COMPILERS))
    p.add_argument("--small", action="store_true", help="small configs and inputs (the default on CPU)")
    p.add_argument("--full", action="store_true", help="standard configs on the CPU too")
    p.add_argument("--batch", type=int, default=None, help="batch size of the HF models' input")
    p.add_argument("--seq", type=int, default=None, help="sequence length of the HF models' input")
    p.add_argument("--warm-runs", type=int, default=1, help="warm processes per model and compiler")
    p.add_argument("--profile", default=None, help="a folder: cProfile of the first call of one run (--profile-phase)")
    p.add_argument("--profile-phase", default="warm", choices=("cold", "warm"), help="the run --profile profiles")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--json", default=None)
    p.add_argument("--training", action="store_true",
                   help="a call is a training step (forward, loss, backward, AdamW; bf16 autocast on the GPU)")
    p.add_argument("--after-torch", action="store_true",
                   help="kiln's (and eager's) process first compiles and runs the model with torch.compile")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.small = (args.small or args.device == "cpu") and not args.full
    if args.child:
        result = child(args.child, args.compilers, args.device, args.small, args.calls, (args.batch, args.seq),
                       args.profile, args.training, args.after_torch)
        print("RESULT " + json.dumps(result))
        return 0
    rows = []
    what = "training step" if args.training else "call"
    print(f"device {args.device}{' (small configs)' if args.small else ''}; first {what} (s), median ms/{what} of "
          f"{what}s 2..{args.calls}{'; torch.compile ran first in the process' if args.after_torch else ''}")
    for name in args.models.split(","):
        for compiler in args.compilers.split(","):
            cache = tempfile.mkdtemp(prefix="kiln-compile-time-")
            try:
                phases = ("cold",) if compiler in ("eager", "import") else ("cold",) + ("warm",) * args.warm_runs
                for i, phase in enumerate(phases):
                    profile = None
                    if args.profile and phase == args.profile_phase and i == (1 if phase == "warm" else 0):
                        os.makedirs(args.profile, exist_ok=True)
                        profile = os.path.join(args.profile, f"{name}-{compiler}-{phase}.prof")
                    r = run(name, compiler, phase, cache, args, profile)
                    rows.append({"model": name, "compiler": compiler, "phase": phase, **r})
                    print(f"{name:<14} {compiler:<14} {phase:<5} {summary(r)}", flush=True)
                    if profile and "error" not in r:
                        print_profile(profile)
                    if "stages_s" in r:
                        stages = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["stages_s"].items(), key=lambda kv: -kv[1]))
                        print(f"{'':<35} kiln stages (s): {stages}; warm cache {r.get('warm_cache')}", flush=True)
                        if r.get("triton_worker_seconds"):
                            print(f"{'':<35} Triton worker jobs, summed (s): {r['triton_worker_seconds']}", flush=True)
                        for build in r.get("triton_slowest_builds", [])[:3]:
                            print(f"{'':<35} slow build: {build}", flush=True)
                    if "error" in r and phase == "cold":
                        break
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "small": args.small, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
