"""Tests of kiln.capture.bytecode on CPython 3.11 and 3.12 (run with both interpreters).

Round trips of real code (stdlib, and torch.nn when torch imports), perturbed round trips
that force a new layout and are then run, and code built from the emitters.
"""
from __future__ import annotations

import contextlib
import dis
import importlib
import inspect
import math
import pathlib
import sys
import types

import pytest

try:
    from kiln.capture import bytecode as bc
except ImportError:  # kiln/__init__ may need torch; load only this package and kiln.errors
    _root = pathlib.Path(__file__).resolve().parents[2] / "kiln"
    for _name, _path in (("kiln", _root), ("kiln.capture", _root / "capture")):
        _mod = types.ModuleType(_name)
        _mod.__path__ = [str(_path)]
        sys.modules[_name] = _mod
    bc = importlib.import_module("kiln.capture.bytecode")

PY311, PY312 = bc.PY311, bc.PY312

STDLIB = ["json.decoder", "json.encoder", "json.scanner", "re._parser", "re._compiler",
          "textwrap", "collections", "functools", "inspect", "ast", "dataclasses", "argparse",
          "pathlib", "enum", "statistics", "difflib", "typing", "contextlib", "string",
          "tarfile", "asyncio.tasks", "email._header_value_parser", "logging"]


def nested_codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from nested_codes(c)


def module_codes(name: str) -> list[types.CodeType]:
    mod = importlib.import_module(name)
    return list(nested_codes(compile(inspect.getsource(mod), mod.__file__, "exec")))


def assert_same_code(new: types.CodeType, old: types.CodeType) -> None:
    where = f"{old.co_filename}:{old.co_firstlineno} {old.co_qualname}"
    assert new.co_code == old.co_code, where
    assert new.co_exceptiontable == old.co_exceptiontable, where
    assert new.co_linetable == old.co_linetable, where
    assert new.co_stacksize == old.co_stacksize, where
    assert list(new.co_lines()) == list(old.co_lines()), where
    assert list(new.co_positions()) == list(old.co_positions()), where
    assert (new.co_consts, new.co_names, new.co_varnames) == (old.co_consts, old.co_names,
                                                                old.co_varnames), where


# --- round trips ---------------------------------------------------------------------------

def test_round_trip_stdlib_identical():
    n = 0
    for name in STDLIB:
        for code in module_codes(name):
            assert_same_code(bc.assemble(bc.decode(code), code), code)
            n += 1
    assert n > 1500


def test_round_trip_torch_nn_identical():
    torch = pytest.importorskip("torch")
    import torch.nn.functional  # noqa: F401
    names = ["torch.nn.functional", "torch.nn.modules.module", "torch.nn.modules.linear",
             "torch.nn.modules.conv", "torch.nn.modules.activation", "torch.nn.modules.container",
             "torch.nn.modules.normalization", "torch.nn.modules.batchnorm", "torch._tensor"]
    for name in names:
        for code in module_codes(name):
            assert_same_code(bc.assemble(bc.decode(code), code), code)
    assert torch  # used


def test_decode_agrees_with_dis():
    for name in ["json.encoder", "argparse", "difflib", "re._parser"]:
        for code in module_codes(name):
            ours = bc.decode(code)
            theirs = [i for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]
            assert [i.opname for i in ours] == [i.opname for i in theirs]
            assert [i.offset for i in ours] == [i.offset for i in theirs]
            assert [i.arg for i in ours] == [i.arg for i in theirs]
            for a, b in zip(ours, theirs):
                if bc.is_jump(a):
                    assert a.target is not None and a.argval == a.target.offset
                elif a.opname == "KW_NAMES":  # 3.11's dis shows <unknown>
                    assert a.argval == code.co_consts[a.arg]
                else:
                    assert a.argval == b.argval or (a.argval != a.argval and b.argval != b.argval)
                assert a.positions == b.positions
                if b.starts_line is not None:
                    assert a.starts_line == b.starts_line
            for i in range(len(code.co_varnames) + len(code.co_cellvars) + len(code.co_freevars)):
                try:
                    expected = code._varname_from_oparg(i)
                except (IndexError, ValueError):
                    break
                assert bc.localsplus_names(code.co_varnames, code.co_cellvars,
                                           code.co_freevars)[i] == expected


