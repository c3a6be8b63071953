"""max_pool's indices as ATen's pooling kernels pick them: the first maximum of each window, the last NaN,
and for a window of -inf values its first tap inside the input (not a padding tap). The decomposition
computes them as a pointwise chain over the taps (``_argmax_over_taps``); checked here eagerly on the
decomposition itself, and end to end through the Triton generator (interpreter) and the C++ backend."""
import math

import pytest
import torch

from kiln.decomp.pooling import max_pool2d_with_indices, max_pool3d_with_indices

aten = torch.ops.aten
NEG_INF, NAN = float("-inf"), float("nan")


def _special(shape, seed):
    """Random values with ties, NaNs and -inf patches (a whole border region of -inf too)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 3, shape, generator=g).float()  # small ints: many ties
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[: flat.numel() // 12]] = NAN
    flat[torch.randperm(flat.numel(), generator=g)[: flat.numel() // 6]] = NEG_INF
    x[..., :2, :2] = NEG_INF  # top-left corner: windows of -inf and padding only
    return x


CASES = [  # kernel, stride, padding, dilation, ceil_mode
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([2, 3], [1, 2], [1, 1], [1, 1], False),
    ([3, 3], [1, 1], [1, 1], [2, 2], False),
    ([3, 2], [2, 1], [1, 1], [2, 1], True),
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])])
def test_decomposition_picks_atens_indices(case, channels_last, device):
    # CUDA's channels-last kernel starts each window's index at input position 0 (a window of -inf keeps
    # 0); its contiguous kernel, like the CPU's, at the window's first tap inside the input
    kernel, stride, padding, dilation, ceil = case
    for seed in range(3):
        x = _special((2, 3, 9, 8), seed).to(device)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        want_v, want_i = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil)
        got_v, got_i = max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil)
        torch.testing.assert_close(got_v, want_v, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(got_i, want_i), (seed, (got_i != want_i).nonzero()[:5])
        assert got_i.stride() == want_i.stride()


def test_3d_decomposition_picks_atens_indices():
    x = _special((1, 2, 5, 6, 7), 0)
    want = aten.max_pool3d_with_indices(x, [2, 3, 2], [1, 2, 2], [1, 1, 1], [1, 1, 1], False)
    got = max_pool3d_with_indices(x, [2, 3, 2], [1, 2, 2], [1, 1, 1], [1, 1, 1], False)
    torch.testing.assert_close(got[0], want[0], equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("backend", ["triton", "cpp"])
def test_compiled_indices_match_eager(backend):
    if backend == "triton":
        pytest.importorskip("triton")
    from kiln.codegen.triton.runtime import MODULE_HEADER  # noqa: F401 -- (the generator is importable)
    import torch.fx as fx

    from kiln.backends.kiln import kiln_backend
    from kiln.options import default_options

    def f(x):
        v, i = aten.max_pool2d_with_indices(torch.relu(x) - 1, [3, 3], [2, 2], [1, 1], [1, 1], True)
        return v * 2, i

    x = _special((2, 4, 11, 10), 1).to(memory_format=torch.channels_last)
    options = default_options().replace(cpu_codegen=backend, choose_faster=False)
    compiled = kiln_backend(fx.symbolic_trace(f), [x], options)
    cg = getattr(compiled, "compiled_graph", None)
    assert cg is not None, compiled.kiln_explain()
    got, want = compiled(x), f(x)
    torch.testing.assert_close(got[0], want[0], equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got[1], want[1])
    if backend == "triton":  # values and indices in one kernel over the taps, no reduction
        assert not any("argmax" in name for name in cg.kernels), list(cg.kernels)


def test_3x3x3_windows_pick_atens_indices():
    # 27 taps: over the values' chain limit (the values are an amax), the indices still a chain
    x = _special((1, 2, 6, 7, 8), 2)
    x[..., :2, :2, :2] = NEG_INF
    want = aten.max_pool3d_with_indices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False)
    got = max_pool3d_with_indices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False)
    torch.testing.assert_close(got[0], want[0], equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got[1], want[1])


def test_windows_over_the_chain_limit_keep_the_reduction():
    # over MAX_INDEX_TAPS the indices are an argmax reduction; a window of -inf values still points at
    # its first tap inside the input, not at padding (only two NaNs in one window differ from ATen)
    from kiln.decomp import pooling

    k = math.isqrt(pooling.MAX_INDEX_TAPS) + 1
    x = torch.randn(1, 2, 3 * k, 3 * k)
    x[..., : k, : k] = NEG_INF
    x[0, 1, 2 * k, 2 * k] = NAN  # one NaN in a window: it is picked, as by ATen
    want = aten.max_pool2d_with_indices(x, [k, k], [2, 2], [k // 2, k // 2], [1, 1], False)
    got = max_pool2d_with_indices(x, [k, k], [2, 2], [k // 2, k // 2], [1, 1], False)
    torch.testing.assert_close(got[0], want[0], equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got[1], want[1])
    assert (want[1] >= 0).all()
