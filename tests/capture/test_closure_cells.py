"""Closure cells that exist before the call: one symbolic value per real cell (values/functions.py:
existing_cell), writes replayed on the real cell, guards on which places hold one cell; and resume
functions that take the frame's own cells as free variables (resume.make_resume_code)."""
import types

import torch

import kiln
from kiln.capture import bytecode as bc
from kiln.capture.resume import cells_used_from, make_resume_code


def setup_function():
    kiln.reset()


def _pair():
    n = 0

    def setter(v):
        nonlocal n
        n = v

    def getter():
        return n

    return setter, getter


def _counter():
    n = 0

    def bump():
        nonlocal n
        n += 1
        return n

    return bump, lambda: n


def test_frame_writes_its_free_variable_then_a_closure_reads_it():
    """The frame's own free variable and the inlined closure's cell are one cell: the closure must see
    the write (it used to read the old contents: a wrong result)."""
    def make():
        n = 0

        def get():
            return n

        def fn(x):
            nonlocal n
            n = 5
            return x * get()

        return fn, lambda: n

    x = torch.ones(3)
    expected_fn, expected_state = make()
    expected = expected_fn(x)
    fn, state = make()
    got = kiln.compile(fn, backend="eager")(x)
    torch.testing.assert_close(got, expected)
    assert state() == expected_state() == 5


def test_inlined_closure_writes_an_existing_cell():
    bump, count = _counter()

    def fn(x):
        return x * bump() + bump()

    cf = kiln.compile(fn, backend="eager")
    x = torch.ones(2)
    torch.testing.assert_close(cf(x), x * 1 + 2)
    torch.testing.assert_close(cf(x), x * 3 + 4)
    assert count() == 4
    assert kiln.explain(fn)(x).graph_break_count == 0


def test_two_functions_sharing_a_cell_see_each_others_writes():
    setter, getter = _pair()

    def fn(x, v):
        setter(v)
        return x + getter()

    cf = kiln.compile(fn, backend="eager")
    x = torch.zeros(2)
    torch.testing.assert_close(cf(x, 3), x + 3)
    assert getter() == 3
    torch.testing.assert_close(cf(x, 4), x + 4)
    assert getter() == 4


def test_cells_shared_at_compile_time_but_not_later():
    """Compiled with setter and getter over one cell; called with two that hold different cells: the
    guard on which places hold the same cell sends the call to a new entry."""
    def fn(x, setter, getter):
        setter(7)
        return x + getter()

    cf = kiln.compile(fn, backend="eager")
    x = torch.zeros(2)
    s1, g1 = _pair()
    torch.testing.assert_close(cf(x, s1, g1), x + 7)
    s2, _ = _pair()
    _, g3 = _pair()
    torch.testing.assert_close(cf(x, s2, g3), x + 0)
    assert g3() == 0


def test_cells_distinct_at_compile_time_but_shared_later():
    def fn(x, setter, getter):
        setter(7)
        return x + getter()

    cf = kiln.compile(fn, backend="eager")
    x = torch.zeros(2)
    s2, _ = _pair()
    _, g3 = _pair()
    torch.testing.assert_close(cf(x, s2, g3), x + 0)
    s1, g1 = _pair()
    torch.testing.assert_close(cf(x, s1, g1), x + 7)


def test_resume_code_takes_the_cells_as_free_variables():
    def sample(a):
        n = a

        def get():
            return n

        print(get())
        n = n + 1
        return get()

    insts = bc.decode(sample.__code__)
    pop = next(i for i in insts if i.opname == "POP_TOP" and i.offset > insts[0].offset)
    code = make_resume_code(sample.__code__, pop.offset, [True], ["get"], cells=("n",))
    assert code.co_freevars == ("n",) and code.co_cellvars == () and "n" not in code.co_varnames
    cell = types.CellType(2)
    nested = next(c for c in sample.__code__.co_consts if isinstance(c, types.CodeType))
    get = types.FunctionType(nested, sample.__globals__, "get", None, (cell,))  # as the transformed code builds it
    resume = types.FunctionType(code, sample.__globals__, "resume", None, (cell,))
    assert resume(None, get) == 3
    assert cell.cell_contents == 3  # the write after the break landed in the shared cell


def test_cells_used_from_follows_jumps_and_handlers():
    def sample(a, flag):
        n = a
        m = a

        def get():
            return n + m

        print(get())
        if flag:
            try:
                return n
            finally:
                m = 0
        return 1

    insts = bc.decode(sample.__code__)
    calls = [i for i in insts if i.opname == "CALL"]
    after_print = insts[insts.index(calls[-1]) + 1]
    assert cells_used_from(insts, [after_print], {"n", "m"}) == {"n", "m"}
    last_return = [i for i in insts if i.opname in ("RETURN_VALUE", "RETURN_CONST")][-1]
    assert cells_used_from(insts, [last_return], {"n", "m"}) == set()