def test_exception_entries_resolved():
    def f(x):
        try:
            with open(x) as fp:
                return fp.read()
        except OSError:
            return None
        finally:
            x = 1

    insts = bc.decode(f.__code__)
    covered = [i for i in insts if i.exn_tab_entry is not None]
    assert covered
    ids = {id(i) for i in insts}
    for inst in covered:
        e = inst.exn_tab_entry
        assert id(e.target) in ids and id(e.start) in ids and id(e.end) in ids
        assert e.start.offset <= inst.offset <= e.end.offset
    assert not any(i.opname in ("CACHE", "EXTENDED_ARG") for i in insts)


# --- perturbed round trips, run --------------------------------------------------------------

def _padding(kind: str) -> list:
    if kind == "nop":
        return [bc.create_instruction("NOP")]
    return bc.load_const(None) + bc.pop_top()


def perturb(code: types.CodeType, kind: str = "const", copies: int = 1) -> types.CodeType:
    """Insert stack-neutral instructions before (almost) every instruction, with the
    handler of the instruction they precede, then reassemble; nested code objects too."""
    out, started, prev = [], False, None
    for inst in bc.decode(code):
        # never between KW_NAMES / PRECALL / CALL, or in the prologue
        if started and inst.opname not in ("PRECALL", "CALL") and prev != "KW_NAMES":
            for _ in range(copies):
                for pad in _padding(kind):
                    pad.exn_tab_entry = inst.exn_tab_entry
                    out.append(pad)
        out.append(inst)
        started = started or inst.opname == "RESUME"
        prev = inst.opname
    new = bc.assemble(out, code)
    consts = tuple(perturb(c, kind, copies) if isinstance(c, types.CodeType) else c
                   for c in new.co_consts)
    return new.replace(co_consts=consts)


def module_functions(mod: types.ModuleType):
    """Python functions defined in ``mod``, including methods of its classes."""
    seen = set()

    def visit(obj, depth=0):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for f in (obj.fget, obj.fset, obj.fdel):
                if f is not None:
                    visit(f)
            return
        if isinstance(obj, types.FunctionType):
            if obj.__module__ == mod.__name__ and id(obj) not in seen:
                seen.add(id(obj))
                yield_list.append(obj)
        elif isinstance(obj, type) and obj.__module__ == mod.__name__ and depth < 3:
            for v in list(vars(obj).values()):
                visit(v, depth + 1)

    yield_list: list = []
    for v in list(vars(mod).values()):
        visit(v)
    return yield_list


@contextlib.contextmanager
def patched(module_names: list[str], kind: str = "const", copies: int = 1):
    saved = []
    try:
        for name in module_names:
            for fn in module_functions(importlib.import_module(name)):
                saved.append((fn, fn.__code__))
                fn.__code__ = perturb(fn.__code__, kind, copies)
        yield len(saved)
    finally:
        for fn, code in saved:
            fn.__code__ = code


def test_perturbed_layout_is_consistent():
    for name in ["argparse", "json.encoder", "difflib"]:
        for code in module_codes(name):
            new = perturb(code, "nop", 2)
            old_insts, new_insts = bc.decode(code), bc.decode(new)
            kept = [i for i in new_insts if i.opname != "NOP" or i.positions.lineno is not None]
            assert [i.opname for i in kept if i.opname != "NOP"] == \
                   [i.opname for i in old_insts if i.opname != "NOP"]
            # every original instruction keeps its location, handler and depth
            old_real = [i for i in old_insts if i.opname != "NOP"]
            new_real = [i for i in kept if i.opname != "NOP"]
            for a, b in zip(old_real, new_real):
                assert a.positions == b.positions
                assert (a.exn_tab_entry is None) == (b.exn_tab_entry is None)
                if a.exn_tab_entry is not None:
                    assert (a.exn_tab_entry.depth, a.exn_tab_entry.lasti) == \
                           (b.exn_tab_entry.depth, b.exn_tab_entry.lasti)
            if bc.stack_depths(old_insts):
                old_d, new_d = bc.stack_depths(old_insts), bc.stack_depths(new_insts)
                assert [old_d.get(i) for i in old_real] == [new_d.get(i) for i in new_real]
            # and the re-laid-out code round-trips exactly
            assert_same_code(bc.assemble(bc.decode(new), new), new)


