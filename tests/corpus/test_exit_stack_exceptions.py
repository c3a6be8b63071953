"""contextlib.ExitStack's exception path inside compiled code: the exception leaving the block handed to
the callbacks last first, suppressed by a true result, replaced (and chained) by a callback's own."""
import contextlib

import torch

from .harness import check


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class _Recorder:
    """A context manager that logs what its __exit__ sees and suppresses when told to."""

    def __init__(self, log, name, suppress=False):
        self.log, self.name, self.suppress = log, name, suppress

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self.name

    def __exit__(self, exc_type, exc, tb):
        self.log.append(f"exit {self.name} {exc_type.__name__ if exc_type else None} {exc}")
        return self.suppress


def _fail(kind, message):
    raise kind(message)


def _chain(e):
    out = []
    while e is not None:
        out.append(f"{type(e).__name__}({e})")
        e = e.__context__
    return out


def test_a_callback_sees_the_exception_and_suppresses_it():
    def fn(x):
        log = []
        with contextlib.ExitStack() as stack:
            stack.enter_context(_Recorder(log, "outer", suppress=True))
            stack.callback(log.append, "cb")
            name = stack.enter_context(_Recorder(log, "inner"))
            y = x + 1
            raise ValueError("boom")
        return y * 2, log, name  # reached: the outer recorder suppressed the exception

    check(fn, _t(3), breaks=0)


def test_exceptions_raised_by_callbacks_are_chained_and_raised():
    def fn(x):
        log = []
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(_Recorder(log, "first"))
                stack.callback(_fail, KeyError, "second")
                stack.callback(_fail, TypeError, "third")
                raise ValueError("block")
        except Exception as e:
            caught = _chain(e)
        return x + 1, log, caught

    check(fn, _t(3), breaks=0)


def test_a_callback_exception_suppressed_by_an_earlier_registered_one():
    def fn(x):
        log = []
        with contextlib.ExitStack() as stack:
            stack.enter_context(_Recorder(log, "guard", suppress=True))
            stack.callback(_fail, IndexError, "late")
            y = x * 3
        return y, log

    check(fn, _t(3), breaks=0)


def test_a_callback_raising_without_a_block_exception_inside_a_handler():
    def fn(x):
        try:
            raise KeyError("outer")
        except KeyError:
            try:
                with contextlib.ExitStack() as stack:
                    stack.callback(_fail, ValueError, "cb")
                    stack.callback([].pop)  # IndexError from a builtin, chained to the ValueError
                    y = x + 1
            except Exception as e:
                caught = _chain(e)
        return y, caught

    check(fn, _t(3), breaks=0)


def test_close_and_exit_called_directly():
    def fn(x):
        log = []
        stack = contextlib.ExitStack()
        stack.callback(log.append, 1)
        stack.close()
        stack.callback(log.append, 2)
        stack.enter_context(_Recorder(log, "r", suppress=True))
        suppressed = stack.__exit__(ValueError, ValueError("direct"), None)
        return x + 1, log, suppressed

    check(fn, _t(3), breaks=0)
