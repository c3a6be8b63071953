"""Control flow decided by Python values, shapes, dtypes and None: branches, loops, early returns."""
import torch

from .harness import check, check_recompiles, kw


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_if_on_python_bool_argument():
    def fn(x, use_bias):
        if use_bias:
            return x + 1
        else:
            return x - 1

    check(fn, _t(3), True)
    check(fn, _t(3), False)


def test_if_on_shape():
    def fn(x):
        if x.shape[0] > 2:
            x = x * 2
        if x.size(-1) == 4:
            x = x + 1
        else:
            x = x - 1
        return x

    check(fn, _t(3, 4))
    check(fn, _t(2, 5))


def test_if_on_dtype_ndim_device_requires_grad():
    def fn(x):
        if x.dtype == torch.float16:
            x = x.float()
        if x.ndim == 2:
            x = x.unsqueeze(0)
        if x.device.type == "cpu":
            x = x + 1
        if x.requires_grad:
            x = x * 3
        if x.is_floating_point():
            x = x / 2
        return x

    check(fn, _t(2, 3))


def test_if_on_none_optional_mask():
    def fn(scores, mask=None, bias=None):
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        if bias is None:
            bias = torch.zeros(())
        return scores.softmax(-1) + bias

    m = torch.tensor([True, True, False])
    check(fn, _t(2, 3))
    check(fn, _t(2, 3), m)
    check(fn, _t(2, 3), kwargs={"mask": m, "bias": torch.ones(())})


def test_isinstance_dispatch():
    def fn(x, scale):
        if isinstance(scale, (int, float)):
            return x * scale
        if isinstance(scale, torch.Tensor):
            return x * scale.exp()
        return x.neg()

    check(fn, _t(3), 2)
    check(fn, _t(3), _t(3, seed=1))
    check(fn, _t(3), None)


def test_for_over_range():
    def fn(x):
        for i in range(3):
            x = x * 0.5 + i
        for i in range(1, 7, 2):
            x = x - i
        return x

    check(fn, _t(4))


def test_for_over_list_of_python_values():
    def fn(x):
        for scale in [0.5, 2.0, 3.0]:
            x = x * scale
        return x

    check(fn, _t(4))


def test_layer_scale_loop_over_tensors():
    def fn(x, weights, gammas):
        for w, g in zip(weights, gammas):
            x = x + g * torch.tanh(x @ w)
        return x

    ws = [_t(4, 4, seed=i) for i in range(3)]
    check(fn, _t(2, 4), ws, [0.1, 0.2, 0.3])


def test_enumerate_and_reversed():
    def fn(xs):
        acc = torch.zeros_like(xs[0])
        for i, x in enumerate(xs):
            acc = acc + i * x
        for x in reversed(xs):
            acc = acc * 0.5 + x
        return acc

    check(fn, [_t(3, seed=i) for i in range(3)])


def test_dict_items_loop():
    def fn(feats):
        total = 0
        for name, t in feats.items():
            if name.startswith("skip"):
                continue
            total = total + t.sum()
        return total

    check(fn, {"a": _t(2), "skip_b": _t(3, seed=1), "c": _t(4, seed=2)})


def test_while_with_python_counter():
    def fn(x):
        i = 0
        while i < 4:
            x = x + i
            i += 1
        return x, i

    check(fn, _t(3))


def test_while_halving_shape():
    def fn(x):
        while x.shape[-1] > 2:
            x = x[..., ::2] + x[..., 1::2]
        return x

    check(fn, _t(3, 16))


def test_break_and_continue():
    def fn(x):
        for i in range(10):
            if i % 2 == 1:
                continue
            if i > 6:
                break
            x = x + i
        return x

    check(fn, _t(2))


def test_for_else():
    def fn(x, limit):
        for i in range(3):
            if i == limit:
                x = x * 10
                break
        else:
            x = x - 1
        return x

    check(fn, _t(2), 1)
    check(fn, _t(2), 5)


def test_nested_loops():
    def fn(x):
        out = x
        for i in range(2):
            for j in range(3):
                if j == i:
                    continue
                out = out + x[i, j]
        return out

    check(fn, _t(2, 3))


def test_early_return():
    def fn(x, n):
        if n == 0:
            return x
        y = x * n
        if n > 3:
            return y + 1
        return y.relu()

    check(fn, _t(3), 2)
    check(fn, _t(3), 5)


def test_ternary_expressions():
    def fn(x, causal):
        scale = 0.5 if x.shape[-1] > 2 else 1.0
        y = x * scale
        return y.tril() if causal else y

    check(fn, _t(3, 3), True)


def test_and_or_short_circuit_on_python_values():
    def fn(x, scale=None, name=""):
        scale = scale or 1.0
        label = name and name.upper()
        flag = x.ndim == 2 and x.shape[0] > 1
        other = None or 3
        return x * scale + other, label, flag

    check(fn, _t(2, 2))
    check(fn, _t(2, 2), 0.5, "q")


def test_not_and_is_comparisons():
    def fn(x, a=None):
        if not (a is None):
            x = x + a
        if not x.shape[0] == 3:
            x = x * 2
        return x - 1

    check(fn, _t(3))
    check(fn, _t(3), 1.0)


def test_loop_building_residual_stack():
    def fn(x, ws):
        h = x
        for idx in range(len(ws)):
            residual = h
            h = torch.relu(h @ ws[idx])
            if idx % 2 == 1:
                h = h + residual
        return h

    check(fn, _t(2, 4), [_t(4, 4, seed=i) for i in range(4)])


def test_branch_on_requires_grad_recompiles():
    def fn(x):
        if x.requires_grad:
            return x * 2
        return x + 2

    check_recompiles(fn, [(_t(3),), (_t(3).requires_grad_(),), (_t(3),)], graphs=2)


def test_branch_on_python_bool_recompiles():
    def fn(x, flag):
        return x.relu() if flag else x.sigmoid()

    check_recompiles(fn, [(_t(3), True), (_t(3), False), (_t(3), True), (_t(3), False)], graphs=2,
                     per_call=[1, 2, 2, 2])


def test_dtype_change_recompiles():
    def fn(x):
        return x * 2 + 1

    check_recompiles(fn, [(_t(3),), (_t(3).double(),), (_t(3, seed=3),)], graphs=2)


def test_shape_change_recompiles_when_static():
    def fn(x):
        return x.reshape(-1, 2).sum(0) * x.shape[0]

    check_recompiles(fn, [(_t(4),), (_t(6),), (_t(4, seed=1),)], graphs=2, dynamic=False)


def test_none_vs_tensor_argument_recompiles():
    def fn(x, mask=None):
        if mask is None:
            return x.softmax(-1)
        return x.masked_fill(mask, 0.0).softmax(-1)

    m = torch.tensor([False, True, False])
    check_recompiles(fn, [(_t(3),), kw(_t(3), mask=m), kw(_t(3, seed=2), mask=m), (_t(3),)], graphs=2)


def test_rank_change_recompiles():
    def fn(x):
        if x.ndim == 3:
            return x.mean(0)
        return x + 1

    check_recompiles(fn, [(_t(2, 3),), (_t(2, 2, 3),)], graphs=2)


def test_no_tensor_work_gives_no_graph():
    # The frame runs only Python on its tensor's metadata and returns its input: nothing to put
    # in a graph, so no graph reaches the backend (torch.compile behaves the same).
    def fn(x, n):
        if x.shape[0] > n:
            return x, n + 1
        return x, n - 1

    check(fn, _t(3), 2, graphs=0)
