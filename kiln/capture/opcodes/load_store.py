"""Loads and stores: locals, cells, globals, attributes, constants."""
from __future__ import annotations

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import NULL, ConstantValue, unsupported
from kiln.capture.values.builder import wrap_constant_result
from kiln.capture.values.functions import CellValue


@handles()
def LOAD_CONST(tx, inst):
    value = inst.argval
    if isinstance(value, type(LOAD_CONST.__code__)):
        tx.push(ConstantValue(value))  # a code object for MAKE_FUNCTION
        return
    tx.push(wrap_constant_result(value))


@handles()
def RETURN_CONST(tx, inst):  # 3.12
    from kiln.capture.interpreter import ReturnSignal

    raise ReturnSignal(wrap_constant_result(inst.argval))


@handles("LOAD_FAST", "LOAD_FAST_CHECK")
def LOAD_FAST(tx, inst):
    name = inst.argval
    if name in tx.cells and name not in tx.locals:
        tx.push(tx.cells[name].get())
        return
    if name not in tx.locals:
        unsupported(f"local variable {name!r} referenced before assignment")
    tx.push(tx.read_local(name))


@handles()
def LOAD_FAST_AND_CLEAR(tx, inst):  # 3.12 inlined comprehensions save the outer variable
    name = inst.argval
    tx.push(tx.read_local(name) if name in tx.locals else NULL)
    tx.locals.pop(name, None)


@handles()
def STORE_FAST(tx, inst):
    value = tx.pop()
    if value is NULL:
        tx.locals.pop(inst.argval, None)  # restoring a cleared comprehension variable
    else:
        tx.locals[inst.argval] = value


@handles()
def DELETE_FAST(tx, inst):
    tx.locals.pop(inst.argval, None)


@handles()
def MAKE_CELL(tx, inst):
    name = inst.argval
    if name in tx.cells:
        return
    cell = CellValue(None, created_here=True)
    if name in tx.locals:
        cell.contents = tx.read_local(name)
        del tx.locals[name]
    tx.cells[name] = cell


@handles("LOAD_DEREF", "LOAD_CLASSDEREF")
def LOAD_DEREF(tx, inst):
    name = inst.argval
    if name not in tx.cells:
        unsupported(f"free variable {name!r} is not known")
    tx.push(tx.cells[name].get())


@handles()
def STORE_DEREF(tx, inst):
    name = inst.argval
    value = tx.pop()
    if name not in tx.cells:
        tx.cells[name] = CellValue(value, created_here=True)
    else:
        from kiln.capture.values.base import note_mutation

        note_mutation(tx, tx.cells[name])
        tx.cells[name].set(value)


@handles()
def LOAD_CLOSURE(tx, inst):
    name = inst.argval
    if name not in tx.cells:
        tx.cells[name] = CellValue(None, created_here=True)
    tx.cells[name].captured = True  # a nested function shares it (graph_break.py: no break may copy it)
    tx.push(tx.cells[name])


@handles()
def LOAD_GLOBAL(tx, inst):
    if inst.arg & 1:
        tx.push(NULL)
    tx.push(tx.load_global(inst.argval))


@handles()
def STORE_GLOBAL(tx, inst):
    value = tx.pop()
    if tx.f_globals is not tx.root().f_globals:
        unsupported(f"assigning global variable {inst.argval!r} of another module")
    tx.output.side_effects.store_global(inst.argval, value)


@handles()
def LOAD_ATTR(tx, inst):
    obj = tx.pop()
    import sys

    method = sys.version_info >= (3, 12) and inst.arg & 1
    if method:
        tx.push(NULL)
    tx.push(tx.getattr(obj, inst.argval))


@handles()
def LOAD_METHOD(tx, inst):  # 3.11
    obj = tx.pop()
    tx.push(NULL)
    tx.push(tx.getattr(obj, inst.argval))


@handles()
def STORE_ATTR(tx, inst):
    obj = tx.pop()
    value = tx.pop()
    tx.setattr(obj, inst.argval, value)


@handles()
def DELETE_ATTR(tx, inst):
    from kiln.capture.values.objects import delete_attribute

    delete_attribute(tx, tx.pop(), inst.argval)


@handles()
def LOAD_SUPER_ATTR(tx, inst):  # 3.12: stack is global super, class, self
    self_value = tx.pop()
    cls_value = tx.pop()
    tx.pop()  # the global `super`
    from kiln.capture.values.super_values import SuperValue

    sup = SuperValue(cls_value.as_constant(), self_value)
    if inst.arg & 1:
        tx.push(NULL)
    tx.push(sup.getattr(tx, inst.argval))


@handles()
def LOAD_ASSERTION_ERROR(tx, inst):
    tx.push(ConstantValue(AssertionError))


@handles("IMPORT_NAME")
def IMPORT_NAME(tx, inst):
    import sys

    fromlist = tx.pop()
    level = tx.pop()
    name = inst.argval
    if level.as_constant() != 0 or name not in sys.modules:
        unsupported(f"import of {name!r} inside a compiled function (not already imported)")
    from kiln.capture.sources import ConstantSource
    from kiln.capture.values.builder import wrap

    module = sys.modules[name]
    if not fromlist.as_constant():
        top = sys.modules[name.split(".")[0]]
        tx.push(wrap(tx, top, ConstantSource(top.__name__, top)))
    else:
        tx.push(wrap(tx, module, ConstantSource(name, module)))


@handles()
def IMPORT_FROM(tx, inst):
    module = tx.stack[-1]
    tx.push(tx.getattr(module, inst.argval))
