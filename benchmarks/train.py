"""Training-step time and memory: eager vs torch.compile vs kiln.compile, in one run.

A step is zero_grad, forward, loss, backward and an AdamW step. Each model is run eagerly, through
torch.compile(backend=--torch-backend) and through kiln.compile(backend=--backend); the first steps
compile (their time is reported as "first"), then the median of --steps timed steps is taken.

Memory:
  saved   bytes of the tensors autograd keeps for backward after the forward (measured with
          torch.autograd.graph.saved_tensors_hooks; unique storages, parameters and inputs excluded),
          which is the memory a compiler's partition decides; comparable on CPU and GPU.
  peak    bytes allocated at the peak of a step above what was allocated before it: on CUDA
          torch.cuda.max_memory_allocated, on the CPU the profiler's allocation events (a separate,
          untimed step).

    python benchmarks/train.py                                   # all models, CPU, float32
    python benchmarks/train.py --models mlp,gpt2 --steps 5 --json train.json
    python benchmarks/train.py --device cuda --dtype bfloat16    # autocast to bfloat16 on the GPU
    python benchmarks/train.py --size base                       # BERT-base / GPT-2 small (124M) configs
    python benchmarks/train.py --device cuda --dtype bf16 --backend kiln --size standard \
        --models mlp,block,resnet18,resnet50,bert,gpt2,llama  # the configs users train (issue 19)
    python benchmarks/train.py --whole-step                      # compile the step function, optimizer included

Before timing, the first step's gradients are compared with eager's (max abs difference printed).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # cpu_models (nanoGPT)

import torch  # noqa: E402

import kiln  # noqa: E402


# models -------------------------------------------------------------------------------------------
def _small_models():
    from tests.models.test_small_models import MLP, ConvNet, TransformerBlock

    return {
        "mlp": lambda dev: (MLP(d=256, hidden=1024, out=16), (torch.randn(64, 256, device=dev),), {}),
        "convnet": lambda dev: (ConvNet(), (torch.randn(16, 3, 32, 32, device=dev),), {}),
        "block": lambda dev: (TransformerBlock(dim=128, heads=4), (torch.randn(8, 64, 128, device=dev),), {}),
    }


def _hf_models(size: str):
    import transformers

    if size == "base":  # the published BERT-base and GPT-2 small (124M) shapes
        bert = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=512)
        gpt2 = dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024)
        batch, seq = 4, 128
    else:
        bert = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=512, max_position_embeddings=128)
        gpt2 = dict(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=128)
        batch, seq = 4, 64

    def bert_model(dev):
        # the loss is taken outside the model: BertForMaskedLM builds a new CrossEntropyLoss module on
        # every call, which kiln's capture guards on (a recompile per step)
        cfg = transformers.BertConfig(**bert)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        return transformers.BertForMaskedLM(cfg), (), dict(input_ids=ids)

    def gpt2_model(dev):
        cfg = transformers.GPT2Config(**gpt2, bos_token_id=0, eos_token_id=0)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
        return transformers.GPT2LMHeadModel(cfg), (), dict(input_ids=ids, labels=ids)

    return {"bert": bert_model, "gpt2": gpt2_model}


def _standard_models():
    """--size standard: the configs users train (issue 19): an MLP, a hand-written attention block,
    torchvision ResNet-18 (batch 64) and timm ResNet-50 (batch 32) at 224x224, HF BERT-base (batch 16,
    seq 256), GPT-2 124M with its 50257-word vocabulary and a Llama-style model with grouped-query
    attention (batch 8, seq 512), and nanoGPT at GPT-2 size (12 layers, 768 wide, vocab 50304, batch 8, seq 512)."""
    import transformers

    from tests.models.test_small_models import MLP, TransformerBlock

    def image(name, batch):
        def make(dev):
            if name == "resnet18":
                import torchvision

                model = torchvision.models.resnet18()
            else:
                import timm

                model = timm.create_model(name, pretrained=False)
            return model, (torch.randn(batch, 3, 224, 224, device=dev),), {}
        return make

    def lm(kind):
        def make(dev):
            if kind == "bert":
                cfg = transformers.BertConfig()
                ids = torch.randint(0, cfg.vocab_size, (16, 256), device=dev)
                return transformers.BertForMaskedLM(cfg), (), dict(input_ids=ids)
            if kind == "gpt2":
                cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0)
                model = transformers.GPT2LMHeadModel(cfg)
            else:
                cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                               num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
                model = transformers.LlamaForCausalLM(cfg)
            ids = torch.randint(0, cfg.vocab_size, (8, 512), device=dev)
            return model, (), dict(input_ids=ids, labels=ids)
        return make

    def nanogpt(dev):
        from cpu_models import NanoGPT

        ids = torch.randint(0, 50304, (8, 512), device=dev)
        model = NanoGPT(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, bias=False)
        return model, (ids, ids), {}

    return {
        "mlp": lambda dev: (MLP(d=1024, hidden=4096, out=1024), (torch.randn(256, 1024, device=dev),), {}),
        "block": lambda dev: (TransformerBlock(dim=512, heads=8), (torch.randn(16, 128, 512, device=dev),), {}),
        "resnet18": image("resnet18", 64), "resnet50": image("resnet50", 32),
        "bert": lm("bert"), "gpt2": lm("gpt2"), "llama": lm("llama"), "nanogpt": nanogpt,
    }


# measuring ----------------------------------------------------------------------------------------
def _loss(out, kwargs):
    if isinstance(out, tuple):  # nanoGPT: (logits, loss)
        return out[1]
    if getattr(out, "loss", None) is not None:
        return out.loss
    if hasattr(out, "logits"):
        logits = out.logits.float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), kwargs["input_ids"].flatten())
    return out.float().square().mean()


class Step:
    def __init__(self, model, runner, args, kwargs, device, dtype):
        wrap_step = None
        if isinstance(runner, tuple):  # --whole-step: (the model, a compiler for the whole step function)
            runner, wrap_step = runner
        self.model, self.runner, self.args, self.kwargs = model, runner, args, kwargs
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.device, self.dtype = device, dtype
        self.body = wrap_step(self._body) if wrap_step is not None else self._body

    def forward_loss(self):
        if self.dtype is None:
            return _loss(self.runner(*self.args, **self.kwargs), self.kwargs)
        with torch.autocast(self.device, dtype=self.dtype):
            return _loss(self.runner(*self.args, **self.kwargs), self.kwargs)

    def __call__(self):
        return self.body()

    def _body(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.forward_loss()
        loss.backward()
        self.opt.step()
        return loss.detach()


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_ms(fn, steps: int, device: str) -> float:
    """The median wall time of ``steps`` calls of ``fn``, in ms (the device synchronized around each)."""
    times = []
    for _ in range(steps):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def saved_bytes(step: Step) -> int:
    """Bytes autograd holds for backward after one forward (unique storages, not params/inputs)."""
    exclude = {p.untyped_storage().data_ptr() for p in step.model.parameters()}
    exclude |= {b.untyped_storage().data_ptr() for b in step.model.buffers()}
    exclude |= {t.untyped_storage().data_ptr() for t in [*step.args, *step.kwargs.values()] if isinstance(t, torch.Tensor)}
    storages = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    step.opt.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step.forward_loss()
    total = sum(storages.values())
    loss.backward()  # frees them
    return total


def _fixed_bytes(step: Step) -> int:
    """Bytes of what every runner holds alike: parameters, buffers, optimizer state and the inputs."""
    tensors = list(step.model.parameters()) + list(step.model.buffers()) + list(step.args) + list(step.kwargs.values())
    tensors += [v for state in step.opt.state.values() for v in state.values()]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda}
    return sum(storages.values())


def peak_bytes(step: Step, device: str) -> int:
    """Peak bytes allocated during one step beyond parameters, buffers, optimizer state and inputs (grads,
    activations, temporaries, and memory a runner keeps between steps: kiln's CUDA-graph pools, whose
    activations stay allocated). CUDA: the caching allocator's counters; CPU: the profiler's allocation
    events (their running total), so kiln's generated code counts too."""
    step.opt.zero_grad(set_to_none=True)
    if device == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats()
        step()
        _sync(device)
        return torch.cuda.max_memory_allocated() - _fixed_bytes(step)
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = []  # (time, bytes allocated (< 0: freed), the allocator's running total after it)
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            events.append((event.start_time_ns, event.extra_fields.alloc_size, event.extra_fields.total_allocated))
    if not events:
        return 0
    events.sort()
    # the running total also counts what earlier profiled runs allocated and left alive: start from
    # the total before this step's first allocation
    base = events[0][2] - events[0][1]
    return max(total for _, _, total in events) - base


