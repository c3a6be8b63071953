"""User Triton kernels and functions launching them. Import with TRITON_INTERPRET=1 set (the
``kernels`` fixture of test_triton_kernels.py does): kernels then run on CPU tensors."""
import time

import torch
import triton
import triton.language as tl


def _bench(fn, quantiles=None, **kwargs):
    """Autotuning's timer on CPU (Triton's own needs a GPU driver)."""
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    return [took, took, took] if quantiles else took


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


@triton.jit
def count_kernel(x_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    idx = tl.load(x_ptr + offs, mask=m, other=0)
    tl.atomic_add(counts_ptr + idx, 1, mask=m)


@triton.jit
def block_ptr_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
    dst = tl.make_block_ptr(out_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
    tl.store(dst, tl.load(src))


def add_then_relu(x, y):  # the example
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out.relu() * 2


def add_into_input(x, y):
    n = x.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, x, n, BLOCK=32)
    return x.sin() + y


def autotuned(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 0.5)
    return out + x


def heuristic_block(x):
    y = x * 2
    neg_inplace[(1,)](y, y.numel())
    return y + 1, y.sum()


def read_before_and_after(x):
    y = x + 1
    before = y * 3  # read before the kernel overwrites y
    add_kernel[(2,)](x, x, y, x.numel(), BLOCK=64)
    return before, y * 1  # reads the kernel's result


def through_a_helper(x):
    out = torch.zeros_like(x)
    via_helper[(2,)](x, out, x.numel(), BLOCK=64)
    return out - x


def atomic_counts(idx):
    counts = torch.zeros(8, dtype=torch.int32)
    count_kernel[(triton.cdiv(idx.numel(), 32),)](idx, counts, idx.numel(), BLOCK=32)
    return counts * 2


def needs_grad(x):
    out = torch.empty_like(x)
    add_kernel[(2,)](x, x, out, x.numel(), BLOCK=64)
    return out * x


def not_dense(x):
    v = x[:, :4]
    add_kernel[(1,)](v, v, v, 16, BLOCK=16)
    return x + 1


def overlapping_views(x):
    add_kernel[(1,)](x[:8], x[:8], x[8:], 8, BLOCK=8)
    return x + 1


def grid_over_a_tensor(x, y):
    out = torch.empty_like(x)
    add_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, out, x.numel(), BLOCK=64)
    return out


@torch.library.custom_op("kiln_test::triton_double", mutates_args=())
def triton_double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, x, out, x.numel(), BLOCK=64)
    return out


@triton_double.register_fake
def _(x):
    return torch.empty_like(x)


triton_double.register_autograd(lambda ctx, grad: grad * 2)


def wrapped_in_custom_op(x):
    return triton_double(x.sin()) * x


@torch.library.triton_op("kiln_test::triton_add", mutates_args={})
def triton_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    torch.library.wrap_triton(add_kernel)[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out


def calls_a_triton_op(x, y):
    return triton_add(x, y).relu() * 2


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m).to(OUT_DTYPE), mask=m)


def dtype_argument(x):
    out = torch.empty(x.shape, dtype=torch.float16)
    n = x.numel()
    cast_kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, OUT_DTYPE=tl.float16, BLOCK=32)
    return out.float() + 1


def writes_a_row(x, y):
    out = torch.zeros(3, 100)
    add_kernel[(2,)](x, y, out[1], 100, BLOCK=64)  # a view with an offset: written back into out
    add_kernel[(1,)](x[:50], x[:50], y[50:], 50, BLOCK=64)  # writes half of an input, in place
    return out.sum(0), y * 1
