"""Unit tests of fake/symbolic_upsample.py: ATen's output sizes of F.interpolate on symbolic sizes, and
fake outputs of the upsample ops."""
import pytest
import torch

from kiln.fake.symbolic import ShapeEnv, symbolic_fake
from kiln.fake.symbolic_meta import SymbolicShapeUnsupported
from kiln.fake.symbolic_upsample import interpolate, scaled_size

aten = torch.ops.aten


def _x(*shape, dims=(2, 3)):
    env = ShapeEnv()
    return env, symbolic_fake(torch.randn(*shape), env, "L['x']", set(dims))


@pytest.mark.parametrize("scale", [2.0, 1.5, 0.75, 2.5, 1.25, 0.5, 3.0])
def test_scaled_size_is_atens_truncated_double_product(scale):
    env, x = _x(1, 1, 8, 9)
    out = scaled_size(x.shape[2], scale)
    expr = out.node.expr
    assert len(expr.free_symbols) == 1
    for n in range(2, 300):
        assert int(expr.subs({sym: n for sym in expr.free_symbols})) == int(float(n) * scale), (n, scale)


def test_scaled_size_refuses_scales_whose_products_round():
    env, x = _x(1, 1, 8, 9)
    with pytest.raises(SymbolicShapeUnsupported):
        scaled_size(x.shape[2], 1 / 3)
    with pytest.raises(SymbolicShapeUnsupported):
        scaled_size(x.shape[2], 0.0)
    assert scaled_size(7, 1 / 3) == int(7.0 * (1 / 3))  # (plain sizes: computed as ATen does)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "nearest-exact"])
def test_interpolate_fake_output_sizes(mode):
    env, x = _x(1, 2, 8, 9)
    out = interpolate(x, scale_factor=1.5, mode=mode)
    assert [str(s) for s in out.shape[2:]] == [str(scaled_size(x.shape[2], 1.5)), str(scaled_size(x.shape[3], 1.5))]
    assert all(s.node.expr.free_symbols for s in out.shape[2:])
    assert out.shape[:2] == (1, 2) and out.is_contiguous()


def test_interpolate_defers_to_torch_for_what_it_does_not_cover():
    env, x = _x(1, 2, 8, 9)
    assert interpolate(x, scale_factor=2, mode="area") is NotImplemented
    assert interpolate(x, scale_factor=2, mode="bilinear", antialias=True) is NotImplemented


def test_upsample_backward_fake():
    env, x = _x(1, 2, 8, 9)
    out = aten.upsample_bilinear2d.default(x, [x.shape[2] * 2, x.shape[3] * 2], False, 2.0, 2.0)
    grad = aten.upsample_bilinear2d_backward.default(out, list(out.shape[2:]), list(x.shape), False, 2.0, 2.0)
    assert grad.shape == x.shape
