"""NumPy expressions and statements over random dtype pairs, compiled by kiln and run by NumPy: results
(type, dtype, shape, values) and the arguments afterwards must agree, in one graph where NumPy does
not raise. A broad net under the hand-written cases of tests/corpus/test_numpy.py."""
import random
import warnings

import numpy as np
import pytest
import torch

import kiln

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16, np.float32, np.float64]

EXPRESSIONS = [
    "a + b", "a - b", "a * b", "a / b", "a // b", "a % b", "a ** 2", "np.maximum(a, b)", "np.minimum(a, 1)",
    "a < b", "a == 1", "np.exp(a)", "np.sqrt(np.abs(a))", "np.sign(a)", "np.floor(a)", "np.ceil(b)",
    "np.round(a, 1)", "np.sum(a)", "a.sum(axis=0)", "np.mean(a, axis=1)", "a.max()",
    "np.min(b, axis=0, keepdims=True)", "np.argmax(a)", "a.argmin(axis=1)", "np.prod(a, axis=0)", "np.std(a)",
    "np.var(b, ddof=1)", "a.T", "a.reshape(-1)", "a[0]", "a[:, 1]", "a[1, 2]", "np.where(a > 0, a, b)",
    "np.clip(a, 0, 3)", "np.concatenate([a, b])", "np.stack([a, b], axis=1)", "np.cumsum(a, axis=1)",
    "a.astype(np.float32)", "np.isclose(a, b)", "a + 2.5", "a * 3", "a - True", "-a", "~a", "a & b", "a | 1",
    "np.sort(a, axis=0)", "np.argsort(b, kind='stable')", "np.expand_dims(a, 0)", "np.squeeze(a[None])",
    "np.tanh(a)", "np.log1p(np.abs(a))", "np.square(a)", "np.outer(a[0], b[1])", "np.linalg.norm(a)",
    "a @ b.T", "np.dot(a[0], b[0])", "np.hstack([a, b])", "np.vstack([a, b])", "np.any(a > 1, axis=0)",
    "np.all(a)",
]
STATEMENTS = [
    "v = a[1:]; v += 1; return a", "a[0] = 5; return a, a.sum()", "v = a.T; v[0] = 0; return a",
    "s = a[0, 0]; a[0, 0] = 9; return s, a", "c = a.copy(); c *= 2; return a, c",
    "r = a.reshape(4, 3); r[0, 0] = 7; return a", "a += b; return a", "m = a > 0; a[m] = 0; return a",
    "a[:, 1] = b[:, 0]; return a", "a[1] = a[0]; return a", "c = a + 1; d = c[::2]; d[0] = 3; return c, d",
    "a.sort(axis=0); return a", "a.fill(2); return a", "x = np.zeros_like(a); x[1:] = a[:-1]; return x",
    "t = b.T.copy(); return t.sum(axis=0), t", "a[[0, 2]] = 1; return a", "a -= 1; return a, b",
]


def _breaks_by_design(body: str, left, right) -> bool:
    """Cases kiln breaks on purpose (see docs/capture.md, NumPy): matmul of small or bool dtypes, sums
    of uint8 (NumPy adds them up in uint64)."""
    promoted = np.promote_types(left, right)
    if ("@" in body or "dot" in body) and (promoted.kind not in "if" or promoted.itemsize < 4):
        return True
    return any(f in body for f in ("sum", "prod", "cumsum")) and np.dtype(left) == np.uint8


def _function(body: str):
    lines = [part.strip() for part in body.split(";")]
    if not lines[-1].startswith("return"):
        lines[-1] = "return " + lines[-1]
    namespace = {"np": np}
    exec("def fn(a, b):\n    " + "\n    ".join(lines) + "\n", namespace)
    return namespace["fn"]


def _same(actual, expected, path="out"):
    assert type(actual) is type(expected), f"{path}: {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, tuple):
        for i, (x, y) in enumerate(zip(actual, expected)):
            _same(x, y, f"{path}[{i}]")
        return
    if hasattr(expected, "dtype"):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert np.shape(actual) == np.shape(expected), f"{path}: shape"
        torch.testing.assert_close(torch.from_numpy(np.array(actual)), torch.from_numpy(np.array(expected)),
                                   equal_nan=True, rtol=1e-2, atol=1e-2)
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _cases():
    rng = random.Random(0)
    for i, body in enumerate(EXPRESSIONS + STATEMENTS):
        yield body, rng.choice(DTYPES), rng.choice(DTYPES), 7 * i


@pytest.mark.parametrize("body,left,right,seed", list(_cases()))
def test_matches_numpy(body, left, right, seed):
    fn = _function(body)
    a = (np.random.RandomState(seed).randn(3, 4) * 3).astype(left)
    b = (np.random.RandomState(seed + 1).randn(3, 4) * 3).astype(right)
    args = (a.copy(), b.copy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = fn(*args)
        except Exception as exc:  # NumPy raises: kiln must raise the same (running it as Python)
            with pytest.raises(type(exc)):
                kiln.compile(fn, backend="eager")(a.copy(), b.copy())
            return
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        kiln.reset()
        c_args = (a.copy(), b.copy())
        actual = kiln.compile(fn, backend=backend)(*c_args)
    _same(actual, expected)
    _same(c_args, args, "arguments after")
    assert len(graphs) == 1 or _breaks_by_design(body, left, right), f"{body!r} on {np.dtype(left)}, {np.dtype(right)}: {len(graphs)} graphs"


_KNOWN_SCALAR_CASES = [
    lambda: float(np.float32(0.1) * 3), lambda: int(np.int8(100) + np.int8(100)),
    lambda: bool(np.float64(0.0)), lambda: (np.float16(2.5) / 3).item(),
    lambda: float(np.sqrt(np.float32(2))), lambda: int(np.uint8(3) - 5),
]


@pytest.mark.parametrize("case", range(len(_KNOWN_SCALAR_CASES)))
def test_known_numpy_scalars_are_constants(case):
    """NumPy scalars known while tracing (made from constants, ufuncs of them) are computed by NumPy
    itself: float()/int()/bool()/item() of them give NumPy's exact answer with no graph break."""
    scalar = _KNOWN_SCALAR_CASES[case]

    def fn(x):
        return x + 1, scalar()

    x = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = fn(x)
        report = kiln.explain(fn, backend="eager")(x)
    assert report.graph_break_count == 0, report.break_reasons
    assert report.result[1] == expected[1] and type(report.result[1]) is type(expected[1])
