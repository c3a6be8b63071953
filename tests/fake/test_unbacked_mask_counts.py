"""One unbacked count per tensor and version (fake/unbacked.py: count_source)."""
import torch

from kiln.fake import fake_from_real
from kiln.fake.symbolic import ShapeEnv
from kiln.fake.unbacked import allow_unbacked, count_source

aten = torch.ops.aten


def test_the_same_mask_gives_the_same_count():
    env = ShapeEnv()
    x, y = fake_from_real(torch.randn(4, 5)), fake_from_real(torch.randn(4, 5))
    m = fake_from_real(torch.rand(4, 5) > 0.5)
    with allow_unbacked(env):
        a, b = x[m], y[m]
        assert str(a.shape[0]) == str(b.shape[0]) == "u0"
        assert str(torch.nonzero(m).shape[0]) == "u0" and str(x.masked_select(m).shape[0]) == "u0"
        assert tuple((a - b).shape) == tuple(a.shape)  # no data-dependent decision
        assert str(x[fake_from_real(torch.rand(4, 5) > 0.5)].shape[0]) == "u1"  # another mask
    assert env.unbacked_failed is None and not env.guards


def test_a_write_to_the_mask_makes_a_new_count():
    env = ShapeEnv()
    x = fake_from_real(torch.randn(4, 5))
    m = fake_from_real(torch.rand(4, 5) > 0.5)
    with allow_unbacked(env):
        first = x[m].shape[0]
        m.view(-1).logical_not_()  # (through a view: the version counter is shared)
        second = x[m].shape[0]
        assert str(first) == "u0" and str(second) == "u1"
        assert str(x[m].shape[0]) == "u1"  # (the new version's count is kept)


def test_count_source_covers_only_counts_of_one_tensor():
    x = fake_from_real(torch.randn(4, 5))
    m = fake_from_real(torch.rand(4, 5) > 0.5)
    row = fake_from_real(torch.rand(5) > 0.5)
    assert count_source(aten.index.Tensor, (x, [m]), {}) is m
    assert count_source(aten.nonzero.default, (m,), {}) is m
    assert count_source(aten.masked_select.default, (x, m), {}) is m
    assert count_source(aten.masked_select.default, (x, row), {}) is None  # (a broadcast mask: more elements)
    assert count_source(aten._unique2.default, (x,), {}) is None
    assert count_source(aten.index.Tensor, (x, [m, m]), {}) is None
