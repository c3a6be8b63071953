"""id() inside compiled code (capture/values/object_ids.py): the real id of an object read from a place,
under an identity guard; ids of objects made in the frame (and of tensors) compared with == / != as `is`;
any other use of such an id breaks the graph. Counts are TorchDynamo's unless a comment says otherwise."""
import torch
from torch import nn

from .harness import USE_DYNAMO, CountingBackend, check, compile_fn, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class Box:
    def __init__(self, v):
        self.v = v


SCALES = {}


def _same_calls(fn, arg_sets, graphs):
    """Call ``fn`` eagerly and compiled on the same argument objects (ids must be the objects' own: the
    harness's deep copies would give new ones), comparing each call; ``graphs`` in all."""
    reset()
    counter = CountingBackend()
    compiled = compile_fn(fn, counter)
    for args in arg_sets:
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(counter.graphs) == graphs, len(counter.graphs)


def test_lookup_by_id_of_an_argument_object():
    a, b = Box(2.0), Box(3.0)
    scales = {id(a): 10.0, id(b): 100.0}

    def fn(x, box):
        return x * scales[id(box)] + box.v

    # another object in the same place: the identity guard fails and the frame compiles again
    x = _t(3)
    _same_calls(fn, [(x, a), (x, a), (x, b), (x, a)], graphs=2)


def test_optimizer_table_keyed_by_module_id():
    m1, m2 = nn.Linear(3, 3), nn.Linear(3, 3)
    table = {id(m1): 1.0, id(m2): -1.0}

    def fn(m, x):
        return m(x) * table[id(m)]

    x = _t(2, 3)
    with torch.no_grad():
        _same_calls(fn, [(m1, x), (m2, x), (m1, x)], graphs=2)


def test_ids_of_new_objects_compare_as_identity():
    def fn(x):
        p, q = Box(1), Box(1)
        r = p
        return x + 1, id(p) == id(r), id(p) != id(q), id(p) == id(q), id(x) == id(x), id(x) != id(x + 0)

    check(fn, _t(3), graphs=1, breaks=0, dynamo_graphs=0)  # Dynamo runs this frame eagerly


def test_id_of_none_and_bools():
    def fn(x, flag):
        return x * 2, id(None) == id(None), id(flag) == id(True)

    check(fn, _t(3), True, graphs=1)


def test_id_of_a_new_object_used_as_a_number_breaks_and_stays_right():
    def fn(x):
        p = Box(1)
        seen = {id(p): p}  # a dict keyed by the number: only known when the code runs
        return x * len(seen) + 1

    # kiln: the dict needs the number, which only the run knows; the refusal comes at BUILD_MAP, where
    # the frame cannot be split, so it runs eagerly (correct, no graph)
    check(fn, _t(3), graphs=0, dynamo_graphs=1)


def test_returned_id_is_the_objects_own():
    if USE_DYNAMO:
        return  # (the reference engine has nothing to add here)
    reset()

    def fn(x, box):
        return x + 1, id(box), id(x)

    compiled = compile_fn(fn, CountingBackend())
    box, x = Box(1), _t(3)
    out, box_id, x_id = compiled(x, box)
    assert box_id == id(box) and x_id == id(x)
    other = Box(2)
    assert compiled(x, other)[1] == id(other)


def test_id_of_a_tuple_argument_is_the_arguments_own():
    # (found by review: a graph break rebuilt the tuple as a constant and took the copy's id)
    reset()

    def fn(x, t):
        return x + 1, id(t) == id(t), id(t)

    compiled = compile_fn(fn, CountingBackend())
    for t in ((1, 2), tuple([1, 2])):
        assert compiled(torch.ones(2), t)[2] == id(t)


def test_ids_of_equal_ints_follow_the_objects():
    reset()

    def fn(x, t):
        return x + 1, id(t[0]) == id(t[1])

    compiled = compile_fn(fn, CountingBackend())
    p, q = int("1000"), int("1000")
    for t in ((p, p), (p, q), (p, p)):
        assert compiled(torch.ones(2), t)[1] == fn(torch.ones(2), t)[1]


def test_ids_of_freed_temporaries_run_as_python():
    # CPython may give a freed object's address to the next one: eager's answer depends on it
    def fn(x):
        return x + 1, id(x + 1) == id(x + 2), id([]) == id([])

    reset()
    compiled = compile_fn(fn, CountingBackend())
    assert compiled(torch.ones(2))[1:] == fn(torch.ones(2))[1:]


def test_is_between_items_of_a_tuple_argument_follows_the_objects():
    # the tuple is guarded by value: equal items may be one object or two, and `is` must see which
    def fn(x, t):
        if t[0] is t[1]:
            return x + 1
        return x - 1

    big = 1000
    one, other = (big, big), (int("1000"), int("1000"))
    x = _t(3)
    _same_calls(fn, [(x, one), (x, other), (x, one), (x, other)], graphs=0)  # (the frame runs as Python)


def test_is_between_two_arguments_guards_their_identity():
    def fn(x, a, b):
        if a is b:
            return x * 2
        return x * 3

    s = "a string that is not interned " + str(7)
    t = "a string that is not interned " + str(7)
    x = _t(3)
    # one graph per answer: the places are guarded to hold the same (or different) objects
    _same_calls(fn, [(x, s, s), (x, s, t), (x, t, t), (x, t, s)], graphs=2)


def test_is_against_singletons_needs_no_identity_guard():
    def fn(x, a, d):
        if a is None or d is torch.float32:
            return x + 1
        return x

    x = _t(3)
    _same_calls(fn, [(x, 1000, torch.float32), (x, 1000, torch.float64), (x, None, torch.float64)], graphs=2)


def test_is_between_numbers_from_sizes_and_fresh_devices_follows_eager():
    # equal ints above 256 are distinct objects (x.shape[0] is x.shape[0] is False at 300), and each
    # x.device read is a new object: these run as Python; `n is None` of a size is False
    def sizes(x):
        return x + 1, x.shape[0] is x.shape[0], x.shape[0] is None

    def device(x):
        return x + 1, x.device is x.device, x.dtype is x.dtype

    def ints(x, n, m):
        return x + n, n is m

    reset()
    for fn, args in ((sizes, (_t(300),)), (device, (_t(3),))):
        compiled = compile_fn(fn, CountingBackend())
        assert compiled(*args)[1:] == fn(*args)[1:]
    import kiln

    kiln.reset()
    compiled = kiln.compile(ints)
    x = _t(3)
    for v in (1000, 2000, 3000):  # (n and m become symbols on the second value)
        a, b = int(str(v)), int(str(v))
        assert compiled(x, a, b)[1] == ints(x, a, b)[1] is False
        assert compiled(x, a, a)[1] == ints(x, a, a)[1] is True
    kiln.reset()
    assert kiln.compile(sizes, dynamic=True)(_t(300))[1:] == (False, False)
