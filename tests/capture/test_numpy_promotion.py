"""kiln's NumPy dtype rules (values/numpy_promotion.py) against the installed NumPy, case by case."""
import itertools
import warnings

import numpy as np
import pytest

from kiln.capture.values import numpy_promotion as P
from kiln.errors import Unsupported

DTYPES = list(P.SUPPORTED)
PAIRS = list(itertools.product(DTYPES, DTYPES))
WEAK = [True, False, 0, 1, -1, 7, 127, 128, 255, 256, -129, 40000, 2**31, 2**63 - 1, 0.5, -2.0, 1e300]


def _ones(dtype):
    return np.ones(2, dtype=dtype)


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_promote_matches_numpy(a, b):
    assert P.promote(a, b) == np.promote_types(a, b)
    assert P.result_type([a, b]) == np.result_type(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_weak_python_scalars_match_numpy(dtype):
    """NEP 50: a Python number takes the array's dtype where its kind allows; out-of-range ints break."""
    for value in WEAK:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = (_ones(dtype) + value).dtype
        except OverflowError:
            with pytest.raises(Unsupported):
                P.result_type([dtype, value])
            continue
        assert P.result_type([dtype, value]) == expected, (dtype, value)


def test_python_scalars_only_use_default_dtypes():
    assert P.result_type([1, 2.5]) == np.result_type(1, 2.5)
    assert P.result_type([1, True]) == np.dtype(np.int64)
    assert P.result_type([True, False]) == np.dtype(np.bool_)


_UFUNCS = [name for name in P.UFUNC_RULES if hasattr(np, name)]
_UNARY = {"square", "invert", "negative", "positive", "absolute", "sign", "floor", "ceil", "rint", "sqrt", "exp", "log", "sin", "cos",
          "tan", "tanh", "arctan", "log1p", "expm1", "log2", "log10", "exp2"}


@pytest.mark.parametrize("name", _UFUNCS)
def test_ufunc_result_dtypes_match_numpy(name):
    fn = getattr(np, name)
    cases = [(d,) for d in DTYPES] if name in _UNARY else PAIRS
    for dtypes in cases:
        promoted = P.result_type(list(dtypes))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = fn(*[_ones(d) for d in dtypes]).dtype
        except TypeError:
            with pytest.raises(Unsupported):
                P.ufunc_dtypes(name, promoted)
            continue
        assert P.ufunc_dtypes(name, promoted)[1] == expected, (name, dtypes)


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_same_kind_casting_matches_numpy(a, b):
    assert P.can_cast_same_kind(a, b) == np.can_cast(a, b, "same_kind")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_reduction_dtypes_match_numpy(dtype):
    x = _ones(dtype)
    if dtype.kind == "u":
        with pytest.raises(Unsupported):
            P.sum_dtype(dtype)
    else:
        assert P.sum_dtype(dtype) == np.sum(x).dtype == np.prod(x).dtype
    assert P.mean_dtype(dtype) == np.mean(x).dtype == np.std(x).dtype == np.var(x).dtype


def test_unsupported_dtypes_break():
    for name in ("uint16", "uint32", "uint64", "complex64", "complex128", "datetime64[s]", "U3", "O"):
        with pytest.raises(Unsupported):
            P.check_dtype(np.dtype(name), "a test")
    with pytest.raises(Unsupported):
        P.result_type([np.dtype(np.float64), 1j])


def test_torch_dtype_table_is_a_bijection():
    import torch

    assert len(set(P.NUMPY_TO_TORCH.values())) == len(P.NUMPY_TO_TORCH)
    for npd, td in P.NUMPY_TO_TORCH.items():
        assert torch.empty(0, dtype=td).numpy().dtype == npd


@pytest.mark.parametrize("name", [n for n in _UFUNCS if n not in _UNARY])
def test_ufuncs_with_weak_scalars_match_numpy(name):
    fn = getattr(np, name)
    for dtype in DTYPES:
        for value in (True, 0, 3, -2, 300, 0.5):
            for args in ((_ones(dtype), value), (value, _ones(dtype))):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        expected = fn(*args).dtype
                except ValueError:
                    continue  # int ** negative int: checked by the power handler, not by the dtype rules
                except (TypeError, OverflowError):
                    with pytest.raises(Unsupported):
                        P.ufunc_dtypes(name, P.result_type([dtype, value]))
                    continue
                try:
                    got = P.ufunc_dtypes(name, P.result_type([dtype, value]))[1]
                except Unsupported:
                    continue  # kiln breaks where NumPy would not (e.g. out-of-range ints in comparisons)
                assert got == expected, (name, dtype, value)
