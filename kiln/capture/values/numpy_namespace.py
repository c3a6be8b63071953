"""The numpy namespace inside compiled functions: the numpy module, its functions (calls go to the
handlers in REGISTRY, built on first use), its types (np.float32(...), np.dtype, np.finfo) and the
ndarray METHODS table. Handlers live in numpy_functions.py."""
from __future__ import annotations

import types

from kiln.capture.sources import ConstantSource
from kiln.capture.values.base import ConstantValue, KnownFunctionValue, Value, unsupported
from kiln.capture.values.numpy_promotion import as_dtype
from kiln.capture.values.torch_functions import PythonModuleValue
from kiln.capture.values.numpy_values import NDArrayValue, cast, is_python_number, numpy_module, numpy_scalar_constant
from kiln.capture.values.numpy_functions import (
    _full_like,
    _cumulative, _outer, _norm, _shape_query,
    UFUNCS, _allclose, _arange, _argsort, _array, _asarray,
    _astype, _broadcast_to, _clip, _concatenate, _copy_fn, _copy_method,
    _dot, _expand_dims, _eye, _factory, _fill, _flatten,
    _full, _hstack, _isclose, _isfinite, _isnan, _len_method,
    _like, _linspace, _method, _needs_data, _random, _ravel,
    _reduction, _round, _setitem_method, _sort, _sort_in_place, _squeeze,
    _stack, _swapaxes, _ufunc_handler, _vstack, _where, matmul,
    reshape, transpose,
)


# ---- values for numpy's namespace ---------------------------------------------------------------

class NumpyModuleValue(PythonModuleValue):
    """The numpy module (or a submodule): attributes resolve statically to registry functions,
    NumPy types and constants; np.random and anything not in the registry break where called."""

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.numpy_values import wrap_numpy_object

        value = self.attribute(name)
        if isinstance(value, types.ModuleType):
            return NumpyModuleValue(value, None)
        if value is None or type(value) in (bool, int, float, str):
            return ConstantValue(value)  # np.newaxis, np.pi, np.inf, np.nan
        if self.module.__name__.startswith("numpy.random"):
            result = NumpyFunctionValue(value, None)
            result.random = True
            return result
        return wrap_numpy_object(tx, value, ConstantSource(f"{self.module.__name__}.{name}", value))

    def reconstruct(self, cg) -> None:
        cg.load_const(self.module)

    def __repr__(self) -> str:
        return f"NumpyModule[{self.module.__name__}]"


class NumpyFunctionValue(KnownFunctionValue):
    """A NumPy function or ufunc: calls go to its handler in REGISTRY, or break naming it."""

    def call(self, tx, args, kwargs) -> Value:
        fn = self.fn
        if getattr(self, "random", False):
            _random(tx)
        handler = registry().get(fn)
        name = getattr(fn, "__name__", repr(fn))
        if handler is None:
            unsupported(f"numpy.{name} is not in kiln's NumPy mapping",
                        hint="kiln breaks the graph here and runs the call as Python")
        try:
            return handler(tx, *args, **kwargs)
        except TypeError as exc:
            unsupported(f"numpy.{name} called with arguments kiln does not trace: {exc}")

    def getattr(self, tx, name: str) -> Value:
        if name in ("__name__", "__qualname__") and isinstance(getattr(self.fn, name, None), str):
            return ConstantValue(getattr(self.fn, name))
        unsupported(f"attribute {name!r} of numpy.{getattr(self.fn, '__name__', self.fn)}")

    def __repr__(self) -> str:
        return f"NumpyFunction({getattr(self.fn, '__name__', self.fn)})"


class NumpyTypeValue(ConstantValue):
    """np.ndarray, np.float32, np.int64, ...: a class (isinstance, dtype arguments, ==), and for scalar
    types a constructor: np.float32(2.5) is a NumPy scalar, np.float32(array) a cast copy."""

    def call(self, tx, args, kwargs) -> Value:
        np = numpy_module()
        cls = self.value
        if cls in (np.dtype, np.finfo, np.iinfo) and all(a.is_constant() for a in args) and not kwargs:
            try:
                made = cls(*[a.as_constant() for a in args])
            except (TypeError, ValueError) as exc:
                unsupported(f"numpy.{cls.__name__}(...) raised {type(exc).__name__}: {exc}")
            return ConstantValue(made) if cls is np.dtype else NumpyInfoValue(made)
        if not issubclass(cls, np.generic) or kwargs or len(args) != 1:
            unsupported(f"calling numpy.{cls.__name__} with {args} {kwargs}")
        (arg,) = args
        if is_python_number(arg):
            try:
                return numpy_scalar_constant(tx, cls(arg.as_constant()))
            except (OverflowError, ValueError, TypeError) as exc:
                unsupported(f"numpy.{cls.__name__}({arg.as_constant()!r}) raised {type(exc).__name__}")
        if isinstance(arg, NDArrayValue):
            d = as_dtype(cls, f"numpy.{cls.__name__}()")
            return NDArrayValue(_method(tx, "clone", [cast(tx, arg.tensor, d)]), d, scalar=arg.ndim == 0,
                                c_order=arg.c_order)
        unsupported(f"numpy.{cls.__name__}({arg})")


