"""Shrink a failing program while it keeps failing the same way.

    small = minimize(src, lambda s: run_source(s).signature() == sig)

Greedy passes over the AST, repeated until none makes progress (or the trial budget is spent):
delete a statement, replace a compound statement (if/for/while/with/try/match) by its body,
drop an element of a returned tuple/list/dict, replace an expression by one of its operands
(``a + b`` -> ``a``, ``f(a)`` -> ``a``, ``t.relu()`` -> ``t``, ``c if p else d`` -> ``c``).
"""
from __future__ import annotations

import ast
import copy
from typing import Callable, Iterator

_COMPOUND = (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Match)


def minimize(src: str, still_fails: Callable[[str], bool], budget: int = 400) -> str:
    """The smallest program found for which ``still_fails`` holds (``src`` itself must fail).

    still_fails should run programs with a short timeout and a memory cap (runner.limit_memory):
    an edit can make a bounded loop endless (``for e in lst[:2]: lst.append(e)`` -> ``in lst``).
    """
    best = ast.unparse(ast.parse(src))
    if not still_fails(best):
        best = src  # unparsing changed the behaviour (unlikely): shrink the original text
    trials = 0
    progress = True
    while progress and trials < budget:
        progress = False
        for mutate in (_statement_edits, _expression_edits):
            index = 0
            while trials < budget:
                candidate = _nth(mutate, best, index)
                if candidate is None:
                    break
                trials += 1
                if candidate != best and still_fails(candidate):
                    best, progress = candidate, True  # same index: the next edit shifted into place
                else:
                    index += 1
    return best


def _nth(mutate, src: str, index: int) -> str | None:
    for i, make in enumerate(mutate(ast.parse(src))):
        if i == index:
            try:
                tree = make()
                if tree is None:
                    return src
                return ast.unparse(ast.fix_missing_locations(tree))
            except Exception:  # an edit that cannot be printed: skip it
                return src
    return None


def _bodies(tree) -> Iterator[tuple[ast.AST, str]]:
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield node, field
        if isinstance(node, ast.Try):
            for h in node.handlers:
                yield h, "body"


def _statement_edits(tree) -> Iterator[Callable]:
    """Each yielded thunk makes a fresh copy of ``tree`` with one statement-level edit."""
    spots = [(path_of(tree, node), field, i, stmt) for node, field in _bodies(tree)
             for i, stmt in enumerate(getattr(node, field))]
    for path, field, i, stmt in spots:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "f" and path == ():
            continue
        if i == 0 and field == "body" and isinstance(node_at(tree, path), ast.While):
            continue  # the loop counter's increment: deleting it makes the loop endless
        yield lambda path=path, field=field, i=i: _splice(tree, path, field, i, [])
        if isinstance(stmt, _COMPOUND):
            for inner in _inner_bodies(stmt):
                yield lambda path=path, field=field, i=i, inner=inner: _splice(tree, path, field, i, inner)


def _splice(tree, path, field, i, replacement):
    new = copy.deepcopy(tree)
    body = getattr(node_at(new, path), field)
    body[i:i + 1] = copy.deepcopy(replacement)
    if not body and field == "body":
        body.append(ast.Pass())
    return new


def _inner_bodies(stmt) -> list[list]:
    if isinstance(stmt, ast.Match):
        return [c.body for c in stmt.cases]
    out = [stmt.body]
    if getattr(stmt, "orelse", None):
        out.append(stmt.orelse)
    if isinstance(stmt, ast.Try):
        out += [h.body for h in stmt.handlers]
    return out


def _expression_edits(tree) -> Iterator[Callable]:
    exprs = [n for n in ast.walk(tree) if isinstance(n, ast.expr)]
    for target_index, node in enumerate(exprs):
        for k in range(len(_simpler(node))):
            yield lambda t=target_index, k=k: _edit_expr(tree, t, k)


def _edit_expr(tree, target_index, k):
    new = copy.deepcopy(tree)
    node = [n for n in ast.walk(new) if isinstance(n, ast.expr)][target_index]
    return new if _replace(new, node, _simpler(node)[k]) else None


def _simpler(node) -> list:
    if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) > 1:
        return [type(node)(elts=node.elts[:i] + node.elts[i + 1:], ctx=node.ctx) for i in range(len(node.elts))]
    if isinstance(node, ast.Dict) and len(node.keys) > 1:
        return [ast.Dict(keys=node.keys[:i] + node.keys[i + 1:], values=node.values[:i] + node.values[i + 1:])
                for i in range(len(node.keys))]
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    if isinstance(node, ast.Call):
        out = [a for a in node.args if not isinstance(a, ast.Starred)]
        if isinstance(node.func, ast.Attribute):
            out.append(node.func.value)
        return out
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        return [node.value]
    if isinstance(node, ast.Compare):
        return [ast.Constant(True), ast.Constant(False)]
    return []


def _replace(tree, old, new) -> bool:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, copy.deepcopy(new))
                return True
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if v is old:
                        value[i] = copy.deepcopy(new)
                        return True
    return False


def path_of(tree, target) -> tuple:
    """(field, index) steps from ``tree`` to ``target``."""
    def walk(node, path):
        if node is target:
            return path
        for field, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                found = walk(value, path + ((field, None),))
                if found is not None:
                    return found
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    if isinstance(v, ast.AST):
                        found = walk(v, path + ((field, i),))
                        if found is not None:
                            return found
        return None
    return walk(tree, ())


def node_at(tree, path: tuple):
    node = tree
    for field, index in path:
        node = getattr(node, field)
        if index is not None:
            node = node[index]
    return node
