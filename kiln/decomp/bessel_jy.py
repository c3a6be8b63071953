"""Decompositions: ``torch.special``'s Bessel functions of the first kind (j0, j1), ``ndtri`` and ``airy_ai`` as
ATen's ``Math.h`` computes them: rational approximations (Horner over its tables) below 5, the
asymptotic form with phase ``x - pi/4`` (``x - 3 pi/4``) above, both computed and selected per element.
"""
from __future__ import annotations

import math

import torch

from kiln.decomp.bessel_special import _register
from kiln.decomp.special_math import polevl
from kiln.decomp.utils import round_scalar, scalar_like

aten = torch.ops.aten

_J0_PP = (
    7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00, 5.44725003058768775090e+00,
    8.74716500199817011941e+00, 5.30324038235394892183e+00, 9.99999999999999997821e-01,
)
_J0_PQ = (
    9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00, 5.47097740330417105182e+00,
    8.76190883237069594232e+00, 5.30605288235394617618e+00, 1.00000000000000000218e+00,
)
_J0_QP = (
    -1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01, -9.32060152123768231369e+01,
    -1.77681167980488050595e+02, -1.47077505154951170175e+02, -5.14105326766599330220e+01, -6.05014350600728481186e+00,
)
_J0_QQ = (
    6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03, 7.24046774195652478189e+03,
    5.93072701187316984827e+03, 2.06209331660327847417e+03, 2.42005740240291393179e+02,
)
_J0_RP = (
    -4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14, 9.70862251047306323952e+15,
)
_J0_RQ = (
    4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07, 1.11855537045356834862e+10,
    2.11277520115489217587e+12, 3.10518229857422583814e+14, 3.18121955943204943306e+16, 1.71086294081043136091e+18,
)
_J1_PP = (
    7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00, 5.11207951146807644818e+00,
    8.42404590141772420927e+00, 5.21451598682361504063e+00, 1.00000000000000000254e+00,
)
_J1_PQ = (
    5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00, 5.07386386128601488557e+00,
    8.39985554327604159757e+00, 5.20982848682361821619e+00, 9.99999999999999997461e-01,
)
_J1_QP = (
    5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01, 3.66779609360150777800e+02,
    7.10856304998926107277e+02, 5.97489612400613639965e+02, 2.11688757100572135698e+02, 2.52070205858023719784e+01,
)
_J1_QQ = (
    7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03, 9.56231892404756170795e+03,
    7.99704160447350683650e+03, 2.82619278517639096600e+03, 3.36093607810698293419e+02,
)
_J1_RP = (
    -8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13, 3.68295732863852883286e+15,
)
_J1_RQ = (
    6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07, 2.21511595479792499675e+10,
    4.74914122079991414898e+12, 7.84369607876235854894e+14, 8.95222336184627338078e+16, 5.32278620332680085395e+18,
)

_SQRT_TWO_OVER_PI = 0.797884560802865355879892119868763737
_PI_4 = 0.785398163397448309615660845819875721
_3PI_4 = 2.356194490192344928846982537459627163


def _c(x, value):
    return scalar_like(value, x)


def _ratio(z, p, q):
    return aten.div.Tensor(polevl(z, p), polevl(z, q))


def _asymptotic(x, z, tables, phase):
    """``(P(z)/Q(z) cos(x - phase) - 5/x P'(z)/Q'(z) sin(x - phase)) * sqrt(2/pi) / sqrt(x)``."""
    pp, pq, qp, qq = tables
    shifted = aten.sub.Scalar(x, phase)
    lead = aten.mul.Tensor(_ratio(z, pp, pq), aten.cos.default(shifted))
    tail = aten.mul.Tensor(aten.mul.Tensor(aten.div.Tensor(_c(x, 5.0), x), _ratio(z, qp, qq)), aten.sin.default(shifted))
    return aten.div.Tensor(aten.mul.Scalar(aten.sub.Tensor(lead, tail), _SQRT_TWO_OVER_PI), aten.sqrt.default(x))


def _z25(x):  # 25 / (x * x)
    return aten.div.Tensor(_c(x, 25.0), aten.mul.Tensor(x, x))


def _z5(x):  # 5 / x * (5 / x)
    five = aten.div.Tensor(_c(x, 5.0), x)
    return aten.mul.Tensor(five, five)


def _j0_forward(x):
    x = aten.abs.default(x)
    xx = aten.mul.Tensor(x, x)
    tiny = aten.rsub.Scalar(aten.div.Scalar(xx, 4.0), 1.0)
    near = aten.div.Tensor(aten.mul.Tensor(aten.mul.Tensor(aten.sub.Scalar(xx, 5.78318596294678452118e+00),
                                                           aten.sub.Scalar(xx, 3.04712623436620863991e+01)),
                                           polevl(xx, _J0_RP)), polevl(xx, _J0_RQ))
    near = aten.where.self(aten.lt.Scalar(x, 0.00001), tiny, near)
    far = _asymptotic(x, _z25(x), (_J0_PP, _J0_PQ, _J0_QP, _J0_QQ), _PI_4)
    return aten.where.self(aten.le.Scalar(x, 5.0), near, far)


