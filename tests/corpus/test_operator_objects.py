"""operator.itemgetter / attrgetter / methodcaller: made in the frame, read from globals, returned."""
import operator

import torch

from .harness import USE_DYNAMO, check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


FIRST_AND_LAST = operator.itemgetter(0, -1)
SHAPE_AND_DTYPE = operator.attrgetter("shape", "dtype")
SUM_LAST = operator.methodcaller("sum", dim=-1)


def test_itemgetter_on_list_and_dict():
    def fn(x):
        items = [x, x + 1, x * 2]
        pick = operator.itemgetter(2)
        by_key = operator.itemgetter("b", "a")
        return pick(items), by_key({"a": x.sin(), "b": x.cos()})

    check(fn, _t(3))


def test_itemgetter_on_tensor_index():
    def fn(x):
        return operator.itemgetter(1, 0)(x), operator.itemgetter(slice(1, None))(x)

    check(fn, _t(3, 2))


def test_itemgetter_as_sort_key():
    def fn(x):
        pairs = [(3, x), (1, x * 2), (2, x + 1)]
        ordered = sorted(pairs, key=operator.itemgetter(0))
        return [t for _, t in ordered]

    check(fn, _t(2))


def test_attrgetter_dotted_and_several():
    class Box:
        def __init__(self, inner):
            self.inner = inner

    def fn(x):
        get = operator.attrgetter("inner.shape")
        return x.reshape(get(Box(x.t()))), operator.attrgetter("ndim", "dtype")(x)

    check(fn, _t(2, 3))


def test_methodcaller_with_arguments():
    def fn(x):
        return operator.methodcaller("sum", 0)(x), operator.methodcaller("transpose", 0, 1)(x), \
            operator.methodcaller("mean", dim=1, keepdim=True)(x)

    check(fn, _t(2, 3))


def test_operator_objects_from_globals():
    def fn(x):
        rows = list(x.unbind(0))
        first, last = FIRST_AND_LAST(rows)
        shape, dtype = SHAPE_AND_DTYPE(x)
        return first - last, SUM_LAST(x), torch.zeros(shape, dtype=dtype)

    # dynamo breaks on the global attrgetter/methodcaller objects
    check(fn, _t(3, 2), dynamo_graphs=3)


def test_operator_object_returned():
    """Returned objects are rebuilt: equal repr (they have no __eq__) and the same behaviour."""
    import kiln

    def fn(x):
        return x + 1, operator.itemgetter(1), operator.attrgetter("shape"), operator.methodcaller("sum", dim=0)

    if USE_DYNAMO:
        return
    kiln.reset()
    kiln.stats.reset()
    x = _t(2, 2)
    got, want = kiln.compile(fn, backend="eager")(x), fn(x)
    assert [repr(g) for g in got[1:]] == [repr(w) for w in want[1:]]
    assert got[1]([5, 6]) == 6 and got[2](x) == x.shape
    torch.testing.assert_close(got[3](x), x.sum(dim=0))
    assert kiln.stats.snapshot()["graphs"] == 1
