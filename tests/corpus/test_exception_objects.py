"""Exceptions caught in a compiled frame: user Exception subclasses with a Python __init__ (calling
super().__init__ or not), their attributes, `e.args`, `str(e)`, `repr(e)` of builtin and user exceptions
(a user __str__ traced), and exception objects that leave the frame."""
import torch

from .harness import check, dynamo_bug


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class CodedError(ValueError):
    def __init__(self, msg, code, *, scale=2):
        super().__init__(msg, code)
        self.code = code
        self.scale = scale

    def doubled(self):
        return self.code * 2


class NoSuperInit(Exception):
    def __init__(self, a, b):
        self.total = a + b  # args stay the constructor's (BaseException.__new__ keeps them)


class Pretty(RuntimeError):
    def __str__(self):
        return f"pretty<{self.args[0]}>"


def test_user_exception_attributes_args_str_repr():
    def fn(x):
        try:
            raise CodedError("bad shape", 3, scale=4)
        except ValueError as e:
            return x * e.scale + e.doubled(), e.args, str(e), repr(e), e.code

    check(fn, _t(3), dynamo_graphs=0)  # dynamo: super().__init__ of an Exception subclass runs eagerly


def test_exception_without_super_init_keeps_constructor_args():
    def fn(x):
        try:
            raise NoSuperInit(1, 2)
        except NoSuperInit as e:
            return x + e.total, e.args, str(e), repr(e)

    check(fn, _t(3))


@dynamo_bug("str(KeyError('k')) gives 'k' (CPython: \"'k'\")")
def test_builtin_exceptions_str_and_repr():
    def fn(x):
        out = []
        for exc in (ValueError("v"), KeyError("k"), TypeError("a", 1), IndexError(), Pretty("p")):
            try:
                raise exc
            except Exception as e:
                out.append((type(e).__name__, str(e), repr(e), e.args))
        return x + len(out), out

    check(fn, _t(3))


@dynamo_bug("str() of a caught KeyError gives the key, not its repr")
def test_keyerror_from_dict_lookup_str():
    def fn(x, d):
        try:
            v = d["missing"]
        except KeyError as e:
            return x * 2, str(e), e.args
        return x + v, "", ()

    check(fn, _t(3), {"a": 1})


def test_args_assigned_and_exception_modified_in_handler():
    def fn(x):
        try:
            raise CodedError("m", 1)
        except CodedError as e:
            e.args = ["changed"]
            e.code = 5
            return x * e.code, e.args, str(e)

    check(fn, _t(3), dynamo_graphs=0)


def test_fstrings_of_caught_exceptions():
    class A:
        pass

    def fn(x):
        a = A()
        try:
            a += 1
        except TypeError as e:
            return x + 1, f"{e}", f"[{e!s:>60}]", f"{e!r}"
        return x, "", "", ""

    check(fn, _t(3))


def test_handler_of_an_exception_raised_as_python_at_a_break():
    import json

    from .harness import CountingBackend, assert_same, compile_fn, reset

    def fn(x, s):
        y = x * 2
        try:
            v = json.loads(s)  # not traced: a break; it raises (or not) as Python
        except ValueError as e:
            return y + 1, type(e).__name__
        except TypeError:
            return y - 1, "type"
        return y + v, "ok"

    reset()
    compiled = compile_fn(fn, CountingBackend())
    for s in ("{bad", "3", None, "{bad", None):  # the handler's exception type is guarded
        assert_same(compiled(torch.ones(2), s), fn(torch.ones(2), s), path=repr(s))
