"""Fusion: common blocks compile to the fewest kernels the scheduler can justify, with results equal to
eager. Each test says why its count is the minimum."""
import math

import torch
import torch.nn.functional as F

import kiln


def compile_and_count(fn, *args):
    kiln.reset()
    kiln.stats.reset()
    compiled = kiln.compile(fn)
    with torch.no_grad():
        got = compiled(*args)
        expected = fn(*args)
    torch.testing.assert_close(got, expected)
    assert not kiln.stats.eager_fallbacks, kiln.stats.eager_fallbacks
    return kiln.stats.kernels_generated


def test_softmax_is_one_kernel():
    # max, sum of exp and the normalized output share the row loop: one kernel, the row statistics
    # never leave it
    assert compile_and_count(lambda x: torch.softmax(x, -1), torch.randn(4, 8, 32)) == 1


def test_softmax_over_a_middle_dim_is_one_kernel():
    assert compile_and_count(lambda x: torch.softmax(x, 1), torch.randn(4, 24, 32)) == 1


def test_layer_norm_is_one_kernel():
    def f(x, w, b):
        return F.layer_norm(x, (32,), w, b)

    assert compile_and_count(f, torch.randn(4, 8, 32), torch.randn(32), torch.randn(32)) == 1


def test_layer_norm_then_reshape_for_matmul_is_one_kernel():
    # the normalized output is flattened to [32, 32] for the matmul: the scheduler splits its loops
    # to share the statistics' [4, 8] loop nest
    def f(x, w, b, m):
        return F.layer_norm(x, (32,), w, b).reshape(-1, 32) @ m

    n = compile_and_count(f, torch.randn(4, 8, 32), torch.randn(32), torch.randn(32), torch.randn(32, 16))
    assert n == 1  # + the matmul, which runs in ATen


def test_bias_gelu_mlp_epilogues():
    # each matmul runs in ATen; the bias + GELU after the first is one kernel (a kernel cannot start
    # before the matmul it reads has finished); the second's bias, which nothing else reads, is added
    # by the library call (addmm)
    def f(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    args = (torch.randn(16, 32), torch.randn(64, 32), torch.randn(64), torch.randn(32, 64), torch.randn(32))
    assert compile_and_count(f, *args) == 1


def test_attention_pointwise_parts_are_one_kernel():
    # scale, causal mask and softmax between the two batched matmuls: one kernel
    def f(q, k, v, mask):
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(mask, float("-inf"))
        return scores.softmax(-1) @ v

    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    mask = torch.triu(torch.ones(16, 16, dtype=torch.bool), diagonal=1)
    assert compile_and_count(f, q, k, v, mask) == 1


def test_residual_add_layer_norm_is_one_kernel():
    # x + y feeds both statistics and the output: recomputed in the row loop instead of stored
    def f(x, y, w, b):
        return F.layer_norm(x + y, (32,), w, b)

    assert compile_and_count(f, torch.randn(4, 8, 32), torch.randn(4, 8, 32), torch.randn(32), torch.randn(32)) == 1