class NumpyInfoValue(ConstantValue):
    """np.finfo(...) / np.iinfo(...): its NumPy-scalar attributes (eps, max, tiny) are NumPy scalars."""

    def getattr(self, tx, name: str) -> Value:
        np = numpy_module()
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unsupported(f"{type(self.value).__name__} has no attribute {name!r}")
        if isinstance(attr, np.generic):
            return numpy_scalar_constant(tx, attr)
        if isinstance(attr, np.dtype) or type(attr) in (bool, int, float, str):
            return ConstantValue(attr)
        unsupported(f"attribute {name!r} of {type(self.value).__name__}")

    def reconstruct(self, cg) -> None:
        cg.load_const(self.value)


_REGISTRY: dict | None = None


def registry() -> dict:
    """numpy function object -> handler, built on first use (numpy is imported by then)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _build_registry(numpy_module())
    return _REGISTRY


def _build_registry(np) -> dict:
    reg = {}
    for name in UFUNCS:
        if hasattr(np, name):
            reg[getattr(np, name)] = _ufunc_handler(name, 1 if name in _UNARY else 2)
    reg[np.divide] = _ufunc_handler("true_divide", 2)
    reg[np.mod] = _ufunc_handler("remainder", 2)
    reg[np.abs] = _ufunc_handler("absolute", 1)
    for name in ("sum", "prod", "mean", "std", "var", "max", "min", "argmax", "argmin", "all", "any"):
        reg[getattr(np, name)] = _reduction(name)
    reg[np.amax] = _reduction("max")
    reg[np.amin] = _reduction("min")
    reg.update({
        np.round: _round, np.around: _round, np.clip: _clip, np.where: _where,
        np.matmul: matmul, np.dot: _dot, np.transpose: transpose, np.reshape: reshape, np.ravel: _ravel,
        np.expand_dims: _expand_dims, np.squeeze: _squeeze, np.broadcast_to: _broadcast_to,
        np.swapaxes: _swapaxes, np.concatenate: _concatenate, np.stack: _stack, np.vstack: _vstack,
        np.hstack: _hstack, np.sort: _sort, np.argsort: _argsort, np.isclose: _isclose,
        np.allclose: _allclose, np.isfinite: _isfinite, np.isnan: _isnan,
        np.zeros: _factory(0), np.ones: _factory(1), np.empty: _factory(None), np.full: _full,
        np.zeros_like: _like(0), np.full_like: _full_like, np.ones_like: _like(1), np.empty_like: _like(None),
        np.arange: _arange, np.linspace: _linspace, np.eye: _eye, np.array: _array, np.asarray: _asarray,
        np.copy: _copy_fn, np.cumsum: _cumulative("cumsum"), np.cumprod: _cumulative("cumprod"),
        np.outer: _outer, np.linalg.norm: _norm, np.shape: _shape_query("shape"), np.ndim: _shape_query("ndim"),
        np.size: _shape_query("size"),
    })
    return reg


_UNARY = {"invert", "negative", "positive", "absolute", "sign", "floor", "ceil", "rint", "sqrt", "exp", "log", "sin", "cos", "tan",
          "tanh", "square", "arctan", "log1p", "expm1", "log2", "log10", "exp2"}


def _method_reduction(kind):
    handler = _reduction(kind)

    def method(tx, a, *args, **kwargs):
        return handler(tx, a, *args, **kwargs)
    return method


METHODS = {
    "astype": _astype, "copy": _copy_method, "reshape": reshape,
    "transpose": transpose, "flatten": _flatten, "ravel": _ravel, "squeeze": _squeeze, "clip": _clip,
    "round": _round, "dot": _dot, "swapaxes": _swapaxes, "argsort": _argsort, "sort": _sort_in_place,
    "fill": _fill, "cumsum": _cumulative("cumsum"), "cumprod": _cumulative("cumprod"), "__setitem__": _setitem_method, "__len__": _len_method,
    "item": _needs_data("item"), "tolist": _needs_data("tolist"), "tobytes": _needs_data("tobytes"),
    "__bool__": _needs_data("__bool__"), "__float__": _needs_data("__float__"), "__int__": _needs_data("__int__"),
    **{k: _method_reduction(k) for k in ("sum", "prod", "mean", "std", "var", "max", "min", "argmax", "argmin",
                                         "all", "any")},
}