def _j1_forward(x):
    a = aten.abs.default(x)
    xx = aten.mul.Tensor(a, a)
    near = aten.mul.Tensor(aten.mul.Tensor(aten.mul.Tensor(aten.div.Tensor(polevl(xx, _J1_RP), polevl(xx, _J1_RQ)), a),
                                           aten.sub.Scalar(xx, 1.46819706421238932572e+01)),
                           aten.sub.Scalar(xx, 4.92184563216946036703e+01))
    far = _asymptotic(a, _z5(a), (_J1_PP, _J1_PQ, _J1_QP, _J1_QQ), _3PI_4)
    out = aten.where.self(aten.le.Scalar(a, 5.0), near, far)
    return aten.where.self(aten.lt.Scalar(x, 0.0), aten.neg.default(out), out)


def _positive_log(x):
    return aten.log.default(aten.where.self(aten.gt.Scalar(x, 0.0), x, _c(x, 1.0)))


# y0 and y1 keep ATen's kernels: computing both of their branches (and j0/j1 inside one) made them about
# 1.5x slower than eager's per-element branch on CPU.
_register(aten.special_bessel_j0.default, _j0_forward)
_register(aten.special_bessel_j1.default, _j1_forward)


# ----------------------------------------------------------------------------- ndtri (cephes, ATen's calc_ndtri)
_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1, 1.39312609387279679503E1,
             -1.23916583867381258016E0)
_NDTRI_Q0 = (1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1, 1.59056225126211695515E1,
             -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1, 4.40805073893200834700E1,
             1.46849561928858024014E1, 2.18663306850790267539E0, -1.40256079171354495875E-1, -3.50424626827848203418E-2,
             -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1, -3.80806407691578277194E-2,
             -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0, 1.33303460815807542389E0,
             2.01485389549179081538E-1, 1.23716634817820021358E-2, 3.01581553508235416007E-4, 2.65806974686737550832E-6,
             6.23974539184983293730E-9)
_NDTRI_Q2 = (1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4, 2.89247864745380683936E-6,
             6.79019408009981274425E-9)
_EXP_MINUS_2 = 0.13533528323661269189
_SQRT_2PI = 2.50662827463100050242E0


def _ndtri(y0):
    """The inverse of the normal CDF: a rational form around 1/2, ``sqrt(-2 log y)`` tails (y flipped
    above 1 - e^-2, the sign restored); -inf at 0, inf at 1, NaN outside [0, 1]."""
    upper = aten.gt.Scalar(y0, round_scalar(1.0 - round_scalar(_EXP_MINUS_2, y0.dtype), y0.dtype))
    y = aten.where.self(upper, aten.rsub.Scalar(y0, 1.0), y0)
    yc = aten.sub.Scalar(y, 0.5)
    y2 = aten.mul.Tensor(yc, yc)
    central = aten.mul.Scalar(aten.add.Tensor(yc, aten.mul.Tensor(yc, _ratio_scaled(y2, y2, _NDTRI_P0, _NDTRI_Q0))), _SQRT_2PI)
    x = aten.sqrt.default(aten.mul.Scalar(_positive_log(y), -2.0))
    x0 = aten.sub.Tensor(x, aten.div.Tensor(_positive_log(x), x))
    z = aten.reciprocal.default(x)
    x1 = aten.where.self(aten.lt.Scalar(x, 8.0), _ratio_scaled(z, z, _NDTRI_P1, _NDTRI_Q1), _ratio_scaled(z, z, _NDTRI_P2, _NDTRI_Q2))
    tail = aten.sub.Tensor(x0, x1)
    tail = aten.where.self(upper, tail, aten.neg.default(tail))
    out = aten.where.self(aten.gt.Scalar(y, _EXP_MINUS_2), central, tail)
    out = aten.where.self(aten.logical_or.default(aten.lt.Scalar(y0, 0.0), aten.gt.Scalar(y0, 1.0)), _c(y0, math.nan), out)
    out = aten.where.self(aten.eq.Scalar(y0, 1.0), _c(y0, math.inf), out)
    return aten.where.self(aten.eq.Scalar(y0, 0.0), _c(y0, -math.inf), out)


def _ratio_scaled(scale, z, p, q):
    """``scale * P(z) / Q(z)`` in cephes' order."""
    return aten.div.Tensor(aten.mul.Tensor(scale, polevl(z, p)), polevl(z, q))


_register(aten.special_ndtri.default, _ndtri)


# ----------------------------------------------------------------------------- Airy Ai (cephes, ATen's airy_ai_forward)
_AIRY_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01, 1.68089224934630576269e+02,
            1.59756391350164413639e+02, 7.05360906840444183113e+01, 1.40264691163389668864e+01, 9.99999999999999995305e-01)
_AIRY_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01, 1.77318088145400459522e+02,
            1.64234692871529701831e+02, 7.14778400825575695274e+01, 1.40959135607834029598e+01, 1.00000000000000000470e+00)
