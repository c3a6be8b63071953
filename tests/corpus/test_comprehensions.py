"""List/dict/set comprehensions (nested function frames on 3.11, inlined on 3.12 by PEP 709)."""
import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def test_list_comprehension_over_range():
    def fn(x):
        return torch.stack([x * i for i in range(4)])

    check(fn, _t(3))


def test_list_comprehension_over_tensor_list():
    def fn(xs):
        return [t.relu() + 1 for t in xs]

    check(fn, [_t(2, seed=i) for i in range(3)])


def test_comprehension_with_condition():
    def fn(x):
        parts = x.unbind(0)
        return sum([p for i, p in enumerate(parts) if i % 2 == 0])

    check(fn, _t(5, 2))


def test_nested_comprehension():
    def fn(x):
        grid = [[x[i, j] * (i + j) for j in range(x.shape[1])] for i in range(x.shape[0])]
        return torch.stack([torch.stack(row) for row in grid])

    check(fn, _t(2, 3))


def test_flattening_double_for_comprehension():
    def fn(x):
        pairs = [(i, j) for i in range(3) for j in range(i)]
        return x * len(pairs), pairs

    check(fn, _t(2))


def test_dict_comprehension_of_tensors():
    def fn(x):
        names = ["q", "k", "v"]
        d = {name: x * (i + 1) for i, name in enumerate(names)}
        return d

    check(fn, _t(2))


def test_dict_comprehension_over_items():
    def fn(state):
        return {k: v.float().mean() for k, v in state.items() if not k.endswith("_mask")}

    check(fn, {"a": _t(3), "b_mask": torch.ones(3), "c": torch.arange(4)})


def test_set_comprehension_of_shapes():
    def fn(xs):
        sizes = {t.shape[-1] for t in xs}
        return torch.cat(xs, -1) * len(sizes), sorted(sizes)

    check(fn, [_t(2, 3), _t(2, 4, seed=1), _t(2, 3, seed=2)])


def test_comprehension_reads_enclosing_locals():
    def fn(x, w):
        scale = 0.5
        bias = x.mean()
        return [(row @ w) * scale + bias for row in x]

    check(fn, _t(3, 4), _t(4, 2, seed=1))


def test_comprehension_over_zip():
    def fn(xs, ws):
        return torch.stack([x @ w for x, w in zip(xs, ws)]).sum(0)

    check(fn, [_t(2, 3, seed=i) for i in range(2)], [_t(3, 3, seed=10 + i) for i in range(2)])


def test_comprehension_calling_user_function():
    def norm(t):
        return t / t.norm()

    def fn(x):
        return [norm(r) for r in x.split(1)]

    check(fn, _t(3, 4))


def test_comprehension_with_walrus():
    def fn(x):
        out = [y for i in range(3) if (y := x * i).shape[0] > 0]
        return out

    check(fn, _t(2))


def test_comprehension_building_head_dims():
    def fn(x):
        heads = 4
        dims = [x.shape[-1] // heads] * heads
        chunks = x.split(dims, dim=-1)
        return torch.stack([c.softmax(-1) for c in chunks], dim=1)

    check(fn, _t(2, 8))


def test_comprehension_variable_does_not_leak():
    def fn(x):
        i = 10
        ys = [x + i for i in range(2)]
        return ys, x * i

    check(fn, _t(2))


def test_generator_expression_into_sum():
    def fn(xs):
        return sum(t.sum() for t in xs) * 2

    check(fn, [_t(2, seed=i) for i in range(3)])


def test_generator_expression_into_tuple_and_cat():
    def fn(x):
        parts = tuple(x * i for i in range(3))
        return torch.cat(list(p + 1 for p in parts)), len(parts)

    check(fn, _t(2))


def test_generator_expression_in_all_any_max():
    def fn(xs):
        out = xs[0]
        if all(t.shape[-1] > 1 for t in xs):
            out = out * 2
        if any(t.ndim == 3 for t in xs):
            out = out + 100
        widest = max(t.shape[-1] for t in xs)
        return out, widest

    check(fn, [_t(2, 3), _t(2, 4, seed=1)])


def test_generator_expression_unpacked_qkv():
    def fn(q, k, v):
        b, t, c = q.shape
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v

    check(fn, _t(1, 3, 4), _t(1, 3, 4, seed=1), _t(1, 3, 4, seed=2))


def _scaled_pairs(x, n):
    for i in range(n):
        if i % 2:
            yield i, x * i
        else:
            yield i, x - i


def _chunks(xs, size):
    chunk = []
    for x in xs:
        chunk.append(x)
        if len(chunk) == size:
            yield tuple(chunk)
            chunk = []
    if chunk:
        yield tuple(chunk)
    return


def test_user_generator_functions_consumed_by_for_list_zip_next():
    # user generator functions without side effects run to their end while tracing (dynamo: 1 graph)
    def fn(x):
        total = torch.zeros_like(x)
        for i, y in _scaled_pairs(x, 4):
            total = total + y * i
        groups = list(_chunks([x, x + 1, x * 2, x.sin(), x.cos()], 2))
        firsts = [a for a, _ in zip(_scaled_pairs(x, 10), range(2))]
        head = next(_scaled_pairs(x.exp(), 3))
        return total, [torch.stack(g).sum(0) for g in groups], firsts, head

    check(fn, _t(3), graphs=1)


class _Tally:
    def __init__(self):
        self.n = 0


TALLY = _Tally()


def _counting_gen(x):
    for i in range(3):
        TALLY.n += 1  # a write the consumer reads between items: not run ahead
        yield x + TALLY.n


def test_user_generator_with_side_effects_runs_step_by_step():
    def fn(x):
        TALLY.n = 0
        out = []
        for y in _counting_gen(x):
            out.append(y * TALLY.n)
        return out

    # its body runs one step per item, so the writes and the reads interleave as in eager
    check(fn, _t(3), graphs=1, dynamo_graphs=(0, 1, 2, 3, 4))


# ---- yield from ----------------------------------------------------------------------------------


def _gen_with_return(x, n):
    for i in range(n):
        yield x * i
    return x.sum() + n


def _gen_delegating(x):
    got = yield from _gen_with_return(x, 2)  # a generator: its items, then its return value
    yield got
    yield from [x + 1, x + 2]  # a list
    yield from (t.cos() for t in (x, x * 3))  # a generator expression
    nothing = yield from range(2)  # not a generator: None
    yield nothing is None


def _gen_nested(x, depth):
    if depth:
        inner = yield from _gen_nested(x * 2, depth - 1)
        yield inner
        return inner + 1
    yield x
    return depth


def test_yield_from_generators_iterables_and_return_values():
    # kiln runs the generators ahead (no side effects) and gives `yield from` a generator the value the
    # generator returns; dynamo runs this frame eagerly (it does not model that value)
    def fn(x):
        out = list(_gen_delegating(x))
        nested = [v for v in _gen_nested(x, 3)]
        it = _gen_delegating(x.exp())
        return out, nested, next(it), next(it), sum(1 for _ in it)

    check(fn, _t(3), graphs=1, dynamo_graphs=0)


def _yield_from_counting(x):
    yield from _counting_gen(x)  # its items depend on writes the consumer reads: not run ahead


def test_yield_from_a_generator_with_side_effects_runs_step_by_step():
    def fn(x):
        TALLY.n = 0
        return [y * TALLY.n for y in _yield_from_counting(x)]

    check(fn, _t(3), graphs=1, dynamo_graphs=(0, 1, 2, 3, 4))
