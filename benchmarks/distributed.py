"""Distributed training: eager vs torch.compile vs kiln.compile under DDP and FSDP2, on several ranks.

For each model and each mode, every rank trains the same model on its own batches (AdamW, bf16
autocast for DDP, bf16 parameters with fp32 gradient reduction for FSDP2) and rank 0 reports:

  step ms      median time of a training step after the warm-up
  peak MB      torch.cuda.max_memory_allocated over the timed steps (CUDA only)
  hidden       the share of the communication kernels' time (NCCL all-reduce / reduce-scatter /
               all-gather) that overlaps compute kernels on the GPU, from a torch.profiler trace of
               two steps; "n/a" on the CPU (gloo runs its collectives on threads, not kernels)
  speedup      eager step time / this mode's step time (eager of the same kind: ddp or fsdp)
  1st step s   the first step (it compiles); warmup s: all --warmup steps
  loss         the loss of the last timed step; max |dloss|: the largest difference between this
               mode's loss and eager's at the same step (same seed and batches), over every step
For kiln modes, a second line gives what kiln did in the warm-up on rank 0: graphs, DDP pieces,
recompilations and fallbacks, and the seconds of each compile stage (kiln.stats.stages).

Modes: ddp-eager, ddp-torch (torch.compile(DDP(m)): TorchDynamo's DDPOptimizer splits at buckets),
ddp-kiln (kiln.compile(DDP(m)): kiln splits at buckets, docs/distributed.md), fsdp-eager, fsdp-kiln
and fsdp-torch (fully_shard per block and on the root, each block compiled).

    python benchmarks/distributed.py --time-limit 480 --json dist.json   # 2 GPUs: both models, all modes
    python benchmarks/distributed.py --models gpt2 --json gpt2.json      # one model at a time
    python benchmarks/distributed.py --models llama --modes ddp-eager,ddp-kiln --steps 10
    python benchmarks/distributed.py --cpu                     # tiny configs, 2 CPU processes, gloo
    python benchmarks/distributed.py --cpu --models gpt2 --modes ddp-kiln --layers 12 --bucket-cap-mb 0.18 \
        --profile-warmup prof/                                  # where the first step's time goes

--time-limit S skips the modes not started S seconds after the start (and writes the JSON after every
row), so a command with a hard limit still reports what it measured.

Model definitions are plain PyTorch (no transformers): GPT-2 small (12 layers, 768 wide, 50257-word
tied LM head) and a Llama-style model (RMSNorm, rotary embeddings, SwiGLU; 24 layers, 1024 wide:
about 370M parameters).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MODES = ("ddp-eager", "ddp-torch", "ddp-kiln", "fsdp-eager", "fsdp-kiln", "fsdp-torch")  # (fsdp-torch last: the
# one a --time-limit may skip)


# models -------------------------------------------------------------------------------------------
class GPT2Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab=50257, dim=768, layers=12, heads=12, max_seq=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(max_seq, dim)
        self.blocks = nn.ModuleList(GPT2Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (w(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab=32000, dim=1024, layers=24, heads=16, hidden=2816, max_seq=2048):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(LlamaBlock(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)
        head_dim = dim // heads
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_seq).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t].to(self.embed.weight.dtype), self.sin[:t].to(self.embed.weight.dtype)
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


def model_configs(cpu: bool, layers: int = 0) -> dict:
    """name -> (make model, batch, sequence, vocabulary); ``layers`` > 0 overrides the depth."""
    deep = {"layers": layers} if layers > 0 else {}
    if cpu:  # tiny: checks that every mode runs
        return {
            "gpt2": (lambda: GPT2(**{"vocab": 512, "dim": 64, "layers": 2, "heads": 4, "max_seq": 64, **deep}),
                     2, 32, 512),
            "llama": (lambda: Llama(**{"vocab": 512, "dim": 64, "layers": 2, "heads": 4, "hidden": 128, "max_seq": 64,
                                       **deep}), 2, 32, 512),
        }
    return {
        "gpt2": (lambda: GPT2(**deep), 8, 1024, 50257),  # GPT-2 small, 124M
        "llama": (lambda: Llama(**deep), 4, 1024, 32000),  # Llama-style, ~370M
    }


# wrapping -----------------------------------------------------------------------------------------
def wrap(mode: str, model: nn.Module, device, args):
    from torch.nn.parallel import DistributedDataParallel as DDP

    import kiln

    kind, how = mode.split("-")
    if kind == "ddp":
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=args.bucket_cap_mb)
        if how == "torch":
            return torch.compile(ddp)
        return kiln.compile(ddp, backend=args.kiln_backend) if how == "kiln" else ddp
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, block in enumerate(model.blocks):
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for i, block in enumerate(model.blocks):
        if how == "torch":
            model.blocks[i] = torch.compile(block)
        elif how == "kiln":
            model.blocks[i] = kiln.compile(block, backend=args.kiln_backend)
    return model


# measuring ----------------------------------------------------------------------------------------
def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def make_step(runner, params, device, vocab, batch, seq, autocast: bool):
    opt = torch.optim.AdamW(params, lr=1e-4)
    g = torch.Generator(device=device).manual_seed(1000 + dist.get_rank())

    def step():
        ids = torch.randint(0, vocab, (batch, seq), device=device, generator=g)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = runner(ids)
        loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())  # next token
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def comm_share_hidden(prof) -> float | None:
    """Share of communication kernel time that overlaps compute kernels (CUDA trace); None without any."""
    comm, compute = [], []
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        interval = (event.time_range.start, event.time_range.end)
        name = event.name.lower()
        (comm if "nccl" in name or "allreduce" in name or "reducescatter" in name or "allgather" in name
         else compute).append(interval)
    if not comm:
        return None
    compute.sort()
    merged = []
    for start, end in compute:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    total = sum(end - start for start, end in comm)
    hidden = 0
    for start, end in comm:
        for m_start, m_end in merged:
            hidden += max(0, min(end, m_end) - max(start, m_start))
    return hidden / total if total else None


def measure(mode, name, args, device) -> dict:
    make, batch, seq, vocab = model_configs(args.cpu, args.layers)[name]
    import kiln

    kiln.reset()
    kiln.stats.reset()
    torch.manual_seed(0)
    model = make().to(device)
    runner = wrap(mode, model, device, args)
    step = make_step(runner, list(model.parameters()), device, vocab, batch, seq, autocast=mode.startswith("ddp"))
    losses = []
    start = time.perf_counter()
    with warmup_profile(args, mode, name):
        losses.append(step().item())  # the first step compiles
        sync(device)
    first = time.perf_counter() - start
    for _ in range(args.warmup - 1):
        losses.append(step().item())
    sync(device)
    warmup = time.perf_counter() - start
    compile_report = kiln_report() if mode.endswith("-kiln") else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.steps):
        sync(device)
        t0 = time.perf_counter()
        loss = step()
        sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    hidden = profile_overlap(step, device, timeline_path(args, name, mode)) \
        if device.type == "cuda" and not args.no_profile else None
    del runner, model, step
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"model": name, "mode": mode, "step_ms": 1000 * statistics.median(times), "first_step_s": first,
            "warmup_s": warmup, "peak_mb": None if peak is None else peak / 2**20, "hidden": hidden,
            "loss": losses[-1], "losses": losses, "kiln": compile_report}


def kiln_report() -> dict:
    """What kiln did during the warm-up (rank 0's): graphs, DDP pieces, recompilations, fallbacks,
    and the seconds per compile stage (kiln.stats.stages: exclusive, they add up to kiln's time)."""
    import kiln

    st = kiln.stats
    return {"graphs": st.graphs, "ddp_pieces": st.ddp_pieces, "recompilations": dict(st.recompilations),
            "eager_fallbacks": dict(st.eager_fallbacks), "graph_breaks": dict(st.graph_breaks),
            "warm_cache": dict(st.warm_cache), "tuning": dict(st.tuning), "stages": dict(st.stages), "stages_text": st.format_stages()}


def profile_overlap(step, device, timeline: str = "") -> float | None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        sync(device)
    if timeline:
        write_timeline(prof, timeline)
    return comm_share_hidden(prof)


def timeline_path(args, name, mode) -> str:
    if not args.timeline or dist.get_rank() != 0:
        return ""
    os.makedirs(args.timeline, exist_ok=True)
    return os.path.join(args.timeline, f"{name}-{mode}.json")


def write_timeline(prof, path: str) -> None:
    """The profiled steps' GPU kernels as [name, start us, duration us, stream], in start order
    (``--timeline DIR``): where each collective ran against the compute around it."""
    rows = []
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        rows.append([event.name[:120], event.time_range.start, event.time_range.end - event.time_range.start,
                     getattr(event, "device_resource_id", None)])
    rows.sort(key=lambda r: r[1])
    with open(path, "w") as f:
        json.dump(rows, f)


@contextlib.contextmanager
def warmup_profile(args, mode, name):
    """cProfile of rank 0's first step (``--profile-warmup DIR``): DIR/<model>-<mode>.prof, and the top
    functions by cumulative time printed."""
    if not args.profile_warmup or dist.get_rank() != 0:
        yield
        return
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        os.makedirs(args.profile_warmup, exist_ok=True)
        path = os.path.join(args.profile_warmup, f"{name}-{mode}.prof")
        profiler.dump_stats(path)
        print(f"--- {name} {mode}: first step profile ({path}), top 25 by cumulative time", flush=True)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def worker(rank, world, port, args):
    device = torch.device("cpu") if args.cpu else torch.device("cuda", rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if args.cpu else "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(minutes=30))
    if args.cpu:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    rows, start = [], time.perf_counter()
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            if out_of_time(args, start, device):
                row = {"model": name, "mode": mode, "error": f"skipped: past --time-limit {args.time_limit:g} s"}
            else:
                try:
                    row = measure(mode, name, args, device)
                except Exception as exc:  # noqa: BLE001 - report and go on with the next mode
                    row = {"model": name, "mode": mode, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            rows.append(row)
            if rank == 0:
                print_row(row, rows)
                if args.json:  # after every row: a run stopped by a time limit keeps what it measured
                    with open(args.json, "w") as f:
                        json.dump({"world_size": world, "device": str(device), "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def out_of_time(args, start, device) -> bool:
    """Whether rank 0 is past --time-limit (all ranks take rank 0's answer, so they stay in step)."""
    if not args.time_limit:
        return False
    late = torch.tensor([float(time.perf_counter() - start > args.time_limit)], device=device)
    dist.broadcast(late, 0)
    return bool(late.item())


def eager_row(row, rows):
    kind = row["mode"].split("-")[0]
    return next((r for r in rows if r["model"] == row["model"] and r["mode"] == kind + "-eager" and "error" not in r),
                None)


def print_row(row, rows):
    if len(rows) == 1:
        print(f"{'model':8s} {'mode':11s} {'step ms':>9s} {'speedup':>8s} {'peak MB':>9s} {'hidden':>7s} "
              f"{'1st step s':>10s} {'warmup s':>9s} {'loss':>8s} {'max |dloss|':>11s}", flush=True)
    if "error" in row:
        print(f"{row['model']:8s} {row['mode']:11s} error: {row['error']}", flush=True)
        return
    base = eager_row(row, rows)
    speedup = f"{base['step_ms'] / row['step_ms']:.2f}x" if base else "-"
    peak = "n/a" if row["peak_mb"] is None else f"{row['peak_mb']:.0f}"
    hidden = "n/a" if row["hidden"] is None else f"{100 * row['hidden']:.0f}%"
    drift = "-" if base is None else f"{max(abs(a - b) for a, b in zip(row['losses'], base['losses'])):.2e}"
    print(f"{row['model']:8s} {row['mode']:11s} {row['step_ms']:9.1f} {speedup:>8s} {peak:>9s} {hidden:>7s} "
          f"{row['first_step_s']:10.1f} {row['warmup_s']:9.1f} {row['loss']:8.4f} {drift:>11s}", flush=True)
    report = row.get("kiln")
    if report:
        extra = {k: report[k] for k in ("warm_cache", "tuning", "recompilations", "eager_fallbacks", "graph_breaks") if report[k]}
        print(f"  kiln warm-up: {report['graphs']} graph(s), {report['ddp_pieces']} DDP piece(s)"
              f"{', ' + str(extra) if extra else ''}; seconds per stage (rank 0):", flush=True)
        print("\n".join("  " + line for line in report["stages_text"].splitlines()), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--kiln-backend", default="kiln")
    parser.add_argument("--cpu", action="store_true", help="tiny configs on CPU processes with gloo (a check)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profile (no 'hidden' column)")
    parser.add_argument("--json", default="")
    parser.add_argument("--layers", type=int, default=0, help="override the models' depth (0: theirs)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (its default: 25)")
    parser.add_argument("--time-limit", type=float, default=0.0,
                        help="seconds: modes not started by then are skipped (0: no limit)")
    parser.add_argument("--timeline", default="", metavar="DIR",
                        help="rank 0 writes the profiled steps' GPU kernels to DIR/<model>-<mode>.json")
    parser.add_argument("--profile-warmup", default="", metavar="DIR",
                        help="cProfile rank 0's first step of each mode into DIR/<model>-<mode>.prof")
    args = parser.parse_args(argv)
    if args.warmup < 1:
        parser.error("--warmup must be at least 1 (the first step compiles)")
    if not args.cpu and torch.cuda.device_count() < args.world_size:
        print(f"needs {args.world_size} CUDA devices (found {torch.cuda.device_count()}); use --cpu", file=sys.stderr)
        return 1
    torch.multiprocessing.spawn(worker, args=(args.world_size, free_port(), args), nprocs=args.world_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
