"""`match` statements inside compiled code: every pattern kind, on constants, containers, objects and
tensors' shapes. Each case is one graph (the pattern is decided while tracing)."""
import collections
import dataclasses
import typing

import torch

from .harness import check


def one_graph(fn, *args, **kwargs):
    """A case that must be one graph with no break (fullgraph=True), under kiln and dynamo alike."""
    return check(fn, *args, graphs=1, fullgraph=True, **kwargs)


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Plain:
    __match_args__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


Pair = collections.namedtuple("Pair", ["left", "right"])


class Typed(typing.NamedTuple):
    weight: torch.Tensor
    scale: float


def test_match_literal_and_wildcard():
    def fn(x, mode):
        match mode:
            case "double":
                return x * 2
            case "half":
                return x / 2
            case _:
                return x + 0

    one_graph(fn, _t(3), "half")


def test_match_or_pattern_and_capture():
    def fn(x, k):
        match k:
            case 1 | 2 | 3:
                return x + k
            case other:
                return x * other

    one_graph(fn, _t(3), 2)


def test_match_singleton_none_true():
    def fn(x, flag):
        match flag:
            case None:
                return x * 3
            case True:
                return x + 1
            case False:
                return x - 1

    one_graph(fn, _t(3), None)


def test_match_shape_two_dims():
    def fn(x):
        match x.shape:
            case (b, c):
                return x.sum(1) * c
            case (b, c, h, w):
                return x.mean((2, 3))
            case _:
                return x

    one_graph(fn, _t(2, 5))


def test_match_shape_four_dims():
    def fn(x):
        match x.shape:
            case (b, c):
                return x.sum(1) * c
            case (b, c, h, w):
                return x.mean((2, 3)) + h * w
            case _:
                return x

    one_graph(fn, _t(2, 3, 4, 5))


def test_match_shape_with_star():
    def fn(x):
        match x.shape:
            case (first, *rest):
                return x.reshape(first, -1), rest
        return x

    one_graph(fn, _t(2, 3, 4))


def test_match_shape_literal_dim():
    def fn(x):
        match x.shape:
            case (_, 3):
                return x @ torch.ones(3, 2)
            case (_, n):
                return x.sum(-1, keepdim=True) * n

    one_graph(fn, _t(4, 3))


def test_match_tuple_of_tensors():
    def fn(pair):
        match pair:
            case (a, b):
                return a + b
            case (a,):
                return a

    one_graph(fn, (_t(3), _t(3, seed=1)))


def test_match_list_of_tensors_star():
    def fn(xs):
        match xs:
            case [first, *middle, last]:
                return first - last, len(middle)
            case []:
                return None

    one_graph(fn, [_t(2), _t(2, seed=1), _t(2, seed=2), _t(2, seed=3)])


def test_match_sequence_guard():
    def fn(xs, k):
        match xs:
            case [a, b] if k > 1:
                return a * b
            case [a, b]:
                return a + b

    one_graph(fn, [_t(2), _t(2, seed=1)], 1)


def test_match_mapping():
    def fn(d):
        match d:
            case {"x": x, "scale": s}:
                return x * s
            case {"x": x}:
                return x

    one_graph(fn, {"x": _t(3), "scale": 2.0, "other": 1})


def test_match_mapping_rest():
    def fn(d):
        match d:
            case {"x": x, **rest}:
                return x + len(rest), sorted(rest)
        return None

    one_graph(fn, {"x": _t(3), "b": 1, "a": 2})


def test_match_mapping_missing_key():
    def fn(x, d):
        match d:
            case {"missing": v}:
                return x + v
            case {}:
                return x * 3

    one_graph(fn, _t(3), {"present": 1})


def test_match_mapping_built_in_frame():
    def fn(x):
        config = {"act": "relu", "p": 0.5}
        match config:
            case {"act": "relu", **others}:
                return torch.relu(x), others
            case {"act": "gelu"}:
                return torch.nn.functional.gelu(x), {}

    one_graph(fn, _t(4))


def test_match_dataclass_positional():
    def fn(x, p):
        match p:
            case Point(0, y):
                return x + y
            case Point(x0, y0):
                return x * x0 + y0

    one_graph(fn, _t(3), Point(2, 3))


def test_match_dataclass_keyword():
    def fn(x):
        p = Point(1, 5)
        match p:
            case Point(x=1, y=yy) if yy > 2:
                return x * yy
            case _:
                return x

    one_graph(fn, _t(3))


def test_match_class_match_args():
    def fn(x):
        obj = Plain(x, 4)
        match obj:
            case Plain(t, 4):
                return t * 2
            case Plain(t, _):
                return t

    one_graph(fn, _t(3))


def test_match_namedtuple():
    def fn(p):
        match p:
            case Pair(left=l, right=None):
                return l
            case Pair(l, r):
                return l + r

    one_graph(fn, Pair(_t(2), _t(2, seed=1)))


def test_match_typed_namedtuple_as_sequence():
    def fn(t):
        match t:
            case (w, s):
                return w * s

    one_graph(fn, Typed(_t(3), 0.5))


def test_match_builtin_class_self():
    def fn(x, v):
        match v:
            case int(n):
                return x + n
            case str(s):
                return x, s
            case float():
                return x * v

    one_graph(fn, _t(3), 4)


def test_match_tensor_class_pattern():
    def fn(v):
        match v:
            case torch.Tensor():
                return v * 2
            case list():
                return v

    one_graph(fn, _t(3))


def test_match_tensor_is_not_a_sequence():
    def fn(v):
        match v:
            case [a, b]:
                return a
            case _:
                return v + 1

    one_graph(fn, _t(2))


def test_match_string_is_not_a_sequence():
    def fn(x, s):
        match s:
            case [a, b]:
                return x
            case str():
                return x * len(s)

    one_graph(fn, _t(2), "ab")


def test_match_as_pattern():
    def fn(xs):
        match xs:
            case [(a, b) as first, *_]:
                return a + b, len(first)

    one_graph(fn, [(_t(2), _t(2, seed=1)), (1, 2)])


def test_match_nested_patterns():
    def fn(cfg, x):
        match cfg:
            case {"layers": [{"kind": "linear", "scale": s}, *_]}:
                return x * s
            case {"layers": []}:
                return x

    one_graph(fn, {"layers": [{"kind": "linear", "scale": 3.0}, {"kind": "relu"}]}, _t(3))


def test_match_or_with_captures():
    def fn(x, v):
        match v:
            case (1, k) | (k, 1):
                return x + k
            case _:
                return x

    one_graph(fn, _t(2), (5, 1))


def test_match_value_pattern_dotted():
    def fn(x, dtype):
        match dtype:
            case torch.float32:
                return x.double()
            case torch.float64:
                return x.float()

    one_graph(fn, _t(2), torch.float32)
