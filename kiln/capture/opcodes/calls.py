"""Calls, function creation and returns."""
from __future__ import annotations

import sys

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import NULL, ConstantValue, unsupported
from kiln.capture.values.containers import DictValue, TupleValue
from kiln.capture.values.functions import CellValue, NestedFunctionValue


@handles()
def KW_NAMES(tx, inst):
    tx.kw_names = inst.argval


@handles()
def CALL(tx, inst):
    argc = inst.arg
    args = tx.popn(argc)
    second = tx.pop()
    first = tx.pop()
    if first is NULL:
        fn = second
    else:
        fn, args = first, [second, *args]
    kwargs = {}
    if tx.kw_names:
        names = tx.kw_names
        values = args[len(args) - len(names):]
        args = args[:len(args) - len(names)]
        kwargs = dict(zip(names, values))
        tx.kw_names = ()
    made = tx.call(fn, args, kwargs)
    if type(made).__name__ == "SteppedGeneratorValue":  # `for v in gen(...)`: closed when the loop is left
        from kiln.capture.values.lazy_generators import mark_loop_only

        mark_loop_only(tx, fn, made)
    tx.push(made)


@handles()
def CALL_FUNCTION_EX(tx, inst):
    kwargs_value = tx.pop() if inst.arg & 1 else None
    args_value = tx.pop()
    fn = tx.pop()
    if tx.stack and tx.stack[-1] is NULL:
        tx.pop()
    args = tx.items(args_value)
    kwargs = {}
    if kwargs_value is not None:
        if not isinstance(kwargs_value, DictValue):
            unsupported(f"**{kwargs_value} in a call")
        kwargs = dict(kwargs_value.entries)
        if not all(type(k) is str for k in kwargs):  # (str subclasses too, but kiln keeps those exact)
            from kiln.capture.values.exceptions import raise_traced

            if any(not isinstance(k, str) for k in kwargs):
                raise_traced(TypeError, "keywords must be strings")
            unsupported("** with keys of a str subclass")
    tx.push(tx.call(fn, args, kwargs))


@handles()
def MAKE_FUNCTION(tx, inst):
    flags = inst.arg
    code_value = tx.pop()
    if sys.version_info < (3, 11):
        tx.pop()
    code = code_value.as_constant()
    closure = tx.pop() if flags & 0x08 else None
    annotations = tx.pop() if flags & 0x04 else None  # a tuple: name, value, name, value, ...
    kwdefaults = tx.pop() if flags & 0x02 else None
    defaults = tx.pop() if flags & 0x01 else None
    cells = tuple(closure.elements) if closure is not None else None
    if cells is not None and not all(isinstance(c, CellValue) for c in cells):
        unsupported("closure cells of an unexpected kind")
    fn = NestedFunctionValue(
        code, tx.f_globals, code.co_qualname,
        tuple(tx.items(defaults)) if defaults is not None else (),
        ({k: v for k, v in kwdefaults.entries.items()} if hasattr(kwdefaults, "entries")
         else {k: ConstantValue(v) for k, v in kwdefaults.as_constant().items()}) if kwdefaults is not None else {},
        cells,
    )
    fn.has_annotations = bool(flags & 0x04)
    fn.annotations = annotations
    tx.push(fn)


@handles()
def RETURN_VALUE(tx, inst):
    from kiln.capture.interpreter import ReturnSignal

    raise ReturnSignal(tx.pop())


def _in_generator(tx) -> bool:
    """The tracer runs a generator's body (a generator expression's, a generator function's)."""
    from kiln.capture.interpreter import GeneratorTracer

    return isinstance(tx, GeneratorTracer)


@handles()
def RETURN_GENERATOR(tx, inst):
    if not _in_generator(tx):
        unsupported("generator functions are not supported yet")
    tx.push(ConstantValue(None))  # popped by the POP_TOP that follows


@handles()
def YIELD_VALUE(tx, inst):
    if not _in_generator(tx):
        unsupported("yield outside a generator kiln can run")
    tx.add_yielded(tx.pop())
    tx.push(ConstantValue(None))  # the value sent into the generator


