"""Dynamic-shape corpus: branches on sizes install guards; calls that fail a guard recompile and are
still correct (including past the recompile limit, where kiln runs the code eagerly)."""
import pytest
import torch

from .harness import backends, check


def test_branch_threshold_both_sides(backend):
    def f(x):
        if x.shape[0] > 10:
            return x[:10] * 2
        return x - 1
    # 8 static; 5 dynamic with s0 <= 10; 13 fails it: dynamic with s0 > 10; the rest hit one of them
    check(f, lambda n: (torch.randn(n, 2),), backend, sizes=(8, 5, 13, 32, 2, 11, 10), graphs=3)


def test_branch_on_second_dim(backend):
    def f(x):
        if x.shape[1] > 4:
            x = x[:, :4]
        return x.sum(1)
    check(f, lambda n: (torch.randn(3, n),), backend, sizes=(8, 5, 13, 2, 3, 32), graphs=3)


def test_branch_on_divisibility(backend):
    def f(x):
        n = x.shape[0]
        if n % 4 == 0:
            return x.view(n // 4, 4).sum(1)
        return x.cumsum(0)
    check(f, lambda n: (torch.randn(n),), backend, sizes=(8, 12, 5, 16, 13, 2), graphs=3)


def test_compare_two_input_sizes(backend):
    def f(x, y):
        if x.size(0) >= y.size(0):
            return x[: y.size(0)] + y
        return x + y[: x.size(0)]
    check(f, lambda n: (torch.randn(n, 2), torch.randn(6, 2)), backend, sizes=(8, 7, 12, 3, 2, 6), graphs=3)


def test_duck_sized_then_distinct(backend):
    # x and y start with equal sizes (one symbol, a guard s0 == s1); later they differ: one recompile
    def f(x, y):
        return torch.cat([x, y]).sum(0)
    check(f, lambda n: (torch.randn(n, 2), torch.randn(n if n < 10 else n - 3, 2)), backend,
          sizes=(4, 5, 6, 13, 20, 7), graphs=3, dynamo_graphs=2)


def test_assert_on_sizes(backend):
    def f(x, y):
        assert x.shape[0] == y.shape[0], "batch mismatch"
        return x * y.sum(1, keepdim=True)
    check(f, lambda n: (torch.randn(n, 3), torch.randn(n, 2)), backend, graphs=2)


def test_rank_change_recompiles(backend):
    def f(x):
        return x.flatten(1).sum(-1) if x.dim() > 2 else x.sum(-1)
    shapes = {8: (8, 3), 5: (5, 3), 13: (13, 2, 3), 2: (2, 3), 32: (32, 2, 3)}
    check(f, lambda n: (torch.randn(*shapes[n]),), backend, graphs=3)


def test_dtype_change_recompiles(backend):
    def f(x):
        return x * 2 + 1
    dtypes = {8: torch.float32, 5: torch.float32, 13: torch.float64, 2: torch.float64, 32: torch.float32}
    check(f, lambda n: (torch.randn(n, dtype=dtypes[n]),), backend, graphs=3)


def test_min_with_constant(backend):
    def f(x):
        k = min(x.shape[0], 4)
        return x[:k].sum(0)
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=(8, 5, 13, 2, 3, 32), graphs=3,
          dynamo_graphs=2)


def test_max_of_two_sizes(backend):
    def f(x, y):
        m = max(x.shape[0], y.shape[0])
        out = torch.zeros(m, 2)
        out[: x.shape[0]] += x
        out[: y.shape[0]] += y
        return out
    check(f, lambda n: (torch.randn(n, 2), torch.randn(7, 2)), backend, sizes=(8, 9, 13, 5, 3), graphs=3, dynamo_graphs=2)


def test_len_in_condition(backend):
    def f(x):
        return x.max(0).values if len(x) > 3 else x.min(0).values
    check(f, lambda n: (torch.randn(n, 3),), backend, sizes=(8, 5, 13, 2, 3), graphs=3)


def test_loop_over_size_specializes(backend):
    def f(x):
        acc = x[0]
        for i in range(1, x.shape[0]):
            acc = acc * 0.5 + x[i]
        return acc
    # the trip count is a constant: every size gets an entry
    check(f, lambda n: (torch.randn(n, 2),), backend, sizes=(4, 3, 5, 3, 4), graphs=3)


def test_past_the_recompile_limit_still_correct(backend):
    def f(x):
        acc = x[0]
        for i in range(1, x.shape[0]):
            acc = acc + x[i] * i
        return acc
    # one entry per size until the limit (8), then the code runs eagerly: still equal to eager
    check(f, lambda n: (torch.randn(n),), backend, sizes=tuple(range(2, 14)), graphs=8)


def test_while_halving_size(backend):
    def f(x):
        while x.shape[0] > 1:
            half = x.shape[0] // 2
            x = x[:half] + x[half:2 * half]
        return x
    check(f, lambda n: (torch.randn(n, 2),), backend, sizes=(8, 16, 8, 4))


def test_guard_on_product_of_sizes(backend):
    def f(x):
        if x.shape[0] * x.shape[1] > 40:
            return x.reshape(-1)[:40]
        return x.reshape(-1)
    check(f, lambda n: (torch.randn(n, n + 1),), backend, sizes=(8, 5, 3, 13, 2, 6), graphs=3)


def test_mark_dynamic_first_compile(backend):
    def f(x):
        return x.sin() + x.shape[0]
    import kiln
    from .harness import compile_for, expected_compiles
    c = compile_for(f, backend, None)
    for n in (8, 5, 13):
        x = torch.randn(n, 3)
        kiln.mark_dynamic(x, 0)
        torch.testing.assert_close(c(x), f(x))
    expected_compiles(backend, c, 1)


def test_input_mutation_with_dynamic_size(backend):
    def f(x, buf):
        buf[: x.shape[0]] += x
        return buf.sum()
    check(f, lambda n: (torch.randn(n), torch.zeros(40)), backend, graphs=2)


def test_inplace_on_dynamic_input(backend):
    def f(x):
        x.mul_(2).add_(x.shape[0])
        return x
    check(f, lambda n: (torch.randn(n, 2),), backend, graphs=2)
