"""Decompositions: ``torch.special``'s modified Bessel functions (I0, I1, K0, K1, scaled K0/K1) and the
spherical Bessel j0, as ATen's ``Math.h`` computes them: Chebyshev recurrences over its coefficient
tables (``chbevl``), branch by branch, with both branches computed and selected per element.
"""
from __future__ import annotations

import math

import torch

from kiln.decomp.bessel import _I0E_A, _I0E_B, _I1E_A, _I1E_B, chbevl
from kiln.decomp.registry import decomposition
from kiln.decomp.special_math import float_result
from kiln.decomp.utils import round_scalar, scalar_like, to_dtype

aten = torch.ops.aten

_K0_A = (
    1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11, 1.90451637722020886025e-09,
    2.53479107902614945675e-07, 2.28621210311945178607e-05, 1.26461541144692592338e-03, 3.59799365153615016266e-02,
    3.44289899924628486886e-01, -5.35327393233902768720e-01,
)
_K0_B = (
    5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17, -1.67823109680541210385e-16,
    5.51205597852431940784e-16, -1.84859337734377901440e-15, 6.34007647740507060557e-15, -2.22751332699166985548e-14,
    8.03289077536357521100e-14, -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
    1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10, -1.69753450938905987466e-09,
    8.57403401741422608519e-09, -4.66048989768794782956e-08, 2.76681363944501510342e-07, -1.83175552271911948767e-06,
    1.39498137188764993662e-05, -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
    2.44030308206595545468e+00,
)
_K1_A = (
    -7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13, -1.41148839263352776110e-10,
    -2.21338763073472585583e-08, -2.43340614156596823496e-06, -1.73028895751305206302e-04, -6.97572385963986435018e-03,
    -1.22611180822657148235e-01, -3.53155960776544875667e-01, 1.52530022733894777053e+00,
)
_K1_B = (
    -5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17, 1.83809354436663880070e-16,
    -6.05704724837331885336e-16, 2.03870316562433424052e-15, -7.01983709041831346144e-15, 2.47715442448130437068e-14,
    -8.97670518232499435011e-14, 3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
    -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10, 2.01504975519703286596e-09,
    -1.03457624656780970260e-08, 5.74108412545004946722e-08, -3.50196060308781257119e-07, 2.40648494783721712015e-06,
    -1.93619797416608296024e-05, 1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
    2.72062619048444266945e+00,
)


def _c(x, value):
    return scalar_like(value, x)


def _i0_forward(x):
    a = aten.abs.default(x)
    e = aten.exp.default(a)
    near = aten.mul.Tensor(e, chbevl(aten.sub.Scalar(aten.div.Scalar(a, 2.0), 2.0), _I0E_A))
    far = aten.div.Tensor(aten.mul.Tensor(e, chbevl(aten.sub.Scalar(aten.div.Tensor(_c(a, 32.0), a), 2.0), _I0E_B)),
                          aten.sqrt.default(a))
    return aten.where.self(aten.le.Scalar(a, 8.0), near, far)


def _i1_forward(x):
    a = aten.abs.default(x)
    e = aten.exp.default(a)
    near = aten.mul.Tensor(aten.mul.Tensor(chbevl(aten.sub.Scalar(aten.div.Scalar(a, 2.0), 2.0), _I1E_A), a), e)
    far = aten.div.Tensor(aten.mul.Tensor(e, chbevl(aten.sub.Scalar(aten.div.Tensor(_c(a, 32.0), a), 2.0), _I1E_B)),
                          aten.sqrt.default(a))
    out = aten.where.self(aten.le.Scalar(a, 8.0), near, far)
    return aten.where.self(aten.lt.Scalar(x, 0.0), aten.neg.default(out), out)


def _k_domain(x, out):
    """K0 and K1 (scaled or not): +inf at 0, NaN below."""
    out = aten.where.self(aten.lt.Scalar(x, 0.0), _c(x, math.nan), out)
    return aten.where.self(aten.eq.Scalar(x, 0.0), _c(x, math.inf), out)


def _near_k(x, table):
    return chbevl(aten.sub.Scalar(aten.mul.Tensor(x, x), 2.0), table)


def _far_k(x, table):
    return chbevl(aten.sub.Scalar(aten.div.Tensor(_c(x, 8.0), x), 2.0), table)


def _log_half(x):
    """log(x / 2) where x > 0 (elsewhere the result is not selected: no log of x <= 0, libm's slow path)."""
    return aten.log.default(aten.mul.Scalar(aten.where.self(aten.gt.Scalar(x, 0.0), x, _c(x, 1.0)), 0.5))


def _k_forward(x, order: int, scaled: bool):
    """K0 / K1 (``order``), times exp(x) when ``scaled``: below 2 the series in ``x * x - 2`` with
    ``log(x / 2)`` times I0 / I1, above it the series in ``8 / x - 2`` over ``sqrt(x)``."""
    near_table, far_table = (_K0_A, _K0_B) if order == 0 else (_K1_A, _K1_B)
    log_i = aten.mul.Tensor(_log_half(x), (_i0_forward if order == 0 else _i1_forward)(x))
    series = _near_k(x, near_table)
    near = aten.sub.Tensor(series, log_i) if order == 0 else aten.add.Tensor(log_i, aten.div.Tensor(series, x))
    far = _far_k(x, far_table)
    if scaled:
        near = aten.mul.Tensor(near, aten.exp.default(x))
    else:
        far = aten.mul.Tensor(aten.exp.default(aten.neg.default(x)), far)
    far = aten.div.Tensor(far, aten.sqrt.default(x))
    return _k_domain(x, aten.where.self(aten.le.Scalar(x, 2.0), near, far))


def _spherical_j0_forward(x):
    """0 at +-inf; an even series below |x| = 1/2 (ATen's nested form, constants divided in the dtype);
    else sin(x) / x."""
    xx = aten.mul.Tensor(x, x)
    series = _c(x, round_scalar(1.0 / 6227020800.0, x.dtype))
    for d in (-39916800.0, 362880.0, -5040.0, 120.0, -6.0):
        series = aten.add.Tensor(_c(x, round_scalar(1.0 / d, x.dtype)), aten.mul.Tensor(xx, series))
    series = aten.add.Scalar(aten.mul.Tensor(xx, series), 1.0)
    out = aten.where.self(aten.lt.Scalar(aten.abs.default(x), 0.5), series,
                          aten.div.Tensor(aten.sin.default(x), x))
    return aten.where.self(aten.isinf.default(x), _c(x, 0.0), out)


def _register(op, fn):
    def decompose(x):
        dtype = float_result(x)
        if dtype not in (torch.float32, torch.float64):
            return NotImplemented
        return fn(to_dtype(x, dtype))

    decompose.__name__ = fn.__name__.strip("_")
    decomposition(op)(decompose)


_register(aten.special_modified_bessel_i0.default, _i0_forward)
_register(aten.special_modified_bessel_i1.default, _i1_forward)
def _k0(x):
    return _k_forward(x, 0, False)


def _k1(x):
    return _k_forward(x, 1, False)


def _scaled_k0(x):
    return _k_forward(x, 0, True)


def _scaled_k1(x):
    return _k_forward(x, 1, True)


_register(aten.special_modified_bessel_k0.default, _k0)
_register(aten.special_modified_bessel_k1.default, _k1)
_register(aten.special_scaled_modified_bessel_k0.default, _scaled_k0)
_register(aten.special_scaled_modified_bessel_k1.default, _scaled_k1)
_register(aten.special_spherical_bessel_j0.default, _spherical_j0_forward)
