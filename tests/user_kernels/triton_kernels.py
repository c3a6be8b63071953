import time
import torch, triton, triton.language as tl, kiln

def _bench(fn, quantiles=None, **kw):
    t = time.perf_counter(); fn(); d = time.perf_counter() - t
    return [d, d, d] if quantiles else d

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"], do_bench=_bench)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)

@triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def neg_inplace(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    ptrs = x_ptr + offs
    tl.store(ptrs, -tl.load(ptrs, mask=m), mask=m)

@triton.jit
def _store_helper(p, v, m):
    tl.store(p, v, mask=m)

@triton.jit
def via_helper(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    _store_helper(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1, m)

def f_add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out.relu() * 2

def f_inplace_input(x, y):
    n = x.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, x, n, BLOCK=32)
    return x.sin() + y

def f_autotune(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 0.5)
    return out + x

def f_heuristics(x):
    y = x * 2
    neg_inplace[(1,)](y, y.numel())
    return y + 1, y.sum()

def f_read_after(x):
    y = x + 1
    a = y * 3             # read before the kernel writes y
    add_kernel[(2,)](x, x, y, x.numel(), BLOCK=64)
    return a, y * 1       # reads the kernel's result

def f_helper(x):
    out = torch.zeros_like(x)
    via_helper[(2,)](x, out, x.numel(), BLOCK=64)
    return out - x

def f_train(x):
    out = torch.empty_like(x)
    add_kernel[(2,)](x, x, out, x.numel(), BLOCK=64)
    return out * x

@torch.library.custom_op("uktri::double", mutates_args=())
def tri_double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, x, out, x.numel(), BLOCK=64)
    return out
@tri_double.register_fake
def _(x):
    return torch.empty_like(x)
tri_double.register_autograd(lambda ctx, g: g * 2)

def f_wrapped(x):
    return tri_double(x.sin()) * x
