"""Pieces every code generator shares: printing index expressions, naming kernels, provenance."""
from __future__ import annotations

import re

import sympy

from kiln.codegen.locations import location_in_trace
from kiln.loopir.index import FloorDiv, InRange, ModularIndexing


def print_index_c(expr) -> str:
    """A sympy index expression as C/C++ (and Python/Triton: ``//`` is spelled per language)."""
    return _print(sympy.sympify(expr), "/")


def print_index_py(expr) -> str:
    return _print(sympy.sympify(expr), "//")


def _print(e, div: str) -> str:
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return e.name
    if isinstance(e, sympy.Add):
        # terms ordered by their printed text (numbers last): a stable order without sympy's slow str()
        parts = [p for _, p in sorted((a.is_Number, _print(a, div)) for a in e.args)]
        out = parts[0]
        for p in parts[1:]:
            out += f" - {p[1:]}" if p.startswith("-") else f" + {p}"
        return f"({out})"
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:  # (index arithmetic is integral: a rational coefficient is kiln's bug)
            raise NotImplementedError(f"cannot print index expression {e}: coefficient {coeff} is not an integer")
        body = "*".join(_atom(a, div) for a in sympy.Mul.make_args(rest))
        if coeff == 1:
            return body
        if coeff == -1:
            return f"-{body}"
        return f"{int(coeff)}*{body}"
    if isinstance(e, FloorDiv):  # (a divisor or modulus that is a product is parenthesized: 16*s1)
        return f"({_print(e.args[0], div)} {div} {_atom(e.args[1], div)})"
    if isinstance(e, ModularIndexing):
        a, b, c = _print(e.args[0], div), _atom(e.args[1], div), _atom(e.args[2], div)
        inner = a if e.args[1] == 1 else f"({a} {div} {b})"
        return f"({inner} % {c})"
    if isinstance(e, InRange):
        return _print(e.args[0], div)
    if isinstance(e, sympy.Pow) and e.args[1].is_Integer and int(e.args[1]) > 0:
        return "*".join([_atom(e.args[0], div)] * int(e.args[1]))
    if isinstance(e, (sympy.Min, sympy.Max)):  # sizes of slices with symbolic bounds
        name = "min" if isinstance(e, sympy.Min) else "max"
        out = _print(e.args[0], div)
        for a in e.args[1:]:
            out = f"{name}({out}, {_print(a, div)})" if div == "//" else f"std::{name}<int64_t>({out}, {_print(a, div)})"
        return out
    raise NotImplementedError(f"cannot print index expression {e}")


def _atom(e, div) -> str:
    if isinstance(e, InRange):
        return _atom(e.args[0], div)
    s = _print(e, div)
    return s if e.is_Atom or _enclosed(s) else f"({s})"


def _enclosed(s: str) -> bool:
    """Whether one pair of parentheses encloses all of ``s``: "(a + b)" is, "(a + b)*c" is not (a product
    whose first factor is parenthesized must still be parenthesized as a divisor: x / ((a + b)*c))."""
    if not s.startswith("("):
        return False
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(s) - 1
    return False


def op_names(origins) -> list[str]:
    """Short names of the ATen ops behind a kernel, in order, without repeats."""
    out = []
    for node in origins:
        target = getattr(node, "target", None)
        name = getattr(target, "__name__", str(target)).split(".")[0]
        name = re.sub(r"[^0-9a-zA-Z_]", "", name).strip("_")
        if name and name not in out:
            out.append(name)
    return out


def kernel_name(prefix: str, origins, index: int, max_ops: int = 4) -> str:
    names = op_names(origins)
    body = "_".join(names[:max_ops]) or "kernel"
    return f"{prefix}_fused_{body}_{index}" if len(origins) > 1 else f"{prefix}_{body}_{index}"


def provenance(origins) -> list[str]:
    """One line per source op: the ATen op. (Not the user's file:line: kernel sources are cache keys,
    and the same model run from another file or after an edit above it must hit the same entries.)"""
    return [f"{node.name} = {node.target}" for node in origins]


def user_location(node) -> str:
    return location_in_trace(node.meta.get("stack_trace") if hasattr(node, "meta") else None)


def nonempty_test(index, tests: dict, joiner: str) -> str | None:
    """The test that every dimension ``index`` reaches through a loaded index is non-empty: the tests
    ``indirect_indexing`` recorded (loaded-index symbol -> test) for the symbols in ``index``, joined; None
    where no such dimension can be empty. An empty dimension has no element to read or write, not even
    the one an out-of-range index falls back to: the access is skipped (C++) or masked off (Triton)."""
    found = sorted({tests[s] for s in sympy.sympify(index).free_symbols if s in tests})
    return joiner.join(found) if found else None


