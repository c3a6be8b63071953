"""Statements of the fuzzer's grammar: each generator returns source lines (indented relative to
the block they go in) and records in the scope the names it defines.

Rules that keep programs valid and deterministic: loops are bounded (for over containers that are
locked meanwhile, ``range`` of small constants, counted ``while``), containers only shrink at the
top level of a function body, names bound inside a block are forgotten after it.
"""
from __future__ import annotations

from .exprs import Exprs
from .scope import ELEM, LISTS, Box, Scope

IND = "    "


def indent(lines: list[str], n: int = 1) -> list[str]:
    return [IND * n + ln for ln in lines]


class Stmts(Exprs):
    counter: int

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def define(self, sc: Scope, kind: str, **facts) -> str:
        """A new name of ``kind``, visible from the next statement on (not in its own right side)."""
        name = self.fresh()
        self.pending.append((sc, name, Box(kind, **facts)))
        return name

    def commit(self) -> None:
        for sc, name, box in self.pending:
            sc.names[name] = box
        self.pending.clear()

    # --- blocks -----------------------------------------------------------------------------
    def block(self, sc: Scope, n: int, depth: int) -> list[str]:
        lines: list[str] = []
        for _ in range(n):
            lines += self.stmt(sc, depth)
            self.commit()
        return lines or ["pass"]

    def stmt(self, sc: Scope, depth: int) -> list[str]:
        weighted = [
            (self.s_assign_t, 6), (self.s_assign_i, 3), (self.s_list, 4), (self.s_list_mut, 4),
            (self.s_dict, 2), (self.s_dict_mut, 3), (self.s_view, 2), (self.s_set, 1), (self.s_tuple, 2),
            (self.s_iter, 3), (self.s_itertools, 2), (self.s_comp, 3), (self.s_closure, 2),
            (self.s_object, 3), (self.s_object_use, 3), (self.s_record, 2), (self.s_global, 2),
            (self.s_arg_mut, 2), (self.s_partial, 1), (self.s_identity, 1), (self.s_numlike, 1),
            (self.s_string, 1), (self.s_list_helper, 1), (self.s_lambdas, 1),
        ]
        if depth > 0:
            weighted += [(self.s_if, 3), (self.s_for, 3), (self.s_try, 3), (self.s_match, 2),
                         (self.s_while, 1), (self.s_nograd, 1)]
        if sc.in_loop:
            weighted.append((self.s_break, 1))
        fns = [f for f, w in weighted for _ in range(w)]
        for _ in range(8):
            lines = self.pick(fns)(sc, depth)
            if lines:
                return lines
        return self.s_assign_t(sc, depth)

    def sub_block(self, sc: Scope, depth: int, n: int | None = None, loop: bool = False) -> list[str]:
        child = sc.child()
        if loop:
            child.in_loop = True
        return indent(self.block(child, n or self.rng.randint(1, 3), depth - 1))

    # --- scalars ----------------------------------------------------------------------------
    def s_assign_t(self, sc, depth):
        targets = sc.of("T")
        if targets and self.chance(0.4):
            name = self.pick(targets)
            op = self.pick(["=", "+=", "*=", "-="])
            return [f"{name} {op} {self.t_expr(sc)}"]
        expr = self.t_expr(sc)
        return [f"{self.define(sc, 'T')} = {expr}"]

    def s_assign_i(self, sc, depth):
        ints = sc.of("I")
        if ints and self.chance(0.4):
            return [f"{self.pick(ints)} {self.pick(['=', '+='])} {self.i_expr(sc)}"]
        expr = self.i_expr(sc)
        return [f"{self.define(sc, 'I')} = {expr}"]

    def s_list_helper(self, sc, depth):
        helpers = [h for h in self.helpers if h[2] == "LT"]
        if not helpers:
            return []
        call = self.call_helper(sc, self.pick(helpers), 2)
        return [f"{self.define(sc, 'LT', minlen=1)} = {call}"]

    def s_lambdas(self, sc, depth):
        """Lambdas made in a loop: bound by a default argument, or late-binding the loop variable."""
        t = self.t_leaf(sc)
        fns = self.pick(["[lambda _t, _i=_i: _t * _i for _i in range(3)]", "[lambda _t: _t * _i for _i in range(3)]",
                         "list(map(lambda _k: (lambda _t: _t + _k), range(2)))"])
        return [f"{self.define(sc, 'T')} = sum((_f({t}) for _f in {fns}), {self.t_leaf(sc)})"]

    def s_numlike(self, sc, depth):
        ds = sc.of("D")
        if not ds:
            return []
        d = self.pick(ds)
        acc = self.define(sc, "T")
        return [f"{acc} = {self.t_expr(sc, 1)}", f"for _k, _n in {d}.items():",
                f"{IND}{acc} = {acc} + _n * len(_k)"]

    # --- lists ------------------------------------------------------------------------------
    def s_list(self, sc, depth):
        lt, li = sc.of("LT"), sc.of("LI", "TI", "S")
        options = [
            lambda: ("LT", f"[{self.t_expr(sc, 1)}, {self.t_expr(sc, 1)}]", 2),
            lambda: ("LI", f"[{self.i_expr(sc, 1)} for _ in range({self.rng.randint(0, 3)})]", 0),
            lambda: ("LI", f"list(range({self.rng.randint(1, 4)}))", 1),
            lambda: ("LN", f"[{self.t_expr(sc, 1)}, {self.i_expr(sc, 1)}, {self.n_expr(sc)}]", 3),
        ]
        if lt:
            src = self.pick(lt)
            m = sc.box(src).minlen
            options += [
                lambda: ("LT", f"list({src})", m),
                lambda: ("LT", f"{src}[1:]", max(0, m - 1)),
                lambda: ("LT", f"{src}[::-1]", m),
                lambda: ("LT", f"{src}[:{self.rng.randint(1, 2)}]", min(1, m)),
                lambda: ("LT", f"[*{src}, {self.t_expr(sc, 1)}]", m + 1),
                lambda: ("LT", f"{src} + [{self.t_leaf(sc)}]", m + 1),
                lambda: ("LT", f"{src} * 2", 2 * m),
                lambda: ("LT", f"list(reversed({src}))", m),
                lambda: ("alias", src, m),
            ]
        if li:
            isrc = self.pick(li)
            options += [
                lambda: ("LI", f"sorted({isrc}{self.pick(['', ', reverse=True'])})", sc.box(isrc).minlen),
                lambda: ("LI", f"[_v * 2 for _v in {isrc}]", sc.box(isrc).minlen),
            ]
        kind, expr, minlen = self.pick(options)()
        if kind == "alias":
            name = self.fresh()
            sc.names[name] = sc.names[expr]
            return [f"{name} = {expr}"]
        return [f"{self.define(sc, kind, minlen=minlen)} = {expr}"]

    def mutable(self, sc, kinds):
        return [n for n in sc.of(*kinds) if not sc.box(n).locked]

    def s_list_mut(self, sc, depth):
        names = self.mutable(sc, LISTS)
        if not names:
            return []
        name = self.pick(names)
        box = sc.box(name)
        elem = {"LT": lambda: self.t_expr(sc, 1), "LI": lambda: self.i_expr(sc, 1),
                "LN": lambda: self.n_expr(sc)}[box.kind]
        options = [
            lambda: (f"{name}.append({elem()})", 1),
            lambda: (f"{name}.extend([{elem()}, {elem()}])", 2),
            lambda: (f"{name}.insert({self.pick(['0', '1', '-1', '10'])}, {elem()})", 1),
            lambda: (f"{name} += [{elem()}]", 1),
            lambda: (f"{name}[{self.pick(['1:2', ':1', '2:', '1:1'])}] = [{elem()}, {elem()}]", None),
        ]
        if box.minlen > 0:
            options.append(lambda: (f"{name}[{self.pick(['0', '-1'])}] = {elem()}", 0))
        if box.kind == "LI":
            options.append(lambda: (f"{name}.sort()", 0))
        options.append(lambda: (f"{name}.reverse()", 0))
        if sc.top:
            if box.minlen > 0:
                options += [lambda: (f"{name}.pop()", -1), lambda: (f"del {name}[0]", -1),
                            lambda: (f"{self.define(sc, ELEM[box.kind])} = {name}.pop(0)", -1)]
            options.append(lambda: (f"{name}.clear()", None))
        line, delta = self.pick(options)()
        if delta is None:
            box.minlen = 0
        elif sc.top or delta < 0:
            box.minlen = max(0, box.minlen + delta)
        return [line]

    # --- dicts, views, sets, tuples ---------------------------------------------------------
    def s_dict(self, sc, depth):
        ds = sc.of("D")
        options = [
            lambda: ({"a": "T", "b": "I"}, f"{{'a': {self.t_expr(sc, 1)}, 'b': {self.i_expr(sc, 1)}}}"),
            lambda: ({"p": "T", "q": "T"}, f"dict(zip(['p', 'q'], [{self.t_expr(sc, 1)}, {self.t_leaf(sc)}]))"),
            lambda: ({"k": "I"}, f"dict(k={self.i_expr(sc, 1)})"),
        ]
        if ds:
            src = self.pick(ds)
            keys = dict(sc.box(src).keys)
            options += [
                lambda: (keys, f"dict({src})"),
                lambda: ({**keys, "n": "T"}, f"{{**{src}, 'n': {self.t_expr(sc, 1)}}}"),
                lambda: ({k: v for k, v in keys.items() if k != "b"},
                         f"{{_k: _v for _k, _v in {src}.items() if _k != 'b'}}"),
                lambda: (keys, f"{src}.copy()"),
                lambda: ("alias", src),
            ]
        keys, expr = self.pick(options)()
        if keys == "alias":
            name = self.fresh()
            sc.names[name] = sc.names[expr]
            return [f"{name} = {expr}"]
        return [f"{self.define(sc, 'D', keys=dict(keys))} = {expr}"]

    def s_dict_mut(self, sc, depth):
        ds = self.mutable(sc, ("D",))
        if not ds:
            return []
        name = self.pick(ds)
        box = sc.box(name)
        key = self.pick(["a", "b", "n", "m", "z"])
        options = [
            lambda: (f"{name}[{key!r}] = {self.t_expr(sc, 1)}", key, "T"),
            lambda: (f"{name}[{key!r}] = {self.i_expr(sc, 1)}", key, "I"),
            lambda: (f"{name}.update({{{key!r}: {self.t_expr(sc, 1)}}})", key, "T"),
            lambda: (f"{name}.setdefault({key!r}, {self.i_expr(sc, 1)})", key, box.keys.get(key)),
            lambda: (f"{self.define(sc, 'N')} = {name}.get({key!r}, {self.i_expr(sc, 1)})", None, None),
        ]
        if sc.top:
            options += [lambda: (f"{name}.pop({key!r}, None)", key, "del")]
            if box.keys:
                k = self.pick(sorted(box.keys))
                options += [lambda: (f"del {name}[{k!r}]", k, "del"),
                            lambda: (f"{self.define(sc, 'N')} = {name}.pop({k!r})", k, "del")]
        line, key, kind = self.pick(options)()
        if key is not None and kind is not None:
            self.note_key(sc, box, key, kind)
        return [line]

    @staticmethod
    def note_key(sc, box, key, kind):
        """Record that ``key`` was set to a value of ``kind`` (or deleted: kind "del")."""
        if kind == "del" or (key in box.keys and box.keys[key] != kind):
            box.keys.pop(key, None)  # gone, or T on one path and I on another: forget it
        elif sc.top:
            box.keys[key] = kind

    def s_view(self, sc, depth):
        ds = self.mutable(sc, ("D",))
        if not ds:
            return []
        name = self.pick(ds)
        meth = self.pick(["keys", "values", "items"])
        view = self.define(sc, "V")
        lines = [f"{view} = {name}.{meth}()"]
        if self.chance(0.7):
            key = self.pick(["late", "a", "zz"])
            lines.append(f"{name}[{key!r}] = {self.i_expr(sc, 1)}")
            self.note_key(sc, sc.box(name), key, "I")
        use = self.pick([f"len({view})", f"list({view})", f"{self.pick(['a', 'late'])!r} in {view}" if meth == "keys"
                         else f"len(list({view}))"])
        out = self.define(sc, "I" if use.startswith("len") else ("B" if " in " in use else "LN"))
        lines.append(f"{out} = {use}")
        return lines

    def s_set(self, sc, depth):
        li = sc.of("LI", "TI", "S")
        options = [lambda: f"{{{self.i_expr(sc, 1)}, {self.small_int()}, {self.small_int()}}}",
                   lambda: f"{{_v % 3 for _v in range({self.rng.randint(0, 5)})}}"]
        if li:
            src = self.pick(li)
            options += [lambda: f"set({src})", lambda: f"set({src}) | {{{self.small_int()}}}",
                        lambda: f"set({src}) & {{1, 2}}", lambda: f"set({src}) - {{0}}"]
        ss = self.mutable(sc, ("S",))
        if ss and self.chance(0.4):
            s = self.pick(ss)
            return [self.pick([f"{s}.add({self.i_expr(sc, 1)})", f"{s} |= {{{self.small_int()}}}",
                               f"{s}.discard({self.small_int()})"])]
        return [f"{self.define(sc, 'S')} = {self.pick(options)()}"]

    def s_tuple(self, sc, depth):
        lt = self.lists_with(sc, ("LT",), 1)
        options = [
            lambda: [f"{self.define(sc, 'TT', minlen=2)} = ({self.t_expr(sc, 1)}, {self.t_leaf(sc)})"],
            lambda: [f"{self.define(sc, 'TI', minlen=2)} = ({self.i_expr(sc, 1)}, {self.i_leaf(sc)})"],
        ]
        tts = [n for n in sc.of("TT") if sc.box(n).minlen == 2]
        if tts:
            options.append(lambda: [f"{self.define(sc, 'T')}, {self.define(sc, 'T')} = {self.pick(tts)}"])
        if lt:
            src = self.pick(lt)
            options.append(lambda: [f"{self.define(sc, 'T')}, *{self.define(sc, 'LT')} = {src}"])
            options.append(lambda: [f"{self.define(sc, 'TT', minlen=sc.box(src).minlen)} = tuple({src})"])
        return self.pick(options)()

    def s_identity(self, sc, depth):
        return [f"{self.define(sc, 'B')} = {self.b_expr(sc, 2)}"]

    # --- globals and arguments --------------------------------------------------------------
    def s_global(self, sc, depth):
        return self.pick([
            lambda: [f"G_LIST.append({self.t_expr(sc, 1)})"],
            lambda: [f"G_LIST.append({self.i_expr(sc, 1)})"],
            lambda: [f"G_COUNT += {self.i_expr(sc, 1)}"],
            lambda: [f"G_D[{self.pick(['k', 'm', 'x'])!r}] = {self.i_expr(sc, 1)}"],
            lambda: [f"{self.define(sc, 'I')} = G_COUNT + len(G_LIST)"],
            lambda: [f"{self.define(sc, 'T')} = G_T * {self.i_expr(sc, 1)}"],
        ])()

    def s_arg_mut(self, sc, depth):
        ts = [n for n in ("x", "y") if n in sc.names]
        if not ts:
            return []
        t = self.pick(ts)
        return [self.pick([f"{t}.add_({self.small_int()})", f"{t}.mul_({self.t_expr(sc, 1)})",
                           f"{t}[0] = {self.t_leaf(sc)}[1]", f"{t}[:, 1] = {self.small_int()}",
                           f"{t}.clamp_(min=0)", f"lst[{self.pick(['0', '-1'])}].add_({self.small_int()})",
                           f"d['a'].mul_({self.small_int()})" if sc.box("d").keys.get("a") == "T" else f"{t}.neg_()"])]

    def s_string(self, sc, depth):
        """Strings built from ints: f-strings, join, split, methods."""
        i = lambda: self.i_expr(sc, 1)  # noqa: E731
        strs = sc.of("STR")
        options = [lambda: f'f"{{{i()}}}-{{{i()}}}"', lambda: f"str({i()}) * 2",
                   lambda: f"','.join(str(_v) for _v in range({self.rng.randint(0, 4)}))",
                   lambda: f"'{self.pick(['ab', 'k', 'xyz'])}'.upper() + str({self.t_leaf(sc)}.ndim)"]
        if strs:
            s = self.pick(strs)
            options += [lambda: f"{s}.replace('-', '+')", lambda: f"'/'.join({s}.split('-'))",
                        lambda: f"{s}[::-1] + {s}[:1]", lambda: f"{s}.strip('0')"]
        return [f"{self.define(sc, 'STR')} = {self.pick(options)()}"]
