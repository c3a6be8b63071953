"""GPT-2 with its LM head (real vocabulary 50257), bf16, batch 8 x seq 512 on the GPU: eager, kiln with
16-bit GEMM padding off and on (Options.gemm_padding), torch.compile; inference and an SGD training step.
Each backend runs in a process of its own. Prints wall ms (CUDA-synchronized), GPU busy ms (profiler), the
first call and the max abs error against eager (bf16).

    python benchmarks/gpt2_lm_head.py
"""
import collections, os, subprocess, sys, time, torch
MODE = sys.argv[1] if len(sys.argv) > 1 else "driver"
def timeit(fn, n=10):
    for _ in range(3): fn()
    torch.cuda.synchronize(); s = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - s) / n * 1e3
def gpu_ms(fn, iters=5):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(iters): fn()
        torch.cuda.synchronize()
    return sum(ev.device_time for ev in p.events() if ev.device_type == torch.autograd.DeviceType.CUDA) / iters / 1e3
if MODE != "driver":
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config()
    model = transformers.GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")
    if MODE.startswith("kiln"):
        import kiln
        opts = {"gemm_padding": MODE.split(":")[1]}
        run = kiln.compile(model, options=opts)
    elif MODE == "torch.compile":
        run = torch.compile(model)
    else:
        run = model
    model.eval()
    with torch.no_grad():
        ref = model(ids).logits.float()
        t0 = time.perf_counter(); out = run(ids).logits; torch.cuda.synchronize(); first = time.perf_counter() - t0
        err = (out.float() - ref).abs().max().item()
        infer = lambda: run(ids).logits
        wall, gpu = timeit(infer), gpu_ms(infer)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    def step():
        loss = run(ids, labels=ids).loss
        loss.backward()
        opt.zero_grad(set_to_none=True)
    step(); torch.cuda.synchronize()
    twall, tgpu = timeit(step, 5), gpu_ms(step, 3)
    print(f"{MODE:22s} infer wall {wall:6.2f} ms gpu {gpu:6.2f} ms | train wall {twall:6.2f} ms gpu {tgpu:6.2f} ms | first call {first:5.1f} s | max err {err:.3f}", flush=True)
else:
    for mode in ["eager", "kiln:off", "kiln:auto", "torch.compile"]:
        subprocess.run([sys.executable, __file__, mode])