@handles()
def GET_YIELD_FROM_ITER(tx, inst):
    """`yield from x`: a generator stays itself (a stepped generator, a generator expression), anything else
    iter(x)."""
    from kiln.capture.values.iterators import make_iterator

    if not _in_generator(tx):
        unsupported("yield from outside a generator kiln can run")
    tx.push(make_iterator(tx, tx.pop()))


@handles()
def SEND(tx, inst):
    """One step of `yield from`: the sub-iterator's next item goes on to YIELD_VALUE; once it is exhausted
    its return value (a generator's `return v`, else None) replaces it (3.11) or sits above it for
    END_SEND (3.12), and the jump leaves the loop. A value sent into the outer generator is sent on into
    a generator receiver; into other iterators only None (CPython's next(receiver)) is supported."""
    from kiln.capture.values.iterators import IteratorValue

    from kiln.capture.values.lazy_generators import SteppedGeneratorValue

    sent = tx.pop()
    receiver = tx.stack[-1]
    from kiln.capture.values.generator_expressions import GeneratorExpressionValue

    none_sent = sent.is_constant() and sent.as_constant() is None
    if isinstance(receiver, SteppedGeneratorValue):
        item = receiver.resume(tx, sent)  # a value sent into the outer generator goes on to the inner one
    elif isinstance(receiver, GeneratorExpressionValue) and not none_sent:
        if not receiver.started:  # CPython's gen_send_ex check
            from kiln.capture.values.exceptions import raise_traced

            raise_traced(TypeError, "can't send non-None value to a just-started generator")
        item = receiver.next_item(tx)  # a generator expression's yield discards what is sent
    elif not none_sent:
        unsupported("sending a value other than None into an iterator that is not a generator (yield from)")
    elif not isinstance(receiver, IteratorValue):
        unsupported(f"yield from {receiver}")
    else:
        item = receiver.next_item(tx)
    if item is not None:
        tx.push(item)
        return
    result = getattr(receiver, "return_value", None)
    if result is None:
        result = ConstantValue(None)
    if sys.version_info < (3, 12):
        tx.pop()
    tx.push(result)
    tx.jump(inst)


@handles()
def END_SEND(tx, inst):  # 3.12: drops the exhausted receiver under the return value
    del tx.stack[-2]


@handles()
def CALL_INTRINSIC_1(tx, inst):  # 3.12
    which = inst.argval if isinstance(inst.argval, str) else None
    arg = inst.arg
    names = {1: "INTRINSIC_PRINT", 2: "INTRINSIC_IMPORT_STAR", 3: "INTRINSIC_STOPITERATION_ERROR",
             4: "INTRINSIC_ASYNC_GEN_WRAP", 5: "INTRINSIC_UNARY_POSITIVE", 6: "INTRINSIC_LIST_TO_TUPLE"}
    name = names.get(arg, which)
    if name == "INTRINSIC_LIST_TO_TUPLE":
        tx.push(TupleValue(tx.items(tx.pop())))
        return
    if name == "INTRINSIC_UNARY_POSITIVE":
        import operator

        from kiln.capture.values.ops import unary_op

        tx.push(unary_op(tx, operator.pos, tx.pop()))
        return
    if name == "INTRINSIC_STOPITERATION_ERROR":
        # 3.12 generators: an exception leaving the body passes through here (StopIteration would become
        # RuntimeError); any other exception is handed on unchanged
        from kiln.capture.values.exceptions import ExceptionValue

        # A StopIteration leaves the body as it is, as it does on 3.11 (which has no intrinsic): the
        # generator's consumer turns it into PEP 479's RuntimeError (lazy_generators.pep479)
        from kiln.capture.interpreter import GeneratorTracer

        exc = tx.stack[-1]
        if isinstance(exc, ExceptionValue) and (isinstance(tx, GeneratorTracer) or
                                                not issubclass(exc.cls, (StopIteration, StopAsyncIteration))):
            return
    unsupported(f"CALL_INTRINSIC_1 {name}")
