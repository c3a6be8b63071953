"""Expressions of the fuzzer's grammar, by kind (see scope.py for the kinds).

Every ``*_expr`` method returns Python source text of an expression that, evaluated in the scope it
was generated for, has that kind. Depth bounds nesting; at depth 0 a name or a literal is picked.
"""
from __future__ import annotations

import random

from .scope import LISTS, Scope


class Exprs:
    rng: random.Random
    helpers: list  # (name, signature kind string, result kind)
    classes: list  # ClassSpec

    # --- helpers ----------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def lists_with(self, sc: Scope, kinds, minlen: int = 0) -> list[str]:
        return [n for n in sc.of(*kinds) if sc.box(n).minlen >= minlen]

    def small_int(self) -> str:
        return str(self.rng.randint(0, 4))

    # --- tensors ----------------------------------------------------------------------------
    def t_leaf(self, sc: Scope) -> str:
        options = [lambda: self.pick(sc.of("T"))] * 4
        lt = self.lists_with(sc, ("LT",), 1)
        if lt:
            options.append(lambda: f"{self.pick(lt)}[{self.pick(['0', '-1'])}]")
        tt = self.lists_with(sc, ("TT",), 1)
        if tt:
            options.append(lambda: f"{self.pick(tt)}[0]")
        dt = [(n, k) for n in sc.of("D") for k, kind in sc.box(n).keys.items() if kind == "T"]
        if dt:
            options.append(lambda: "%s[%r]" % self.pick(dt))
        objs = [n for n in sc.of("O") if True]
        if objs:
            options.append(lambda: f"{self.pick(objs)}.a")
        nts = sc.of("NT", "DC")
        if nts:
            options.append(lambda: f"{self.pick(nts)}.u")
        return self.pick(options)()

    def t_expr(self, sc: Scope, d: int = 2) -> str:
        if d <= 0 or self.chance(0.25):
            return self.t_leaf(sc)
        a = lambda: self.t_expr(sc, d - 1)  # noqa: E731
        r = self.rng.random
        options = [
            lambda: f"({a()} {self.pick('+-*')} {a()})",
            lambda: f"{a()}.{self.pick(['relu()', 'abs()', 'neg()', 'exp()', 'sigmoid()', 'clone()', 'cos()'])}",
            lambda: f"torch.{self.pick(['sin', 'tanh', 'relu', 'abs'])}({a()})",
            lambda: f"({a()} * {self.i_expr(sc, d - 1)})",
            lambda: f"({a()} + {a()}.{self.pick(['sum(0)', 'mean()', 'amax(1, keepdim=True)', 'sum(-1, keepdim=True)'])})",
            lambda: f"torch.where({a()} > 0, {a()}, {a()})",
            lambda: f"{a()}.T.T",
            lambda: f"({a()} @ {a()}.T @ {a()})",
            lambda: f"torch.cat([{a()}, {a()}])[{self.pick(['2:', ':2', '1:3'])}]",
            lambda: f"torch.stack([{a()}, {a()}]).sum(0)",
            lambda: f"{a()}.reshape(-1).reshape(2, 3)",
            lambda: f"{a()}.view(3, 2).view(2, 3)",
            lambda: f"torch.zeros_like({a()})" if r() < 0.5 else f"{a()}.new_ones({a()}.shape)",
            lambda: f"{a()}.masked_fill({a()} > 0, {self.small_int()})",
            lambda: f"({a()} + {self.n_expr(sc, d - 1)})",
            lambda: f"{a()}.to({a()}.dtype)",
            lambda: f"{a()}.sum(0).expand(2, 3)",
            lambda: f"({a()} * {a()}.size(1) + {a()}.ndim)",
        ]
        lt = sc.of("LT")
        if lt:
            options.append(lambda: f"sum({self.pick(lt)}, {a()})")
            options.append(lambda: f"functools.reduce(lambda p, q: p + q, {self.pick(lt)}, {a()})")
        fns = sc.of("FN")
        if fns:
            options += [lambda: f"{self.pick(fns)}({a()})"] * 2
        helpers = [h for h in self.helpers if h[2] == "T"]
        if helpers:
            options += [lambda: self.call_helper(sc, self.pick(helpers), d)] * 3
        objs = sc.of("O")
        for o in objs:
            spec = sc.box(o).cls
            if spec.has("method"):
                options.append(lambda o=o: f"{o}.scale({a()})")
            if spec.has("prop"):
                options.append(lambda o=o: f"{o}.double")
            if spec.has("getitem"):
                options.append(lambda o=o: f"{o}[{self.pick(['0', '1'])}]")
        list_helpers = [h for h in self.helpers if h[2] == "LT"]
        if list_helpers:
            options.append(lambda: f"{self.call_helper(sc, self.pick(list_helpers), d)}[0]")
        for n in sc.of("NT", "DC"):
            if sc.box(n).cls.has("total"):
                options.append(lambda n=n: f"{n}.total()")
        return self.pick(options)()

    def call_helper(self, sc: Scope, helper, d: int) -> str:
        name, params, _ = helper
        args = []
        for p in params:
            if p == "T":
                args.append(self.t_expr(sc, d - 1))
            elif p == "I":
                args.append(self.i_expr(sc, d - 1))
            elif p == "LT":
                args.append(self.pick(sc.of("LT")) if sc.of("LT") and self.chance(0.7) else f"[{self.t_leaf(sc)}]")
        style = self.rng.random()
        if style < 0.1 and args:
            return f"{name}(*[{', '.join(args)}])"
        if style < 0.2 and args:
            kw = ", ".join(f"{p!r}: {a}" for p, a in zip(self.helper_params[name], args))
            return f"{name}(**{{{kw}}})"
        if style < 0.3 and len(args) > 1:
            return f"{name}({args[0]}, {self.helper_params[name][1]}={args[1]}{''.join(', ' + a for a in args[2:])})" \
                if len(args) == 2 else f"{name}({', '.join(args)})"
        return f"{name}({', '.join(args)})"

    # --- ints -------------------------------------------------------------------------------
    def i_leaf(self, sc: Scope) -> str:
        t = lambda: self.t_leaf(sc)  # noqa: E731
        options = [
            self.small_int,
            lambda: f"{t()}.shape[{self.pick(['0', '1', '-1'])}]",
            lambda: f"{t()}.size({self.pick(['0', '1'])})",
            lambda: f"torch.Tensor.size({t()}, 1)",
            lambda: f"{t()}.ndim",
            lambda: f"{t()}.dim()",
            lambda: f"{t()}.numel()",
            lambda: f"len({t()})",
            lambda: f"len({t()}.size())",
            lambda: f"{t()}.T.shape[0]",
            lambda: f"sum({t()}.shape)",
            lambda: f"{t()}.shape.numel()",
            lambda: f"{t()}.size()[{self.pick(['0', '-1'])}]",
            lambda: f"len(torch.Tensor.size({t()}))",
        ]
        ints = sc.of("I")
        if ints:
            options += [lambda: self.pick(ints)] * 4
        sized = sc.of(*LISTS, "TT", "TI", "D", "S", "V", "STR")
        if sized:
            options += [lambda: f"len({self.pick(sized)})"] * 2
        li = self.lists_with(sc, ("LI", "TI"), 1)
        if li:
            options.append(lambda: f"{self.pick(li)}[{self.pick(['0', '-1'])}]")
        di = [(n, k) for n in sc.of("D") for k, kind in sc.box(n).keys.items() if kind == "I"]
        if di:
            options.append(lambda: "%s[%r]" % self.pick(di))
        objs = sc.of("O")
        if objs:
            options.append(lambda: f"{self.pick(objs)}.b")
            lens = [o for o in objs if sc.box(o).cls.has("len")]
            if lens:
                options.append(lambda: f"len({self.pick(lens)})")
        nts = sc.of("NT", "DC")
        if nts:
            options.append(lambda: f"{self.pick(nts)}.v")
        return self.pick(options)()

    def i_expr(self, sc: Scope, d: int = 2) -> str:
        if d <= 0 or self.chance(0.4):
            return self.i_leaf(sc)
        a = lambda: self.i_expr(sc, d - 1)  # noqa: E731
        options = [
            lambda: f"({a()} {self.pick(['+', '-', '*'])} {a()})",
            lambda: f"({a()} // max(1, {a()}))",
            lambda: f"({a()} % {self.rng.randint(1, 4)})",
            lambda: f"{self.pick(['min', 'max'])}({a()}, {a()})",
            lambda: f"abs({a()})",
            lambda: f"({a()} if {self.b_expr(sc, d - 1)} else {a()})",
            lambda: f"int({self.b_expr(sc, d - 1)})",
        ]
        li = sc.of("LI", "TI", "S")
        if li:
            options.append(lambda: f"sum({self.pick(li)})")
            options.append(lambda: f"sum(1 for _v in {self.pick(li)} if _v > {self.small_int()})")
            options.append(lambda: f"len([_v for _v in {self.pick(li)} if _v % 2 == 0])")
        lt = sc.of("LT")
        if lt:
            options.append(lambda: f"sum(1 for _t in {self.pick(lt)})")
            options.append(lambda: f"len({self.pick(lt)}[1:])")
        helpers = [h for h in self.helpers if h[2] == "I"]
        if helpers:
            options += [lambda: self.call_helper(sc, self.pick(helpers), d)] * 2
        return self.pick(options)()

    # --- numlike, bools, strings -------------------------------------------------------------
    def n_expr(self, sc: Scope, d: int = 1) -> str:
        ns = sc.of("N")
        ln = self.lists_with(sc, ("LN",), 1)
        options = [lambda: self.i_expr(sc, d)]
        if ns:
            options += [lambda: self.pick(ns)] * 3
            options.append(lambda: f"({self.pick(ns)} * {self.small_int()})")
        if ln:
            options.append(lambda: f"{self.pick(ln)}[0]")
        dn = [(n, k) for n in sc.of("D") for k in sc.box(n).keys]
        if dn:
            options.append(lambda: "%s[%r]" % self.pick(dn))
        return self.pick(options)()

    def b_expr(self, sc: Scope, d: int = 1) -> str:
        i = lambda: self.i_expr(sc, d - 1)  # noqa: E731
        options = [
            lambda: f"{i()} {self.pick(['<', '<=', '==', '!=', '>'])} {i()}",
            lambda: f"{self.t_leaf(sc)}.dtype == torch.{self.pick(['float32', 'int64'])}",
            lambda: f"isinstance({self.any_name(sc)}, {self.pick(['torch.Tensor', 'int', 'list', 'tuple', 'dict'])})",
            lambda: f"type({self.any_name(sc)}) is {self.pick(['list', 'tuple', 'dict', 'int'])}",
            lambda: f"{self.t_leaf(sc)}.is_contiguous()",
            lambda: f"{self.t_leaf(sc)}.shape == ({i()}, 3)",
            lambda: f"{self.t_leaf(sc)}.size() == torch.Size([2, {i()}])",
            lambda: f"tuple({self.t_leaf(sc)}.shape) == (2, {i()})",
            lambda: f"list(torch.Tensor.size({self.t_leaf(sc)})) == [2, 3]",
            lambda: f"{self.t_leaf(sc)}.T.shape[::-1] == {self.t_leaf(sc)}.shape",
        ]
        if self.chance(0.08):  # data-dependent: a graph break in the middle of f, resumed after
            options = [lambda: f"{self.t_expr(sc, 1)}.sum() > 0", lambda: f"bool({self.t_leaf(sc)}.max() > 1)",
                       lambda: f"{self.t_leaf(sc)}.mean().item() < 0"]
        if d > 0:
            options.append(lambda: f"({self.b_expr(sc, d - 1)} {self.pick(['and', 'or'])} {self.b_expr(sc, d - 1)})")
            options.append(lambda: f"not {self.b_expr(sc, d - 1)}")
        ds = sc.of("D")
        if ds:
            options.append(lambda: f"{self.pick(['a', 'b', 'z', 'q'])!r} in {self.pick(ds)}")
        ss = sc.of("S", "LI", "TI")
        if ss:
            options.append(lambda: f"{self.small_int()} in {self.pick(ss)}")
            options.append(lambda: f"{self.pick(['any', 'all'])}(_v > {self.small_int()} for _v in {self.pick(ss)})")
        seqs = sc.of(*LISTS, "D", "S")
        if seqs:
            options.append(lambda: f"bool({self.pick(seqs)})")
        bs = sc.of("B")
        if bs:
            options += [lambda: self.pick(bs)] * 2
        plain = [c for c in self.classes if c.kind == "plain"]
        if plain:
            c = self.pick(plain)
            ctor = self.ctor(sc, c, 0)
            options.append(lambda: self.pick([f"{ctor} == None", f"{ctor} is None", f"{ctor} != None",
                                              f"{ctor} is {ctor}", f"{ctor} == {ctor}" if not c.has("eq") else "False"]))
        objs = sc.of("O")
        if objs:
            options.append(lambda: f"{self.pick(objs)} is {self.pick(objs)}")
            options.append(lambda: f"{self.pick(objs)} == {self.pick(objs + ['None'])}")
            options.append(lambda: f"hasattr({self.pick(objs)}, {self.pick(['a', 'c', 'extra'])!r})")
            options.append(lambda: f"isinstance({self.pick(objs)}, {self.pick([c.name for c in self.classes])})")
        return self.pick(options)()

    def any_name(self, sc: Scope) -> str:
        return self.pick([n for n, b in sc.names.items() if b.kind != "FN"])

    def ctor(self, sc: Scope, spec, d: int = 1) -> str:
        """A constructor call of the generated class ``spec``."""
        t, i = self.t_expr(sc, d), self.i_expr(sc, d)
        if spec.kind == "plain":
            extra = f", {self.t_expr(sc, d)}" if spec.extra_field else ""
            return f"{spec.name}({t}, {i}{extra})"
        if spec.kind == "dc" and spec.extra_field and self.chance(0.5):
            return f"{spec.name}({t}, {i}, w={self.i_expr(sc, d)})"
        if self.chance(0.3):
            return f"{spec.name}(u={t}, v={i})"
        return f"{spec.name}({t}, {i})"
