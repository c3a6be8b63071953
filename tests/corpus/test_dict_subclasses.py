"""Objects of Python dict / OrderedDict subclasses made in the compiled function (the shape of
HuggingFace's ModelOutput: a dataclass over an OrderedDict whose __setattr__ / __setitem__ keep
attributes and items in step), Python __setattr__ on new objects, dataclasses.fields()."""
import collections
import dataclasses
from typing import Optional

import torch

from .harness import check, dynamo_bug, compile_fn, CountingBackend, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class Output(collections.OrderedDict):
    """A copy of the parts of transformers' ModelOutput that models use."""

    def __post_init__(self):
        class_fields = dataclasses.fields(self)
        if not all(field.default is None for field in class_fields[1:]):
            raise ValueError("more than one required field")
        for field in class_fields:
            v = self.__dict__.get(field.name)
            if v is not None:
                self[field.name] = v

    def __setattr__(self, name, value):
        field_names = {field.name for field in dataclasses.fields(self)}
        if name in field_names and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class LayerOutput(Output):
    hidden: Optional[torch.Tensor] = None
    attentions: Optional[tuple] = None
    extra: Optional[torch.Tensor] = None


def _describe(out):
    return type(out).__name__, list(out.keys()), list(out.values()), dict(vars(out))


def test_model_output_like_object_built_and_read():
    def fn(x):
        out = LayerOutput(hidden=x * 2, attentions=(x + 1,))
        y = out.hidden + out[0] + out["hidden"] + out.attentions[0]
        return y, len(out), list(out.keys()), out.to_tuple()[1][0], "extra" in out, out.extra is None

    check(fn, _t(3), graphs=1, fullgraph=True)


def test_model_output_like_object_returned_is_rebuilt_exactly():
    def fn(x):
        out = LayerOutput(x.relu())
        out["extra"] = x - 1  # item and attribute
        out.attentions = (x,)  # a field set after construction: an item too
        return out

    reset()
    counter = CountingBackend()
    got = compile_fn(fn, counter, fullgraph=True)(_t(4))
    want = fn(_t(4))
    assert len(counter.graphs) == 1
    assert type(got) is LayerOutput
    g, w = _describe(got), _describe(want)
    assert g[0] == w[0] and g[1] == w[1]
    torch.testing.assert_close(g[2], w[2])
    torch.testing.assert_close(g[3], w[3])
    assert got.to_tuple()[0] is got.hidden


def test_model_output_like_object_none_fields_are_not_items():
    def fn(x):
        out = LayerOutput(hidden=x, attentions=None)
        return [k for k in out], out.attentions, tuple(out.values()), out.hidden + 1

    check(fn, _t(3), graphs=1, fullgraph=True)


class Bag(dict):
    def __init__(self, tag, **items):
        super().__init__(**items)
        self.tag = tag

    def total(self):
        return sum(self.values())


def test_plain_dict_subclass_with_python_init():
    def fn(x):
        bag = Bag("b", a=x, b=x * 2)
        bag["c"] = x + 1
        return bag.total(), bag.tag, sorted(bag), bag.get("zzz", 0), len(bag)

    check(fn, _t(3), graphs=1, fullgraph=True)


class Clamped:
    def __init__(self, v):
        self.v = v

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value.clamp(-1, 1) if isinstance(value, torch.Tensor) else value)


def test_python_setattr_of_new_object_runs():
    def fn(x):
        c = Clamped(x * 3)
        c.w = x * 5
        return c.v, c.w

    check(fn, _t(5), graphs=1, fullgraph=True)


@dataclasses.dataclass
class Hyper:
    lr: float = 0.1
    momentum: float = 0.9


@dynamo_bug("Unsupported: dataclass fields failure for the class itself under fullgraph (torch 2.13)", strict=False)
def test_dataclasses_fields_of_argument_and_class():
    def fn(x, h):
        names = [f.name for f in dataclasses.fields(h)]
        total = sum(getattr(h, n) for n in names)
        return x * total, names, dataclasses.is_dataclass(h), len(dataclasses.fields(Hyper))

    check(fn, _t(3), Hyper(0.5, 0.25), graphs=1, fullgraph=True)
