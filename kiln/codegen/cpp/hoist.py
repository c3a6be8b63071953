"""Loop-invariant values of a flat pointwise nest, computed once per outer iteration.

A member's body is straight-line code run for every element of the innermost (vectorized) loop. A value
that does not depend on that loop's variable, such as the row an embedding lookup or ``index_select``
reads (``tmp5 = kiln_indirect(in_ptr0[x0], ...)``), is computed before the innermost loop instead: the
loop then copies a contiguous row (vector loads) rather than recomputing the index, bounds check
included, per element (which also kept the compiler from vectorizing it: the check stores an error
flag).

Only plain declarations move (``T tmpN = expr;``), in order, when everything they read is invariant:
outer loop variables, size arguments, constants, other moved values and loads from input pointers that
no store of the kernel can reach (not ``out_ptr``s, kernel-local buffers or an input stored in place,
``FusedGroup.aliased``). A body with any other kind of statement is left as it is.
"""
from __future__ import annotations

import re

_DECL = re.compile(r"^(?P<type>[A-Za-z_][\w:]*)\s+(?P<name>tmp\d+)\s*=\s*(?P<expr>.+);$")
_STORE = re.compile(r"^(?:out_ptr\d+|local_\w+)(?:\[.*\])?\s*=\s*[^=].*;$")
_WORD = re.compile(r"[A-Za-z_]\w*")
_VARIANT = re.compile(r"^(?:out_ptr\d+|local_\w+)$")


def hoist_invariants(body: list[str], inner: str, unsafe: set[str]) -> tuple[list[str], list[str]]:
    """(lines to run before the innermost loop, the loop's body). ``unsafe``: input pointers that a
    store of this kernel may write (their loads stay in the loop)."""
    lines = [line.strip() for line in body]
    if not all(_plain(line) for line in lines):
        return [], body
    hoisted: list[str] = []
    kept: list[str] = []
    renames: dict[str, str] = {}
    invariant: set[str] = set()
    block = 0
    for original, line in zip(body, lines):
        if line == "{":
            block += 1
            renames = {}  # a member's block: its names are its own
        text = _rename(line, renames)
        decl = _DECL.match(text)
        if decl is not None and _is_invariant(decl["expr"], inner, invariant, unsafe):
            name = f"h{block}_{decl['name']}"
            renames[decl["name"]] = name
            invariant.add(name)
            hoisted.append(f"{decl['type']} {name} = {decl['expr']};")
            continue
        kept.append(original if text == line else original[: len(original) - len(original.lstrip())] + text)
    return hoisted, kept


def _plain(line: str) -> bool:
    return line in ("{", "}") or line.startswith("//") or _DECL.match(line) is not None or \
        _STORE.match(line) is not None


def _rename(line: str, renames: dict) -> str:
    if not renames:
        return line
    return _WORD.sub(lambda m: renames.get(m.group(0), m.group(0)), line)


def _is_invariant(expr: str, inner: str, invariant: set, unsafe: set) -> bool:
    for word in _WORD.findall(expr):
        if word == inner or _VARIANT.match(word) or word in unsafe:
            return False
        if word.startswith("tmp") and word[3:].isdigit():
            return False  # a value computed in the loop
        if word.startswith("h") and "_tmp" in word and word not in invariant:
            return False
    return True