def test_run_perturbed_json_textwrap_re_difflib():
    import difflib
    import json
    import json.scanner
    import re
    import statistics
    import textwrap

    data = {"b": [1, 2.5, None, True, {"x": "y\u00e9\n"}], "a": (), "c": {"d": [[], {}]}}
    text = ("The quick brown fox jumps over the lazy dog. " * 6).strip()
    pattern = r'(?P<key>\w+)\s*(?:=|:)\s*(\d+|"[^"]*")(?=[,;]|$)|[^\W\d]{3,}?'
    subject = 'alpha = 12, beta: "two words"; gamma=3 delta'
    a = ["one\n", "two\n", "three\n", "four\n"] * 3
    b = ["one\n", "2\n", "three\n", "five\n", "four\n"] * 3

    def run():
        dec = json.JSONDecoder()
        dec.scan_once = json.scanner.py_make_scanner(dec)
        dumped = json.dumps(data, indent=2, sort_keys=True)
        re.purge()
        rx = re.compile(pattern, re.I | re.M)
        return (dumped, dec.decode(dumped),
                textwrap.fill(text, width=23, subsequent_indent="  "),
                textwrap.shorten(text, 40), textwrap.dedent("   a\n    b\n   c"),
                rx.findall(subject), [m.span() for m in rx.finditer(subject)],
                list(difflib.unified_diff(a, b)), difflib.SequenceMatcher(None, a, b).ratio(),
                difflib.get_close_matches("appel", ["ape", "apple", "peach", "puppy"]),
                statistics.median([5, 1, 4, 2]), statistics.stdev([1.5, 2.5, 2.5, 2.75]))

    expected = run()
    modules = ["json.encoder", "json.decoder", "json.scanner", "textwrap", "re._parser",
               "re._compiler", "re", "difflib", "statistics"]
    for kind, copies in (("const", 1), ("nop", 3)):
        with patched(modules, kind, copies) as n:
            assert n > 100
            got = run()
        re.purge()
        assert got == expected


def test_run_perturbed_argparse_dataclasses():
    import argparse
    import dataclasses

    def run():
        p = argparse.ArgumentParser(prog="tool", description="demo", exit_on_error=False)
        p.add_argument("--n", type=int, default=3, help="count")
        p.add_argument("files", nargs="*")
        sub = p.add_subparsers(dest="cmd")
        s = sub.add_parser("go")
        s.add_argument("--fast", action="store_true")
        ns = p.parse_args(["--n", "5", "a", "b", "go", "--fast"])
        try:
            p.parse_args(["--n", "x"])
            error = None
        except argparse.ArgumentError as e:
            error = str(e)
        unknown = p.parse_known_args(["--zzz", "go"])[1]
        D = dataclasses.make_dataclass("D", [("x", int), ("y", list, dataclasses.field(
            default_factory=list))], frozen=True, order=True)
        d = D(1, [2])
        return (vars(ns), error, unknown, p.format_help(), repr(d), d < D(2), dataclasses.asdict(d),
                dataclasses.replace(d, x=7).x)

    expected = run()
    with patched(["argparse", "dataclasses"], "const", 2):
        got = run()
    assert got == expected


