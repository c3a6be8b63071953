"""F.interpolate with scale_factor on symbolic sizes (fake/symbolic_upsample.py): one dynamic entry for
every size, nearest / nearest-exact / (bi/tri)linear / bicubic, 1-d to 3-d; output sizes are ATen's
int64(double(in) * scale)."""
import pytest
import torch
import torch.nn.functional as F

from kiln.debug.stats import stats

from .harness import backends, check

SHORT = (8, 5, 13, 7)  # static at 8, one dynamic entry for the rest (odd sizes: floor matters)


def _nd(n: int, dims: int):
    return (torch.randn(*([1, 2] + [n + i for i in range(dims)])),)


@pytest.mark.parametrize("mode,dims,scale", [
    ("nearest", 1, 2.5), ("nearest", 2, 1.5), ("nearest", 3, 2), ("nearest-exact", 2, 1.25),
    ("linear", 1, 2), ("bilinear", 2, 0.75), ("bicubic", 2, 2), ("trilinear", 3, (2, 1.5, 0.5)),
])
def test_interpolate_scale_factor_modes(backend, mode, dims, scale):
    def f(x):
        return F.interpolate(x, scale_factor=scale, mode=mode)
    check(f, lambda n: _nd(n, dims), backend, sizes=SHORT, graphs=2)


def test_interpolate_bilinear_align_corners_scale_factor(backend):
    def f(x):
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True) * 2
    # (align_corners computes (in - 1) / (out - 1) as a float of sizes: per size, sound)
    check(f, lambda n: _nd(n, 2), backend, sizes=(8, 5), graphs=2)


def test_interpolate_nearest_then_conv_feature_pyramid(backend):
    """The U-Net / FPN decoder step: upsample by 2 and add the skip connection."""
    conv = torch.nn.Conv2d(2, 2, 3, padding=1)

    def f(coarse, skip):
        return conv(F.interpolate(coarse, scale_factor=2.0, mode="nearest") + skip)
    check(f, lambda n: (torch.randn(1, 2, n, n), torch.randn(1, 2, 2 * n, 2 * n)), backend, sizes=SHORT, graphs=2)


def test_interpolate_training(backend):
    def f(x):
        return F.interpolate(x, scale_factor=2, mode="bilinear").sin().sum()
    check(f, lambda n: _nd(n, 2), backend, sizes=SHORT, graphs=2, train=True)


def test_scale_whose_products_round_compiles_per_size(backend):
    """1/3 in double: in * scale rounds for some sizes, so the size cannot be a symbolic floor: the
    frame compiles with static sizes (one graph per size), counted as a dynamic fallback."""
    before = sum(v for k, v in stats.dynamic_fallbacks.items() if "rounds" in k)

    def f(x):
        return F.interpolate(x, scale_factor=1 / 3)
    check(f, lambda n: _nd(n, 2), backend, sizes=(9, 12), graphs=2)
    assert sum(v for k, v in stats.dynamic_fallbacks.items() if "rounds" in k) > before
