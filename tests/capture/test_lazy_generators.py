"""Unit tests of values/lazy_generators.py (end-to-end cases: tests/corpus/test_stepped_generators.py)."""
import types

import pytest

from kiln.capture.values.base import ConstantValue
from kiln.capture.values.exceptions import ExceptionValue
from kiln.capture.values.lazy_generators import (CALLED_AS_PYTHON, RetraceFrame, SteppedGeneratorValue,
                                                 _exception_to_throw, pep479, refuse_if_called_as_python)
from kiln.capture.values.objects import ClassValue
from kiln.errors import Unsupported


def _code():
    def g():
        yield 1
    return g.__code__


def _stepped(code, stack=(ConstantValue("pending"),)):
    """A stand-in; by default with a value pending on its stack below the yield (as a for loop's iterator
    in the generator's body), so a suspended one cannot be parked (capture/generator_resume.py)."""
    from kiln.capture.interpreter import instructions_of

    instructions = instructions_of(code)
    tracer = types.SimpleNamespace(code=code, function_name="g", add_yielded=None, instructions=instructions,
                                   index_of={id(i): n for n, i in enumerate(instructions)},
                                   output=types.SimpleNamespace(stepped_generators=[]), stack=list(stack),
                                   locals={})
    gen = SteppedGeneratorValue(tracer, ConstantValue(None), [], {})
    gen.yield_inst = next(i for i in instructions if i.opname == "YIELD_VALUE")
    return gen


def test_pep479_turns_a_stop_iteration_into_a_chained_runtime_error():
    stop = ExceptionValue(StopIteration, [ConstantValue(3)])
    converted = pep479(stop)
    assert converted.cls is RuntimeError and converted.args[0].as_constant() == "generator raised StopIteration"
    assert converted.cause is stop and converted.context is stop and converted.suppress_context
    other = ExceptionValue(KeyError, [])
    assert pep479(other) is other


def test_exception_to_throw_takes_an_instance_a_class_or_a_class_and_value():
    instance = ExceptionValue(KeyError, [ConstantValue("k")])
    assert _exception_to_throw(None, [instance]) is instance
    made = _exception_to_throw(None, [ClassValue(ValueError)])
    assert made.cls is ValueError and made.args == []
    made = _exception_to_throw(None, [ClassValue(ValueError), ConstantValue("why")])
    assert made.cls is ValueError and made.args[0].as_constant() == "why"
    with pytest.raises(Unsupported):
        _exception_to_throw(None, [ClassValue(ValueError), ConstantValue(None), ConstantValue(1)])


def test_a_generator_suspended_at_a_break_makes_its_function_run_as_python_once():
    code = _code()
    gen = _stepped(code)
    gen.state = "suspended"
    CALLED_AS_PYTHON.discard(code)
    try:
        with pytest.raises(RetraceFrame):
            gen.reconstruct(None)
        assert code in CALLED_AS_PYTHON
        with pytest.raises(Unsupported):  # the next trace breaks at the call instead
            refuse_if_called_as_python(code, "g")
        with pytest.raises(Unsupported):  # never a second retrace for the same code
            gen.reconstruct(None)
    finally:
        CALLED_AS_PYTHON.discard(code)


def test_children_are_the_call_only_before_the_generator_starts():
    gen = _stepped(_code())
    assert len(gen.children()) == 1
    gen.state = "closed"
    assert gen.children() == [gen.fn_value]  # rebuilt as a closed generator of its function
    gen.state = "suspended"
    CALLED_AS_PYTHON.discard(gen.tracer.code)
    with pytest.raises(RetraceFrame):
        gen.children()
    CALLED_AS_PYTHON.discard(gen.tracer.code)


def test_a_suspended_generator_with_nothing_pending_is_handed_on_parked():
    gen = _stepped(_code(), stack=())
    gen.state = "suspended"
    CALLED_AS_PYTHON.discard(gen.tracer.code)
    assert gen.children() == [gen.fn_value]  # the function, then its (no) locals: no retrace
    assert gen.tracer.code not in CALLED_AS_PYTHON


def _yields(fn):
    """A stand-in tracer over fn's instructions, and its YIELD_VALUE instructions in order."""
    from kiln.capture.interpreter import instructions_of

    instructions = instructions_of(fn.__code__)
    tracer = types.SimpleNamespace(instructions=instructions, index_of={id(i): n for n, i in enumerate(instructions)},
                                   f_globals=fn.__globals__, f_builtins=__builtins__ if isinstance(__builtins__, dict)
                                   else vars(__builtins__))
    return tracer, [i for i in instructions if i.opname == "YIELD_VALUE"]


def _plain():
    for i in range(3):
        yield i


def _in_finally():
    try:
        yield 1
    finally:
        print("closed")


def _in_with():
    with open("/dev/null"):
        yield 1


def _in_except_clauses():
    try:
        yield 1
    except KeyError:
        yield 2
    except (IndexError, ValueError):
        pass


def _catching_base_exception():
    try:
        yield 1
    except BaseException:
        pass


@pytest.mark.parametrize("fn, expected", [
    (_plain, [False]), (_in_finally, [True]), (_in_with, [True]),
    (_in_except_clauses, [False, False]),  # GeneratorExit matches neither clause; yield 2 is in a cleanup
    (_catching_base_exception, [True]),
])
def test_close_runs_code_follows_the_handlers_a_generator_exit_passes(fn, expected):
    from kiln.capture.values.lazy_generators import _close_runs_code

    tracer, yields = _yields(fn)
    assert [_close_runs_code(tracer, y) for y in yields] == expected