_AIRY_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01, -2.79779981545119124951e-01,
             -4.91900132609500318020e-02, -4.06265923594885404393e-03, -1.59276496239262096340e-04, -2.77649108155232920844e-06,
             -1.67787698489114633780e-08)
_AIRY_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01, 9.18707402907259625840e+00,
             1.47529146771666414581e+00, 1.15687173795188044134e-01, 4.40291641615211203805e-03, 7.54720348287414296618e-05,
             4.51850092970580378464e-07)
_AIRY_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00, 9.39169229816650230044e-01,
             3.51465656105547619242e-01, 6.33888919628925490927e-02, 5.85804113048388458567e-03, 2.82851600836737019778e-04,
             6.98793669997260967291e-06, 8.11789239554389293311e-08, 3.41551784765923618484e-10)
_AIRY_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01, 5.47686069422975497931e+00,
             9.54293611618961883998e-01, 8.64580826352392193095e-02, 4.12656523824222607191e-03, 1.01259085116509135510e-04,
             1.17166733214413521882e-06, 4.91834570062930015649e-09)
_AIRY_C = 5.64189583547756286948e-01
# The power series runs while its last term is above machine epsilon: for |x| < 2.09 (the only inputs it
# serves) that is at most 12 rounds in double; the steps are unrolled, each applied only where still running.
_AIRY_SERIES_ROUNDS = 20


def _airy_series(x):
    eps = torch.finfo(x.dtype).eps
    f, g, m, n = _c(x, 1.0), x, _c(x, 1.0), x
    z = aten.mul.Tensor(aten.mul.Tensor(x, x), x)
    running = aten.gt.Scalar(aten.abs.default(x), -1.0)  # (every element: t starts at 1)
    for j in range(_AIRY_SERIES_ROUNDS):
        k1, k2, k3 = 3 * j + 2.0, 3 * j + 3.0, 3 * j + 4.0
        m_next = aten.div.Scalar(aten.div.Scalar(aten.mul.Tensor(m, z), k1), k2)
        n_next = aten.div.Scalar(aten.div.Scalar(aten.mul.Tensor(n, z), k2), k3)
        f_next, g_next = aten.add.Tensor(f, m_next), aten.add.Tensor(g, n_next)
        m, n = aten.where.self(running, m_next, m), aten.where.self(running, n_next, n)
        f, g = aten.where.self(running, f_next, f), aten.where.self(running, g_next, g)
        running = aten.logical_and.default(running, aten.gt.Scalar(aten.abs.default(aten.div.Tensor(m, f)), eps))
    return aten.sub.Tensor(aten.mul.Scalar(f, 0.355028053887817239260), aten.mul.Scalar(g, 0.258819403792806798405))


def _airy_ai(x):
    """ATen's airy_ai: the asymptotic forms below -2.09 and from 2.09, the power series between; 0 above
    103.892, NaN at +-inf."""
    neg = aten.neg.default(x)
    s = aten.div.Scalar(aten.mul.Tensor(aten.mul.Scalar(x, -2.0), aten.sqrt.default(neg)), 3.0)  # -2 x sqrt(-x) / 3
    z = aten.reciprocal.default(s)
    zz = aten.mul.Tensor(z, z)
    t = aten.add.Scalar(s, 0.25 * round_scalar(math.pi, x.dtype))
    oscillating = aten.sub.Tensor(
        aten.mul.Tensor(aten.sin.default(t), aten.add.Scalar(aten.div.Tensor(aten.mul.Tensor(zz, polevl(zz, _AIRY_AFN)),
                                                                            polevl(zz, _AIRY_AFD)), 1.0)),
        aten.mul.Tensor(aten.cos.default(t), aten.div.Tensor(aten.mul.Tensor(z, polevl(zz, _AIRY_AGN)), polevl(zz, _AIRY_AGD))))
    negative = aten.mul.Tensor(aten.div.Tensor(_c(x, _AIRY_C), aten.sqrt.default(aten.sqrt.default(neg))), oscillating)
    zeta = aten.div.Scalar(aten.mul.Tensor(aten.mul.Scalar(x, 2.0), aten.sqrt.default(x)), 3.0)
    inv = aten.reciprocal.default(zeta)
    decaying = aten.div.Tensor(aten.mul.Scalar(aten.div.Tensor(polevl(inv, _AIRY_AN), polevl(inv, _AIRY_AD)), _AIRY_C),
                               aten.mul.Tensor(aten.mul.Scalar(aten.sqrt.default(aten.sqrt.default(x)), 2.0),
                                               aten.exp.default(zeta)))
    out = aten.where.self(aten.lt.Scalar(x, -2.09), negative,
                          aten.where.self(aten.ge.Scalar(x, 2.09), decaying, _airy_series(x)))
    out = aten.where.self(aten.gt.Scalar(x, 103.892), _c(x, 0.0), out)
    return aten.where.self(aten.isinf.default(x), _c(x, math.nan), out)


_register(aten.special_airy_ai.default, _airy_ai)