_MODEL_CACHE: dict = {}


def make_model(make, device):
    """The same initial weights and inputs for every runner of a model."""
    key = id(make)
    if key not in _MODEL_CACHE:
        torch.manual_seed(0)
        model, args, kwargs = make(device)
        _MODEL_CACHE[key] = (model.to(device).train(), args, kwargs)
    model, args, kwargs = _MODEL_CACHE[key]
    return copy.deepcopy(model), args, kwargs


def measure(name, make, runner_factory, device, dtype, steps, warmup):
    model, args, kwargs = make_model(make, device)
    runner = runner_factory(model)
    step = Step(model, runner, args, kwargs, device, dtype)
    torch.manual_seed(0)
    _sync(device)
    start = time.perf_counter()
    if CPROFILE_FIRST and RUNNER_NAME[0] == "kiln":  # --cprofile-first: where kiln's first step goes
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(step)
        _sync(device)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(CPROFILE_FIRST)
        pstats.Stats(prof).sort_stats("tottime").print_stats(CPROFILE_FIRST)
    else:
        step()
    _sync(device)
    first = time.perf_counter() - start
    # the first step's gradients (compared with eager's; the optimizer step leaves them in place)
    grads = [p.grad.detach().float().clone() if p.grad is not None else None for p in model.parameters()]
    for _ in range(warmup):
        step()
    out = {"first_s": first, "step_ms": median_ms(step, steps, device), "saved_bytes": saved_bytes(step),
           "peak_bytes": peak_bytes(step, device)}
    if PROFILE_TOP and device == "cuda":  # --profile: where the step's GPU time goes (benchmarks/gpu_profile.py)
        from gpu_profile import report

        report(name, RUNNER_NAME[0], lambda: step(), (), iters=5, top=PROFILE_TOP)
    if CPROFILE_STEPS and RUNNER_NAME[0] != "eager":  # --cprofile-steps: where a steady step's host time goes
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(lambda: [step() for _ in range(10)])
        _sync(device)
        print(f"--- {name} / {RUNNER_NAME[0]}: 10 steady steps under cProfile")
        pstats.Stats(prof).sort_stats("tottime").print_stats(CPROFILE_STEPS)
    return out, grads


