"""Scatters (kiln/loopir/scatter.py) in generated Triton (Triton's interpreter on CPU tensors), against
eager: stores, atomic adds (duplicates), integer atomic max/min, index_put with broadcast and negative
indices, fused producers and consumers, and the modes without an exact atomic (the graph runs ATen)."""
import torch

from tests.codegen.triton.helpers import check, compile_fn

aten = torch.ops.aten


def _distinct(rows, n, high, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(high, generator=g)[:n] for _ in range(rows)])


def test_scatter_store_and_atomic_add():
    x, src = torch.randn(4, 6), torch.randn(4, 5)
    idx = _distinct(4, 3, 6)
    dup = torch.randint(0, 6, (4, 5), generator=torch.Generator().manual_seed(1))

    def f(x, idx, dup, src):
        return (x * 2).scatter(1, idx, src.exp()) + 1, x.scatter_add(1, dup, src), x.scatter(1, idx, 0.5), \
            x.scatter_reduce(1, dup, src, "sum", include_self=False)

    cg = check(f, x, idx, dup, src)
    assert "tl.atomic_add(" in cg.source and "tl.store(" in cg.source


def test_index_put_accumulate_broadcast_and_negative_indices():
    x, v = torch.randn(5, 4, 3), torch.randn(5, 4, 3)
    rows = torch.tensor([0, -1, 2, 0, 4])
    cols = torch.tensor([[1], [3]])

    def f(x, rows, cols, v):
        return aten.index_put(x, [rows], v, True), aten.index_put(x, [rows, cols], v[0, 0], True), \
            aten.index_put(x, [None, cols[0]], v[:, :1], True), x.index_add(0, rows % 5, v, alpha=3)

    check(f, x, rows, cols, v)


def test_integer_atomic_max_min_and_mean():
    x = torch.randint(-5, 5, (5, 4))
    src = torch.randint(-9, 9, (6, 4))
    idx = torch.randint(0, 5, (6, 4), generator=torch.Generator().manual_seed(2))

    def f(x, idx, src):
        return [x.scatter_reduce(0, idx, src, r, include_self=s) for r in ("amax", "amin", "mean") for s in (True, False)]

    cg = check(f, x, idx, src)
    assert "tl.atomic_max(" in cg.source and "tl.atomic_min(" in cg.source


def test_float_max_has_no_exact_atomic_and_runs_aten():
    x, src = torch.randn(3, 4), torch.tensor([[float("nan"), 1.0, 2.0, 3.0]])
    idx = torch.tensor([[0, 1, 1, 2]])
    f = lambda x, idx, src: x.scatter_reduce(0, idx, src, "amax")  # noqa: E731
    import pytest

    with pytest.raises(AssertionError, match="no exact atomic"):
        compile_fn(f, (x, idx, src))


def test_16_bit_float_atomics_are_not_interpreted():
    """Triton's interpreter has no bfloat16 atomics: the graph runs ATen (on the GPU they compile)."""
    import pytest

    x, src, idx = torch.randn(5, 4).bfloat16(), torch.randn(6, 4).bfloat16(), torch.randint(0, 5, (6, 4))
    with pytest.raises(AssertionError, match="interpreter has no torch.bfloat16 atomics"):
        compile_fn(lambda x, i, s: x.scatter_add(0, i, s), (x, idx, src))


def test_out_of_range_indices_raise_as_in_eager():
    """A loaded index outside its dimension is the user's error: eager raises, and so does kiln's Triton
    code (a device-side assert on the GPU; under the interpreter the wrapper raises IndexOutOfBoundsError
    after the launch). The same graph then runs good indices right: the flag was cleared."""
    import pytest

    from kiln.errors import IndexOutOfBoundsError

    x = torch.randn(4, 6)
    cases = [
        (lambda x, i: torch.gather(x, 1, i) * 2, torch.tensor([[0, 6]] * 4), torch.tensor([[0, 5]] * 4)),
        (lambda x, i: torch.gather(x, 1, i) * 2, torch.tensor([[0, -1]] * 4), torch.tensor([[0, 1]] * 4)),
        (lambda x, i: x.index_select(0, i) + 1, torch.tensor([1, 4]), torch.tensor([1, 3])),
        (lambda x, i: x[i] + 1, torch.tensor([1, -5]), torch.tensor([1, -4])),
        (lambda x, i: x.scatter_add(1, i, x[:, :2]), torch.tensor([[0, 7]] * 4), torch.tensor([[0, 5]] * 4)),
        (lambda x, i: aten.index_put(x, [i], torch.tensor(1.0), True), torch.tensor([4]), torch.tensor([-4])),
        (lambda x, i: torch.nn.functional.embedding(i, x).sum(-1), torch.tensor([[2, 9]]), torch.tensor([[2, 3]])),
    ]
    for fn, bad, good in cases:
        with pytest.raises((IndexError, RuntimeError)):
            fn(x, bad)
        compiled, cg = compile_fn(fn, (x, good))
        assert "kh.check_index(" in cg.source, cg.source
        with pytest.raises(IndexOutOfBoundsError, match="index out of bounds in .*check the index values"):
            compiled(x, bad)
        torch.testing.assert_close(compiled(x, good), fn(x, good))


def test_masked_off_lanes_are_not_checked():
    """Only live lanes count: a padded gather reads its index under the pad's mask, and lanes outside
    the block (xnumel not a multiple of XBLOCK) load nothing."""
    x = torch.randn(5, 7)
    i = torch.randint(0, 7, (5, 3))

    def f(x, i):
        return torch.nn.functional.pad(torch.gather(x, 1, i), (2, 1)) + 1

    cg = check(f, x, i, triton_max_block=4)
    assert "kh.check_index(" in cg.source


def test_only_kernels_that_check_indices_are_built_in_debug_mode():
    from kiln.codegen.triton.ops import jit_decorator

    assert jit_decorator(["tmp0 = tl.load(in_ptr0 + xindex)"]) == "@jit"
    assert jit_decorator(["kh.check_index(tmp1 < 4)"], ("s0",)) == "@jit(do_not_specialize=('s0',), debug=True)"
