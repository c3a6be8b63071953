"""Unit tests of contextlib.ExitStack's exception path as the capture stage models it
(values/exit_stacks.py): contextlib's _fix_exception_context, and __exit__'s suppress/replace rules."""
import contextlib

import pytest
import torch

from kiln.capture.interpreter import RootTracer
from kiln.capture.values.base import ConstantValue
from kiln.capture.values.exceptions import ExceptionValue, TracedRaise
from kiln.capture.values.exit_stacks import _fix_exception_context
from kiln.options import Options


def _exc(cls, context=None):
    e = ExceptionValue(cls, [ConstantValue(cls.__name__)])
    e.context = context
    return e


def test_fix_exception_context_repoints_the_end_of_the_chain_at_frame_exc():
    frame, old = _exc(KeyError), _exc(ValueError)
    inner = _exc(IndexError, context=frame)
    new = _exc(TypeError, context=inner)
    _fix_exception_context(new, old, frame)
    assert new.context is inner and inner.context is old

    already = _exc(TypeError, context=old)  # context already the pending exception: unchanged
    _fix_exception_context(already, old, frame)
    assert already.context is old

    unrecorded = _exc(TypeError)  # a builtin error kiln raised without its context, while frame was handled
    _fix_exception_context(unrecorded, old, frame)
    assert unrecorded.context is old

    nothing_handled = _exc(TypeError)
    _fix_exception_context(nothing_handled, old, None)
    assert nothing_handled.context is None


def _raises(kind):
    raise kind("cb")


def test_exit_raises_the_last_callback_exception_chained_to_the_block_exception():
    def fn(x):
        with contextlib.ExitStack() as stack:
            stack.callback(_raises, KeyError)
            stack.callback(_raises, TypeError)
            raise ValueError("block")

    tracer = RootTracer(fn.__code__, {"x": torch.randn(2)}, fn.__globals__, __builtins__, None, Options())
    with pytest.raises(TracedRaise) as info:
        tracer.run()
    e = info.value.exc_value
    chain = []
    while e is not None:
        chain.append(e.cls)
        e = e.context
    assert chain == [KeyError, TypeError, ValueError]
    with pytest.raises(KeyError) as real:
        fn(torch.randn(2))
    real_chain = [type(real.value), type(real.value.__context__), type(real.value.__context__.__context__)]
    assert real_chain == chain