PROFILE_TOP = 0  # --profile N
CPROFILE_FIRST = 0  # --cprofile-first N
CPROFILE_STEPS = 0  # --cprofile-steps N
RUNNER_NAME = [""]


def runners(args):
    def eager(model):
        return model

    def torch_compiled(model):
        import torch._dynamo

        torch._dynamo.reset()
        if args.whole_step:
            return model, lambda fn: torch.compile(fn, backend=args.torch_backend)
        return torch.compile(model, backend=args.torch_backend)

    def kiln_compiled(model):
        kiln.reset()
        if args.whole_step:
            return model, lambda fn: kiln.compile(fn, backend=args.backend)
        return kiln.compile(model, backend=args.backend)

    return {"eager": eager, "torch.compile": torch_compiled, "kiln": kiln_compiled}


def _max_diff(a, b) -> float:
    diffs = [(x - y).abs().max().item() for x, y in zip(a, b) if x is not None and y is not None]
    return max(diffs) if diffs else 0.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,convnet,block,bert,gpt2")
    parser.add_argument("--size", choices=("tiny", "base", "standard"), default="tiny",
                        help="model configs: tiny, base (BERT-base / GPT-2 small at batch 4, seq 128), standard "
                             "(every model at the size users train it: --models mlp,block,resnet18,resnet50,"
                             "bert,gpt2,llama,nanogpt)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("fp32", "float32", "bf16", "bfloat16"), default="fp32",
                        help="bf16/bfloat16: the forward under torch.autocast(device, bfloat16)")
    parser.add_argument("--backend", default="aot_eager", help="kiln backend")
    parser.add_argument("--torch-backend", default=None, help="torch.compile backend (default: like --backend)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    parser.add_argument("--whole-step", action="store_true",
                        help="compile the whole step function (zero_grad, forward, loss, backward, optimizer "
                             "step), not only the model: kiln runs AdamW as its fused step (docs/optimizers.md)")
    parser.add_argument("--models-only", dest="whole_step", action="store_false")
    parser.add_argument("--json", default="")
    parser.add_argument("--cprofile-first", type=int, default=0, metavar="N",
                        help="run kiln's first step under cProfile and print its top N functions")
    parser.add_argument("--cprofile-steps", type=int, default=0, metavar="N",
                        help="after timing, run 10 steady steps of each compiled runner under cProfile and print "
                             "its top N functions by own time (host overhead)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="CUDA: after timing, profile 5 steps of each runner and print wall, enqueue and GPU "
                             "time per step, GPU time by kind of kernel and the top N kernels")
    args = parser.parse_args(argv)
    global PROFILE_TOP, CPROFILE_FIRST, CPROFILE_STEPS
    PROFILE_TOP, CPROFILE_FIRST, CPROFILE_STEPS = args.profile, args.cprofile_first, args.cprofile_steps
    if args.torch_backend is None:
        args.torch_backend = {"kiln": "inductor"}.get(args.backend, args.backend)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    dtype = torch.bfloat16 if args.dtype in ("bf16", "bfloat16") else None
    from kiln.capture import tensor_guard_build  # steady state: the guards' C++ library, built once per machine

    tensor_guard_build.ensure(kiln.options.default_options())
    print(f"kiln tensor guards: {'loaded' if tensor_guard_build.wait(300) else tensor_guard_build.status()}")
    makers = _standard_models() if args.size == "standard" else {**_small_models(), **_hf_models(args.size)}
    wanted = [m for m in args.models.split(",") if m]
    rows = []
    for name in wanted:
        make = makers[name]
        row = {"model": name}
        grads = {}
        for rname, factory in runners(args).items():
            RUNNER_NAME[0] = rname
            kiln.stats.reset()
            row[rname], grads[rname] = measure(name, make, factory, args.device, dtype, args.steps, args.warmup)
            if rname == "kiln":
                row["kiln"]["joint_graphs"] = kiln.stats.joint_graphs
                row["kiln"]["graphs"] = kiln.stats.graphs
                row["kiln"]["stages_s"] = {k: round(v, 2) for k, v in kiln.stats.seconds.items()}
                row["kiln"]["triton_slow_loads"] = sorted(kiln.stats.triton_slow_loads, reverse=True)
                row["kiln"]["triton_key_mismatches"] = len(kiln.stats.triton_key_mismatches)
                row["kiln"]["speed_choices"] = dict(kiln.stats.speed_choices)
        row["kiln_grad_max_diff"] = _max_diff(grads["kiln"], grads["eager"])
        row["torch_grad_max_diff"] = _max_diff(grads["torch.compile"], grads["eager"])
        rows.append(row)
        _print_row(row, header=len(rows) == 1)
        stages = sorted(row["kiln"]["stages_s"].items(), key=lambda kv: -kv[1])[:8]
        print(f"    kiln first step {row['kiln']['first_s']:.1f} s, by stage: " + ", ".join(f"{k} {v:.1f}" for k, v in stages))
        if row["kiln"]["speed_choices"]:
            print(f"    kiln speed choices: {row['kiln']['speed_choices']}")
        slow = row["kiln"]["triton_slow_loads"]
        if slow:  # precompiled kernels the parent compiled again (issue 20: seen after other models in one process)
            print(f"    {len(slow)} precompiled kernels loaded slowly ({sum(s for s, _ in slow):.1f} s): "
                  + ", ".join(f"{n} {s:.2f}" for s, n in slow[:5])
                  + f"; {row['kiln']['triton_key_mismatches']} built by workers under another cache key")
    print(f"(torch {torch.__version__}, device {args.device}, {args.dtype}, kiln backend {args.backend!r}, "
          f"torch.compile backend {args.torch_backend!r}; median of {args.steps} steps; 'x' columns: speedup over eager)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


def _mb(n) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def _print_row(row, header: bool) -> None:
    cols = ["eager", "torch.compile", "kiln"]
    if header:
        line = f"{'model':8} " + " ".join(f"{c + ' ms':>16}" for c in cols) + f" {'tc x':>6} {'kiln x':>6}"
        line += " " + " ".join(f"{c + ' saved MB':>18}" for c in cols) + f" {'kiln/eager':>10}"
        line += " " + " ".join(f"{c + ' peak MB':>17}" for c in cols)
        line += f" {'first s (tc/kiln)':>18} {'grad diff (tc/kiln)':>20} {'joint':>5}"
        print(line)
        print("-" * len(line))
    ms = [row[c]["step_ms"] for c in cols]
    saved = [row[c]["saved_bytes"] for c in cols]
    line = f"{row['model']:8} " + " ".join(f"{m:16.2f}" for m in ms)
    line += f" {ms[0] / ms[1]:6.2f} {ms[0] / ms[2]:6.2f}"
    line += " " + " ".join(f"{_mb(s):>18}" for s in saved)
    line += f" {saved[2] / max(saved[0], 1):10.2f}"
    line += " " + " ".join(f"{_mb(row[c]['peak_bytes']):>17}" for c in cols)
    line += f" {row['torch.compile']['first_s']:8.1f}/{row['kiln']['first_s']:<8.1f}"
    line += f" {row['torch_grad_max_diff']:9.1e}/{row['kiln_grad_max_diff']:<9.1e}"
    line += f" {row['kiln'].get('joint_graphs', 0):5d}"
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