def test_run_perturbed_torch_nn():
    torch = pytest.importorskip("torch")
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 5 * 5, 8), nn.LayerNorm(8), nn.GELU(),
                          nn.Dropout(0.0), nn.Linear(8, 2))
    model.eval()
    x = torch.randn(2, 3, 5, 5)
    expected = model(x)
    modules = ["torch.nn.modules.module", "torch.nn.modules.container", "torch.nn.modules.conv",
               "torch.nn.modules.linear", "torch.nn.modules.activation",
               "torch.nn.modules.batchnorm", "torch.nn.modules.normalization",
               "torch.nn.modules.flatten", "torch.nn.modules.dropout", "torch.nn.functional"]
    with patched(modules, "const", 1) as n:
        assert n > 100
        got = model(x)
    assert torch.equal(got, expected)


# --- targeted edits ------------------------------------------------------------------------------

def _loop_sum(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        total += i
    return total


def _function(code: types.CodeType, like=None, closure=None):
    like = like or _loop_sum
    return types.FunctionType(code, like.__globals__, code.co_name, like.__defaults__, closure)


def test_extended_arg_growth_in_loop_body():
    insts = bc.decode(_loop_sum.__code__)
    store = next(i for i in insts if i.opname == "STORE_FAST" and i.argval == "i")
    at = insts.index(store) + 1
    pad = []
    for k in range(300):
        pad += bc.load_const(k) + bc.pop_top()
    new_insts = insts[:at] + pad + insts[at:]
    code = bc.assemble(new_insts, _loop_sum.__code__)
    assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(code))
    back = next(i for i in bc.decode(code) if i.opname == "JUMP_BACKWARD")
    assert back.arg > 255
    fn = _function(code)
    assert [fn(n) for n in (0, 1, 10, 50)] == [_loop_sum(n) for n in (0, 1, 10, 50)]
    assert_same_code(bc.assemble(bc.decode(code), code), code)


def test_extended_arg_on_constant_index():
    def template():
        pass

    insts = bc.resume(0) + bc.load_const(0)
    for k in range(1, 400):
        insts += bc.load_const(k + 0.5) + bc.binary_op("+")
    insts += bc.return_value()
    code = bc.assemble(insts, template.__code__)
    assert len(code.co_consts) >= 400
    assert types.FunctionType(code, {})() == sum(k + 0.5 for k in range(1, 400))
    assert_same_code(bc.assemble(bc.decode(code), code), code)