def _where(node) -> str:
    """Where the user wrote the call an ATen node came from, as a mark that ``resolve_locations``
    fills in when the wrapper is loaded: from this compile's graph, or from the graph of the process
    that loads it from the warm cache (the same graph may sit on other lines there)."""
    origin = node.meta.get("from_node") if hasattr(node, "meta") else None
    if origin and origin != "backward":
        return f"<<at:{origin}>>"
    where = user_location(node)
    return f" at {where}" if where else ""


def error_locations(kernel, inlined=()) -> dict:
    """{torch-level node name: its user location} for the marks of ``kernel``'s error message."""
    return {node.meta["from_node"]: user_location(node) for node in (*kernel.origins, *inlined)
            if hasattr(node, "meta") and node.meta.get("from_node")}


def _user_op(node) -> str | None:
    """The user's call that an ATen node came from (``from_op``), when it names another op than the
    node's own: ``index_fill`` for the ``index_put`` it decomposes to."""
    op = node.meta.get("from_op") if hasattr(node, "meta") else None
    if op in ("getitem", "__getitem__"):
        return "indexing x[...]"
    if op in ("setitem", "__setitem__"):
        return "index assignment x[...] = ..."
    return op or None


def _op_name(node) -> str:
    """``sum`` for ``aten.sum.dim_IntList``: the name a user knows the op by."""
    target = getattr(node, "target", node)
    name = getattr(target, "__name__", None) or str(target)
    return name.split(".")[0]


def is_indexing_target(target: str) -> bool:
    """Whether an op (its printed target) reads or writes through loaded indices: the ops an
    out-of-bounds message names."""
    return any(k in target for k in ("index", "gather", "scatter", "embedding", "take", "select"))


def index_error_message(kernel, inlined=()) -> str:
    """What a kernel that met an out-of-range loaded index raises: the indexing ops it runs and the user's
    lines they came from (eager raises an IndexError for the same values). ``inlined``: the producers its
    reductions inline (``ComputedBuffer.inlined``), where ``x[i].sum()``'s indexing is."""
    ops = []
    for node in dict.fromkeys((*kernel.origins, *inlined)):
        target = str(getattr(node, "target", ""))
        if is_indexing_target(target):
            ops.append(f"{_user_op(node) or target}{_where(node)}")
    scatters = [op for op in ops if op.startswith("masked_scatter")]
    if scatters and len(scatters) == len(ops):  # its source is read through the running count of the mask's True values
        return (f"{'; '.join(dict.fromkeys(scatters))} (kernel {kernel.name}): the source has fewer elements "
                f"than the mask has True values (eager PyTorch raises too)")
    if not ops:  # the indexing was fused into another op's kernel (``x[i].sum()``): name those
        for node in kernel.origins:
            ops.append(f"{_user_op(node) or _op_name(node)}{_where(node)}")
        ops = [f"an indexing op fused into {', '.join(dict.fromkeys(ops))}"] if ops else []
    what = "; ".join(dict.fromkeys(ops)) or "an indexing op"
    return (f"index out of bounds in {what} (kernel {kernel.name}): an index tensor holds a value outside "
            f"the dimension it indexes (eager PyTorch raises too); check the index values")


def kernel_params(reads, writes) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """A kernel's parameters: buffers it only reads (``in_ptrN``) then buffers it writes
    (``out_ptrN``), each once, in first-use order. Returns ([(buffer, "in"|"out")], {buffer: pointer})."""
    params: list[tuple[str, str]] = []
    pointers: dict[str, str] = {}
    for name in dict.fromkeys(reads):
        pointers[name] = f"in_ptr{len(pointers)}"
        params.append((name, "in"))
    n_in = len(pointers)
    for name in dict.fromkeys(writes):
        pointers[name] = f"out_ptr{len(pointers) - n_in}"
        params.append((name, "out"))
    return params, pointers


def mark_updated_in_place(params, members) -> list[tuple[str, str]]:
    """``params`` with the buffers that update members (scatters, ``loopir/scatter.py``) write marked
    ``"inout"``: the wrapper passes the buffer their copy wrote instead of allocating one."""
    from kiln.loopir.scatter import is_update

    updated = {m.node.name for m in members if is_update(m.node)}
    return [(name, "inout" if name in updated else kind) for name, kind in params]
