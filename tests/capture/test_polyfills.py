"""Library functions kiln traces its own Python version of (kiln/capture/polyfills.py), end to end."""
import copy

import pytest
import torch

import kiln
from kiln.debug.stats import stats


def _models():
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return m1, copy.deepcopy(m1)


@pytest.mark.parametrize("max_norm,norm_type", [(0.05, 2.0), (10.0, 2.0), (0.05, float("inf")), (0.1, 1)])
def test_clip_grad_norm_in_the_graph(max_norm, norm_type):
    m1, m2 = _models()
    m1[2].bias.requires_grad_(False)  # a parameter without a gradient
    m2[2].bias.requires_grad_(False)

    def step(m, x):
        m(x).square().mean().backward()
        total = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm, norm_type=norm_type)
        return total * 2

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(step)
    for i in range(2):
        for m in (m1, m2):
            m.zero_grad()
        x = torch.randn(4, 8)
        torch.testing.assert_close(compiled(m2, x), step(m1, x))
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q.grad, p.grad)
    assert dict(stats.graph_breaks) == {"Tensor.backward() needs the tensor's data": 1}


def test_clip_grad_value_and_a_list_of_parameters():
    m1, m2 = _models()

    def step(m, x):
        m(x).sum().backward()
        torch.nn.utils.clip_grad_value_(list(m.parameters()), 0.01)
        return torch.nn.utils.clip_grad_norm_([p for p in m.parameters()], 1e-3)

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(step)
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(m2, x), step(m1, x))
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    assert len(stats.graph_breaks) == 1


def test_what_the_polyfill_leaves_to_the_library():
    m1, m2 = _models()

    def step(m, x):
        m(x).sum().backward()
        return torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3, error_if_nonfinite=True)

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(step)
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(m2, x), step(m1, x))
    assert any("error_if_nonfinite" in reason for reason in stats.graph_breaks)
    with pytest.warns(UserWarning, match="empty generator"):
        kiln.compile(lambda: torch.nn.utils.clip_grad_norm_((p for p in []), 1.0))()


def _dataclass_example():
    import collections
    import dataclasses

    @dataclasses.dataclass
    class Inner:
        a: int = 1
        t: object = None

    @dataclasses.dataclass
    class Outer:
        inner: Inner
        xs: list
        d: dict

    nt = collections.namedtuple("nt", "p q")
    obj = Outer(Inner(2, [1, (2, 3)]), [Inner(), nt(1, Inner(4))], {"k": (Inner(5),), 3: None})
    return obj, Outer, nt


def test_dataclass_asdict_polyfill_matches_the_library():
    import collections
    import dataclasses

    from kiln.capture.polyfills import dataclass_asdict

    obj, Outer, nt = _dataclass_example()
    for factory in (dict, collections.OrderedDict):
        assert dataclass_asdict(obj, dict_factory=factory) == dataclasses.asdict(obj, dict_factory=factory)
    assert dataclass_asdict(obj)["xs"][1] == nt(1, {"a": 4, "t": None})
    for bad in (Outer, 3):
        with pytest.raises(TypeError, match=r"^asdict\(\) should be called on dataclass instances$"):
            dataclass_asdict(bad)


def test_dataclass_astuple_polyfill_matches_the_library():
    import dataclasses

    from kiln.capture.polyfills import dataclass_astuple

    obj, Outer, nt = _dataclass_example()
    for factory in (tuple, list):
        assert dataclass_astuple(obj, tuple_factory=factory) == dataclasses.astuple(obj, tuple_factory=factory)
    assert dataclass_astuple(obj)[1][1] == nt(1, (4, None))
    assert dataclass_astuple(obj)[0][1] is not obj.inner.t  # deep-copied, as the library's
    for bad in (Outer, 3):
        with pytest.raises(TypeError, match=r"^astuple\(\) should be called on dataclass instances$"):
            dataclass_astuple(bad)