def _try_paths(xs, stop):
    out = []
    for x in xs:
        try:
            if x == stop:
                break
            if x < 0:
                continue
            try:
                out.append(10 // x)
            except ZeroDivisionError as e:
                out.append(type(e).__name__)
            finally:
                out.append("f")
        finally:
            out.append("g")
    with contextlib.suppress(KeyError):
        out.append({}["missing"])
    return out


def test_exception_table_survives_insertion():
    code = _try_paths.__code__
    insts = bc.decode(code)
    # insert a call that raises ZeroDivisionError where x == 0 inside the inner try, with the
    # handler of the instruction it precedes
    target = next(i for i in insts if i.opname == "BINARY_OP" and i.argval == dis._nb_ops.index(
        ("NB_FLOOR_DIVIDE", "//")))
    at = insts.index(target)
    check = bc.load_const(1) + bc.load_fast("x") + bc.binary_op("%") + bc.pop_top()
    for inst in check:
        inst.exn_tab_entry = target.exn_tab_entry
    new = insts[:at] + check + insts[at:]
    fn = _function(bc.assemble(new, code), like=_try_paths)
    for xs, stop in (([1, 0, -1, 5, 2], 2), ([3, 0], 9), ([], 0)):
        assert fn(xs, stop) == _try_paths(xs, stop)
    fn2 = _function(perturb(code, "nop", 2), like=_try_paths)
    assert fn2([1, 0, -1, 5, 2], 2) == _try_paths([1, 0, -1, 5, 2], 2)


def test_assemble_does_not_modify_input():
    insts = bc.decode(_try_paths.__code__)
    before = [(i.opname, i.arg, i.argval, i.offset, i.target) for i in insts]
    extra = bc.load_const(None) + bc.pop_top()
    bc.assemble(insts[:3] + extra + insts[3:], _try_paths.__code__)
    assert [(i.opname, i.arg, i.argval, i.offset, i.target) for i in insts] == before


def test_generic_conditional_jumps_forward_and_backward():
    def template(n):
        pass

    # acc = 0; loop: acc += n; n -= 1; if n: goto loop  (backward)
    # if acc > 100: return -1  (forward, generic name)
    loop = bc.load_fast("acc")
    big = bc.load_const(-1)
    insts = (bc.resume(0) + bc.load_const(0) + bc.store_fast("acc")
             + loop + bc.load_fast("n") + bc.binary_op("+=") + bc.store_fast("acc")
             + bc.load_fast("n") + bc.load_const(1) + bc.binary_op("-") + bc.store_fast("n")
             + bc.load_fast("n") + bc.pop_jump_if_true(loop[0])
             + bc.load_fast("acc") + bc.load_const(100) + bc.compare_op("<=")
             + bc.pop_jump_if_false(big[0])
             + bc.load_fast("acc") + bc.return_value() + big + bc.return_value())
    code = bc.assemble(insts, template.__code__)
    names = [i.opname for i in bc.decode(code)]
    if PY311:
        assert "POP_JUMP_BACKWARD_IF_TRUE" in names and "POP_JUMP_FORWARD_IF_FALSE" in names
    else:  # backward conditional -> inverted forward jump over a JUMP_BACKWARD
        j = names.index("POP_JUMP_IF_FALSE")
        assert names[j + 1] == "JUMP_BACKWARD"
    assert "acc" in code.co_varnames
    fn = types.FunctionType(code, {})
    assert [fn(k) for k in (1, 4, 13, 14)] == [1, 10, 91, -1]
    # the generic jump names also work backward for unconditional jumps
    with pytest.raises(bc.BytecodeError):
        bad = bc.resume(0) + bc.load_const(())
        bad += [bc.create_instruction("GET_ITER"), bc.create_instruction("FOR_ITER", target=bad[0])]
        bad += bc.return_const(None)
        bc.assemble(bad, template.__code__)


def helper(x, y, scale=1, *rest, **kw):
    return (x + y) * scale, rest, kw


def test_new_function_calls_global_with_kwargs():
    def template(a, b):
        pass

    insts = (bc.resume(0) + bc.load_global("helper", push_null=True) + bc.load_fast("a")
             + bc.load_fast("b") + bc.load_const(3) + bc.load_const("v")
             + bc.call_kw(4, ("scale", "extra")) + bc.return_value())
    fn = types.FunctionType(bc.assemble(insts, template.__code__), globals())
    assert fn(1, 2) == (9, (), {"extra": "v"})


def test_call_conventions():
    def template(a, b):
        pass

    g = {"helper": helper}
    # NULL below the callable: push_null() then load; same layout on 3.11 and 3.12
    insts = (bc.resume(0) + bc.push_null() + bc.load_global("helper") + bc.load_fast("a")
             + bc.load_fast("b") + bc.call(2) + bc.return_value())
    assert types.FunctionType(bc.assemble(insts, template.__code__), g)(2, 3) == (5, (), {})
    # method form: obj -> load_method -> (method, obj) or (NULL, attr)
    insts = (bc.resume(0) + bc.load_fast("a") + bc.load_method("append") + bc.load_fast("b")
             + bc.call(1) + bc.pop_top() + bc.load_fast("a") + bc.load_method("count")
             + bc.load_fast("b") + bc.call(1) + bc.return_value())
    lst = [1]
    assert types.FunctionType(bc.assemble(insts, template.__code__), g)(lst, 7) == 1
    assert lst == [1, 7]
    # CALL_FUNCTION_EX: NULL, callable, args tuple, kwargs dict
    insts = (bc.resume(0) + bc.load_global("helper", push_null=True) + bc.load_fast("a")
             + bc.load_fast("b") + bc.call_function_ex(True) + bc.return_value())
    fn = types.FunctionType(bc.assemble(insts, template.__code__), g)
    assert fn((1, 2, 3, 4), {"k": 0}) == (9, (4,), {"k": 0})
    insts = (bc.resume(0) + bc.push_null() + bc.load_global("helper") + bc.load_fast("a")
             + bc.call_function_ex(False) + bc.return_value())
    assert types.FunctionType(bc.assemble(insts, template.__code__), g)((1, 1), 0) == (2, (), {})


def test_stack_shuffles_and_sequences():
    def template(a, b):
        pass

    insts = (bc.resume(0) + bc.load_const(1) + bc.load_const(2) + bc.load_const(3) + bc.rot_n(3)
             + bc.build_tuple(3) + bc.load_fast("a") + bc.unpack_sequence(2) + bc.build_tuple(2)
             + bc.build_tuple(2) + bc.return_value())
    fn = types.FunctionType(bc.assemble(insts, template.__code__), {})
    assert fn((8, 9), None) == ((3, 1, 2), (9, 8))


def test_constants_keep_identity():
    def template():
        pass

    marker = [1, 2]
    values = [0, 0.0, -0.0, False, 0j, None, (0, 0.0), (0, -0.0), frozenset({0}), marker,
              float("nan"), "0", b"0", 1, True, 1.0]
    insts = bc.resume(0)
    for v in values:
        insts += bc.load_const(v)
    insts += bc.build_tuple(len(values)) + bc.return_value()
    got = types.FunctionType(bc.assemble(insts, template.__code__), {})()
    assert [type(v) for v in got] == [type(v) for v in values]
    assert got[9] is marker
    assert math.copysign(1, got[2]) == -1 and math.copysign(1, got[1]) == 1
    assert math.copysign(1, got[7][1]) == -1 and math.copysign(1, got[6][1]) == 1
    assert math.isnan(got[10])
    assert got[:10] == tuple(values[:10]) and got[11:] == tuple(values[11:])


def test_comparisons_and_binary_ops_from_strings():
    def template(a, b):
        pass

    ops = ["<", "<=", "==", "!=", ">", ">="]
    insts = bc.resume(0)
    for op in ops:
        insts += bc.load_fast("a") + bc.load_fast("b") + bc.compare_op(op)
    for op in ["+", "NB_SUBTRACT", "*", "//", "**", "&", "|", "^", "<<", ">>", "%"]:
        insts += bc.load_fast("a") + bc.load_fast("b") + bc.binary_op(op)
    insts += bc.build_tuple(17) + bc.return_value()
    fn = types.FunctionType(bc.assemble(insts, template.__code__), {})
    for a, b in ((1, 2), (2, 2), (3, 2)):
        assert fn(a, b) == (a < b, a <= b, a == b, a != b, a > b, a >= b, a + b, a - b, a * b,
                            a // b, a ** b, a & b, a | b, a ^ b, a << b, a >> b, a % b)
    # the arg round-trips through decode
    code = fn.__code__
    assert [i.argval for i in bc.decode(code) if i.opname == "COMPARE_OP"] == ops


def _outer(x, y):
    z = x + y

    def inner():
        return x, z

    return inner


def test_closures_round_trip_and_run():
    for fn in (_outer, _outer(1, 2)):
        code = fn.__code__
        new = perturb(code)
        assert set(bc.localsplus_names(code.co_varnames, code.co_cellvars, code.co_freevars)) >= \
            set(code.co_cellvars) | set(code.co_freevars)
        names = [i.opname for i in bc.decode(code)]
        assert ("MAKE_CELL" in names) if code.co_cellvars else ("COPY_FREE_VARS" in names)
        assert_same_code(bc.assemble(bc.decode(code), code), code)
        g = types.FunctionType(new, globals(), None, None, fn.__closure__)
        if fn is _outer:
            assert g(1, 2)() == (1, 3)
        else:
            assert g() == (1, 3)


def test_closure_built_from_emitters():
    def plain(x):
        pass

    def no_free():
        pass

    # inner: free var x, returns x * 10
    inner_insts = (bc.function_prologue((), 1) + bc.load_deref("x") + bc.load_const(10)
                   + bc.binary_op("*") + bc.return_value())
    inner = bc.assemble(inner_insts, no_free.__code__, co_freevars=("x",), co_name="inner",
                        co_qualname="plain.<locals>.inner")
    # outer: x is an argument and a cell (shares the argument's slot); adds a new local
    outer_insts = (bc.function_prologue(("x",), 0) + bc.load_closure("x") + bc.build_tuple(1)
                   + bc.load_const(inner) + bc.make_function(bc.FN_CLOSURE) + bc.store_fast("f")
                   + bc.load_const(5) + bc.store_deref("x")
                   + bc.push_null() + bc.load_fast("f") + bc.call(0) + bc.return_value())
    outer = bc.assemble(outer_insts, plain.__code__, co_cellvars=("x",))
    assert outer.co_varnames == ("x", "f") and outer.co_cellvars == ("x",)
    make_cell = bc.decode(outer)[0]
    assert make_cell.opname == "MAKE_CELL" and make_cell.arg == 0
    assert types.FunctionType(outer, {})(3) == 50


def test_new_local_shifts_cell_slots():
    # appending a local moves the cell and free slots; deref args must follow
    code = _outer.__code__
    insts = bc.decode(code)
    at = next(k for k, i in enumerate(insts) if i.opname == "RESUME") + 1
    new = insts[:at] + bc.load_const(41) + bc.store_fast("added") + insts[at:]
    out = bc.assemble(new, code)
    assert out.co_varnames[-1] == "added"
    assert types.FunctionType(out, globals())(1, 2)() == (1, 3)


def test_default_args_make_function():
    def template():
        pass

    def body(a, b=2):
        return a * b

    insts = (bc.resume(0) + bc.load_const((7,)) + bc.load_const(body.__code__)
             + bc.make_function(bc.FN_DEFAULTS) + bc.return_value())
    made = types.FunctionType(bc.assemble(insts, template.__code__), globals())()
    assert made.__defaults__ == (7,) and made(3) == 21


def _comprehensions(xs):
    squares = [x * x for x in xs if x]
    lambdas = [lambda: x for x in xs]
    table = {x: [y for y in range(x)] for x in xs}
    return squares, [f() for f in lambdas], table, sum(x for x in xs)


def test_comprehensions():
    code = _comprehensions.__code__
    names = [i.opname for i in bc.decode(code)]
    if PY312:  # inlined (PEP 709)
        assert "LOAD_FAST_AND_CLEAR" in names
    assert_same_code(bc.assemble(bc.decode(code), code), code)
    for kind, copies in (("const", 1), ("nop", 2)):
        fn = types.FunctionType(perturb(code, kind, copies), globals())
        assert fn([0, 1, 2, 3]) == _comprehensions([0, 1, 2, 3])


def _gen(n):
    for i in range(n):
        got = None
        try:
            got = yield i
        except ValueError:
            yield "caught"
        if got:
            return got
    yield from range(2)


def test_generators():
    fn = types.FunctionType(perturb(_gen.__code__), globals())
    assert list(fn(3)) == list(_gen(3))
    g1, g2 = fn(3), _gen(3)
    assert (next(g1), g1.throw(ValueError), next(g1)) == (next(g2), g2.throw(ValueError), next(g2))


def test_line_numbers_of_new_instructions():
    def template():
        pass

    first = template.__code__.co_firstlineno
    a = bc.load_const(1)
    a[0].starts_line = first + 5
    b = bc.load_const(2)
    b[0].positions = dis.Positions(first + 7, first + 8, 4, 9)
    insts = bc.resume(0) + a + bc.pop_top() + b + bc.pop_top() + bc.return_const(None)
    code = bc.assemble(insts, template.__code__)
    lines = {line for _, _, line in code.co_lines()}
    assert {first + 5, first + 7} <= lines
    decoded = bc.decode(code)
    assert decoded[3].positions == dis.Positions(first + 7, first + 8, 4, 9)
    assert decoded[1].starts_line == first + 5 and decoded[1].positions.col_offset is None
    assert decoded[2].lineno is None  # new, without positions or starts_line: no location
    # inherit_positions gives new instructions the location of an existing one
    c = bc.inherit_positions(bc.load_const(3) + bc.pop_top(), decoded[3])
    code = bc.assemble(decoded[:4] + c + decoded[4:], code)
    assert [i.positions for i in bc.decode(code)[4:6]] == [decoded[3].positions] * 2


def test_stack_depths():
    def f(a, b):
        return a + b * 2

    insts = bc.decode(f.__code__)
    depths = bc.stack_depths(insts)
    assert depths[insts[0]] == 0
    ret = next(i for i in insts if i.opname == "RETURN_VALUE")
    assert depths[ret] == 1
    assert max(depths.values()) <= f.__code__.co_stacksize

    def template(a):
        pass

    merge = bc.load_const(2)
    bad = (bc.resume(0) + bc.load_fast("a") + bc.pop_jump_if_false(merge[0]) + bc.load_const(1)
           + merge + bc.return_value())
    with pytest.raises(bc.BytecodeError, match="inconsistent stack depth"):
        bc.assemble(bad, template.__code__)
    with pytest.raises(bc.BytecodeError, match="negative stack depth"):
        bc.assemble(bc.resume(0) + bc.pop_top() + bc.return_const(None), template.__code__)


def test_errors_are_clear():
    def template():
        pass

    with pytest.raises(bc.BytecodeError, match="neither a cell nor a free"):
        bc.assemble(bc.resume(0) + bc.load_deref("nope") + bc.return_value(), template.__code__)
    with pytest.raises(bc.BytecodeError, match="unknown opname"):
        bc.create_instruction("NOT_AN_OP")
    outside = bc.load_const(1)
    with pytest.raises(bc.BytecodeError, match="not in the instruction list"):
        bc.assemble(bc.resume(0) + bc.jump_forward(outside[0]), template.__code__)
    with pytest.raises(bc.BytecodeError, match="KW_NAMES"):
        bc.assemble(bc.resume(0) + bc.push_null() + bc.load_global("helper") + bc.load_const(1)
                    + bc.call_kw(1, ("x",))[:1] + bc.load_const(2) + bc.call_kw(1, ("x",))[1:]
                    + bc.return_value(), template.__code__)
    with pytest.raises(bc.BytecodeError, match="give argval"):
        bc.create_instruction("LOAD_CONST", arg=3)
    with pytest.raises(bc.BytecodeError, match="cannot set"):
        bc.assemble(bc.resume(0) + bc.return_const(None), template.__code__, co_code=b"")


def test_format_instructions():
    insts = bc.decode(_try_paths.__code__)
    text = bc.format_instructions(insts + bc.load_const("new"))
    assert "FOR_ITER" in text and "(to #" in text and "[exc -> #" in text and " new " in text
    assert len(text.splitlines()) == len(insts) + 1
    assert "RESUME" in repr(insts[next(k for k, i in enumerate(insts) if i.opname == "RESUME")])


class _Block:
    """A context manager that records how it is entered and left."""

    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    def __enter__(self):
        self.log.append(("enter", self.tag))
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", self.tag, exc[0]))
        return False


def test_with_setup_in_a_prologue_then_exit_call():
    # what a resume function's prologue does to re-enter a block (resume._enter_autocast_again):
    # construct the context manager, BEFORE_WITH, drop __enter__'s result, leaving __exit__ on the
    # stack; the block's normal end calls it with three Nones
    def template(log):
        pass

    insts = (bc.resume(0) + bc.push_null() + bc.load_const(_Block) + bc.load_fast("log") + bc.load_const("b")
             + bc.call(2) + [bc.create_instruction("BEFORE_WITH")] + bc.pop_top()
             + bc.load_fast("log") + bc.load_method("append") + bc.load_const("body") + bc.call(1) + bc.pop_top()
             + bc.load_const(None) + bc.load_const(None) + bc.load_const(None) + bc.call(2) + bc.pop_top()
             + bc.load_const(7) + bc.return_value())
    log = []
    assert types.FunctionType(bc.assemble(insts, template.__code__), {})(log) == 7
    assert log == [("enter", "b"), "body", ("exit", "b", None)]
