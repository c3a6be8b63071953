"""Statements of the fuzzer's grammar, part two: control flow, iterators, comprehensions, closures,
objects, records (namedtuples/dataclasses), exceptions and ``match``."""
from __future__ import annotations

from .scope import ELEM, LISTS, Box, Scope
from .stmts import IND, Stmts, indent


class FlowStmts(Stmts):
    # --- control flow -----------------------------------------------------------------------
    def s_if(self, sc, depth):
        lines = [f"if {self.b_expr(sc, 2)}:"] + self.sub_block(sc, depth)
        if self.chance(0.3):
            lines += [f"elif {self.b_expr(sc, 1)}:"] + self.sub_block(sc, depth)
        if self.chance(0.5):
            lines += ["else:"] + self.sub_block(sc, depth)
        return lines

    def s_for(self, sc, depth):
        child = sc.child()
        child.in_loop = True
        seqs = sc.of(*LISTS, "TT", "TI", "S")
        choice = self.rng.random()
        locked = []
        if seqs and choice < 0.5:
            seq = self.pick(seqs)
            box = sc.box(seq)
            var = self.fresh("e")
            elem = ELEM.get(box.kind, "I")
            child.names[var] = Box(elem)
            wrap = self.pick(["{}", "{}", "enumerate({})", "reversed({})" if box.kind != "S" else "sorted({})",
                              "zip({}, range(3))"])
            if wrap.startswith("enumerate"):
                idx = self.fresh("i")
                child.names[idx] = Box("I")
                head = f"for {idx}, {var} in enumerate({seq}{self.pick(['', ', 1'])}):"
            elif wrap.startswith("zip"):
                idx = self.fresh("i")
                child.names[idx] = Box("I")
                head = f"for {var}, {idx} in zip({seq}, range({self.rng.randint(1, 3)})):"
            else:
                head = f"for {var} in {wrap.format(seq)}:"
            locked = [box]
        elif choice < 0.8:
            var = self.fresh("i")
            child.names[var] = Box("I")
            head = f"for {var} in range({self.pick(['3', '1, 4', '2', '0'])}):"
        else:
            lt = sc.of("LT")
            if not lt:
                return []
            var = self.fresh("e")
            child.names[var] = Box("T")
            src = self.pick(lt)
            locked = [sc.box(src)]
            head = f"for {var} in {self.pick(['filter(lambda _t: _t.sum() > 0, {})', 'map(torch.relu, {})', 'iter({})', 'list({})[:2]']).format(src)}:"
        for b in locked:
            b.locked += 1
        body = indent(self.block(child, self.rng.randint(1, 3), depth - 1))
        for b in locked:
            b.locked -= 1
        lines = [head] + body
        if self.chance(0.15):
            lines += ["else:"] + self.sub_block(sc, depth, 1)
        return lines

    def s_while(self, sc, depth):
        k = self.fresh("w")
        child = sc.child()
        child.in_loop = True
        body = indent([f"{k} += 1"] + self.block(child, self.rng.randint(1, 2), depth - 1))
        return [f"{k} = 0", f"while {k} < {self.rng.randint(1, 3)}:"] + body

    def s_break(self, sc, depth):
        return [f"if {self.b_expr(sc, 1)}:", f"{IND}{self.pick(['break', 'continue'])}"]

    def s_nograd(self, sc, depth):
        return ["with torch.no_grad():"] + self.sub_block(sc, depth)

    # --- iterators --------------------------------------------------------------------------
    def s_iter(self, sc, depth):
        lt = self.mutable(sc, ("LT", "LN"))
        li = sc.of("LI", "TI", "S")
        log = self.fresh("log")
        options = []
        if lt:
            src = self.pick(lt)
            box = sc.box(src)
            first = self.fresh()
            rest = self.fresh()
            fn = self.fresh("m")
            elem = ELEM[box.kind]
            # a lazily consumed map whose function has a side effect; the source grows meanwhile
            options.append(lambda: self._record(sc, [
                f"{log} = []",
                f"def {fn}(_e):",
                f"{IND}{log}.append(len({log}))",
                f"{IND}return _e * {self.small_int()}",
                f"_it = map({fn}, {src})",
                f"{first} = next(_it, None)",
                f"{src}.append({self.t_leaf(sc) if elem == 'T' else self.n_expr(sc)})",
                f"{rest} = list(_it)",
            ], {log: "LI", rest: "LN"}, grow=(box, 1)))
            options.append(lambda: self._record(sc, [
                f"_it = iter({src})",
                f"{first} = next(_it, {self.t_leaf(sc)})",
                f"{rest} = [{first}] + list(_it)",
            ], {first: "N" if elem == "N" else "T", rest: box.kind}))
            options.append(lambda: self._record(sc, [
                f"{rest} = [_a * _i for _i, _a in enumerate({src})]",
            ], {rest: box.kind}))
        if li:
            isrc = self.pick(li)
            out = self.fresh()
            options += [
                lambda: self._record(sc, [f"{out} = list(filter(lambda _v: _v % 2 == 1, {isrc}))"], {out: "LI"}),
                lambda: self._record(sc, [f"{out} = list(map(lambda _a, _b: _a * _b, {isrc}, {isrc}))"], {out: "LI"}),
                lambda: self._record(sc, [f"{out} = [_a + _b for _a, _b in zip({isrc}, reversed(list({isrc})))]"],
                                     {out: "LI"}),
                lambda: self._record(sc, [f"{out} = {self.pick(['max', 'min'])}({isrc}, default={self.small_int()})"],
                                     {out: "I"}),
            ]
        if self.gen_helpers:
            g = self.pick(self.gen_helpers)
            seq = self.pick(sc.of("LT")) if sc.of("LT") else f"[{self.t_leaf(sc)}]"
            out = self.fresh()
            options.append(lambda: self._record(sc, [
                self.pick([f"{out} = list({g}({seq}))", f"{out} = [_e + 1 for _e in {g}({seq})]",
                           f"{out} = list(zip({g}({seq}), range(2)))[0:0] or list({g}({seq}))"])], {out: "LT"}))
            out2 = self.fresh()
            options.append(lambda: self._record(sc, [
                f"_gen = {g}({seq})", f"{out2} = next(_gen, {self.t_leaf(sc)})",
                f"{out} = sum(_gen, {self.t_leaf(sc)})"], {out2: "T", out: "T"}))
            names = self.mutable(sc, ("LT",))  # not a list a loop around this statement iterates
            if names:  # the consumer changes what the generator reads between its items
                grown = self.pick(names)
                options.append(lambda: self._record(sc, [
                    f"_gen = {g}({grown})", f"{out2} = next(_gen, {self.t_leaf(sc)})",
                    f"{grown}.append({self.t_leaf(sc)})", "G_COUNT += 1",
                    f"{out} = sum(_gen, {self.t_leaf(sc)})"], {out2: "T", out: "T"}, grow=(sc.box(grown), 1)))
            options.append(lambda: self._record(sc, [
                f"_gen = {g}({seq})", f"{out} = next(_gen, {self.t_leaf(sc)})", "try:",
                f"{IND}{out} = {out} + _gen.send({self.t_leaf(sc)})",
                f"{IND}{out} = {out} + _gen.throw(FuzzError('in', 1))",
                f"{IND}{out} = {out} + _gen.send(None)",
                "except (StopIteration, FuzzError):", f"{IND}G_LIST.append(0)", "_gen.close()"], {out: "T"}))
        if not options:
            return []
        return self.pick(options)()

    def _record(self, sc: Scope, lines, defs: dict, grow=None):
        for name, kind in defs.items():
            sc.names[name] = Box(kind)
        if grow is not None and sc.top:
            grow[0].minlen += grow[1]
        return lines

    def s_itertools(self, sc, depth):
        li = sc.of("LI", "TI", "S")
        lt = sc.of("LT")
        src = self.pick(li) if li else f"range({self.rng.randint(0, 4)})"
        out = self.fresh()
        options = [
            (f"list(itertools.accumulate({src}))", "LI"),
            (f"list(itertools.islice(itertools.count({self.small_int()}), {self.rng.randint(0, 3)}))", "LI"),
            (f"[_a * _b for _a, _b in itertools.product({src}, range(2))]", "LI"),
            (f"list(itertools.chain({src}, [{self.small_int()}]))", "LI"),
            (f"[_a - _b for _a, _b in itertools.pairwise(sorted({src}))]", "LI"),
            (f"list(itertools.takewhile(lambda _v: _v < 3, {src}))", "LI"),
            (f"list(itertools.dropwhile(lambda _v: _v < 2, {src}))", "LI"),
            (f"[_k + len(list(_g)) for _k, _g in itertools.groupby(sorted({src}))]", "LI"),
            (f"list(itertools.starmap(lambda _a, _b: _a + _b, zip({src}, {src})))", "LI"),
            (f"[_a + _b for _a, _b in itertools.zip_longest({src}, range(2), fillvalue=7)]", "LI"),
            (f"list(itertools.compress(range(5), {src}))", "LI"),
            (f"list(itertools.islice(itertools.cycle([1, 2]), {self.rng.randint(0, 5)}))", "LI"),
        ]
        if lt:
            t = self.pick(lt)
            options += [
                (f"list(itertools.chain({t}, [{self.t_leaf(sc)}]))", "LT"),
                (f"list(itertools.islice({t}, {self.rng.randint(0, 2)}, None))", "LT"),
                (f"[_a + _b for _a, _b in itertools.combinations({t}, 2)]", "LT"),
                (f"list(itertools.repeat({self.t_leaf(sc)}, {self.rng.randint(0, 2)}))", "LT"),
                (f"list(itertools.accumulate({t}))", "LT"),
            ]
        expr, kind = self.pick(options)
        sc.names[out] = Box(kind)
        return [f"{out} = {expr}"]

    def s_comp(self, sc, depth):
        lt, li = sc.of("LT"), sc.of("LI", "TI", "S")
        out = self.fresh()
        options = [(f"[{self.i_expr(sc, 1)} + _j for _j in range({self.rng.randint(0, 3)})]", "LI")]
        if lt:
            s = self.pick(lt)
            options += [
                (f"[_e * {self.i_leaf(sc)} for _e in {s}]", "LT"),
                (f"[_e + {self.t_leaf(sc)} for _e in {s} if {self.b_expr(sc, 0)}]", "LT"),
                (f"{{str(_i): _e for _i, _e in enumerate({s})}}", "D"),
                (f"sum((_e * 2 for _e in {s}), {self.t_leaf(sc)})", "T"),
                (f"tuple(_e.sum(0) + _e for _e in {s})", "TT"),
                (f"[[_a + _b for _b in {s}] for _a in {s}][0:1]", "LN"),
            ]
        if li:
            s = self.pick(li)
            options += [
                (f"{{_v: _v * _v for _v in {s}}}", "D"),
                (f"{{_v % 2 for _v in {s}}}", "S"),
                (f"[[_a * _b for _b in {s}] for _a in range(2)][-1]", "LI"),
                (f"[_a for _a in {s} for _b in range(_a % 3) if _b != 1]", "LI"),
                (f"any(_v > {self.small_int()} for _v in {s})", "B"),
                (f"[_x for _x in (_v + 1 for _v in {s}) if _x % 2]", "LI"),
            ]
        expr, kind = self.pick(options)
        sc.names[out] = Box(kind)
        return [f"{out} = {expr}"]

    # --- closures and functools -------------------------------------------------------------
    def s_closure(self, sc, depth):
        fn, state = self.fresh("inner"), self.fresh("st")
        t = self.t_expr(sc, 1)
        lines = [f"{state} = {self.small_int()}", f"def {fn}(_t):", f"{IND}nonlocal {state}",
                 f"{IND}{state} += 1", f"{IND}return _t * {state} + {self.t_leaf(sc)}"]
        out = self.fresh()
        calls = [f"{fn}({t})" for _ in range(self.rng.randint(1, 2))]
        lines.append(f"{out} = {' + '.join(calls)}")
        sc.names[out] = Box("T")
        sc.names[state] = Box("I")
        if self.chance(0.5):
            sc.names[fn] = Box("FN")
        return lines

    def s_partial(self, sc, depth):
        """A callable T -> T: functools.partial of a helper, a closure factory's product, a lambda."""
        helpers = [h for h in self.helpers if h[1] and h[1][0] == "T" and h[2] == "T" and "LT" not in h[1]]
        out = self.fresh("fn")
        if helpers and self.chance(0.6):
            name, params, _ = self.pick(helpers)
            rest = [self.i_expr(sc, 0) if p == "I" else self.t_leaf(sc) for p in params[1:]]
            if rest and self.chance(0.5):
                expr = f"functools.partial({name}, {', '.join(rest)})" if len(params) == 1 else \
                    f"lambda _t: functools.partial({name}, _t)({', '.join(rest)})"
            elif rest:
                kw = [f"{p}={v}" for p, v in zip(self.param_names(name)[1:], rest)]
                expr = f"functools.partial({name}, {', '.join(kw)})"
            else:
                expr = name
        elif self.factories and self.chance(0.5):
            expr = f"{self.pick(self.factories)}({self.small_int()})"
        else:
            expr = self.pick([f"lambda _t: _t * {self.i_leaf(sc)}", "torch.relu",
                              f"functools.partial(torch.add, other={self.small_int()})",
                              f"functools.partial(torch.mul, {self.t_leaf(sc)})"])
        sc.names[out] = Box("FN")
        return [f"{out} = {expr}"]

    # --- objects and records ----------------------------------------------------------------
    def s_object(self, sc, depth):
        if not self.classes:
            return []
        spec = self.pick(self.classes)
        kind = {"plain": "O", "nt": "NT", "dc": "DC"}[spec.kind]
        expr = self.ctor(sc, spec, 1)
        name = self.fresh("o")
        sc.names[name] = Box(kind, cls=spec)
        return [f"{name} = {expr}"]

    def s_object_use(self, sc, depth):
        objs = sc.of("O")
        if not objs:
            return []
        o = self.pick(objs)
        spec = sc.box(o).cls
        others = [p for p in objs if sc.box(p).cls.root() is spec.root()]
        options = [
            lambda: [f"{o}.b = {self.i_expr(sc, 1)}"],
            lambda: [f"{o}.a = {self.t_expr(sc, 1)}"],
            lambda: [f"{o}.extra = {self.t_expr(sc, 1)}"],
            lambda: [f"{self.define(sc, 'I')} = getattr({o}, 'b', 0) + len(vars({o}))"],
            lambda: [f"{self.define(sc, 'B')} = {o} in [{self.pick(others)}, None]"],
        ]
        if spec.has("len"):
            options.append(lambda: [f"{self.define(sc, 'I')} = len({o}) + bool({o})"])
        if spec.has("iter"):
            options.append(lambda: [f"{self.define(sc, 'LN')} = list({o})"])
            options.append(lambda: [f"{self.define(sc, 'T')} = sum({o}, {self.t_leaf(sc)})"])
        if spec.has("getitem") and not spec.has("iter"):
            options.append(lambda: [f"{self.define(sc, 'LT')} = [_e for _e in {o}]"])
        if spec.has("add"):
            options.append(lambda: [f"{self.define(sc, 'O', cls=spec.root())} = {o} + {self.pick(others)}"])
        if spec.has("eq") and spec.has("hash"):
            options.append(lambda: [f"{self.define(sc, 'I')} = len({{{o}, {self.pick(others)}, {self.ctor(sc, spec, 0)}}})"])
            options.append(lambda: [f"{self.define(sc, 'D')} = {{{o}: 1}}", ])
        if spec.has("eq"):
            options.append(lambda: [f"{self.define(sc, 'B')} = {o} == {self.ctor(sc, spec, 0)}"])
        if spec.has("bump"):
            options.append(lambda: [f"{self.define(sc, 'O', cls=spec)} = {o}.bump({self.i_expr(sc, 1)})"])
            options.append(lambda: [f"{self.define(sc, 'I')} = {o}.bump(1).bump(2).b"])
        if spec.has("classattr"):
            options.append(lambda: [f"{self.define(sc, 'I')} = {spec.root().name}.count + {o}.count"])
        return self.pick(options)()

    def s_record(self, sc, depth):
        recs = sc.of("NT", "DC")
        if not recs:
            return self.s_object(sc, depth) if any(c.kind != "plain" for c in self.classes) else []
        r = self.pick(recs)
        spec = sc.box(r).cls
        if spec.kind == "nt":
            options = [
                lambda: [f"{self.define(sc, 'T')}, {self.define(sc, 'I')} = {r}"],
                lambda: [f"{self.define(sc, 'NT', cls=spec)} = {r}._replace(v={self.i_expr(sc, 1)})"],
                lambda: [f"{self.define(sc, 'I')} = {r}[1] + len({r}) + {r}.v"],
                lambda: [f"{self.define(sc, 'D')} = dict({r}._asdict())"],
                lambda: [f"{self.define(sc, 'TT', minlen=2)} = tuple({r})[:1] + ({self.t_leaf(sc)},)"],
                lambda: [f"{self.define(sc, 'B')} = isinstance({r}, tuple) and type({r}) is {spec.name}"],
            ]
        else:
            options = [
                lambda: [f"{r}.v = {self.i_expr(sc, 1)}"],
                lambda: [f"{self.define(sc, 'DC', cls=spec)} = dataclasses.replace({r}, v={self.i_expr(sc, 1)})"],
                lambda: [f"{self.define(sc, 'I')} = len(dataclasses.fields({r})) + {r}.v"],
                lambda: [f"{self.define(sc, 'B')} = dataclasses.is_dataclass({r})"],
                lambda: [f"{r}.extra = {self.t_expr(sc, 1)}"],
            ]
        return self.pick(options)()

    # --- exceptions -------------------------------------------------------------------------
    def s_try(self, sc, depth):
        exc = self.pick(["ValueError", "KeyError", "IndexError", "FuzzError", "ZeroDivisionError", "TypeError"])
        raisers = {
            "ValueError": f"raise ValueError({self.small_int()})",
            "KeyError": f"{self.t_leaf(sc)}.sum() + {{}}['missing']",
            "IndexError": "[][0]",
            "FuzzError": f"raise FuzzError('boom', {self.small_int()})",
            "ZeroDivisionError": f"{self.small_int()} // 0",
            "TypeError": "len(5)",
        }
        if self.raise_helpers and self.chance(0.4):
            raise_line, exc = f"{self.pick(self.raise_helpers)}({self.i_expr(sc, 0)})", "FuzzError"
        else:
            raise_line = raisers[exc]
        child = sc.child()
        body = self.block(child, self.rng.randint(0, 2), depth - 1)
        if self.chance(0.7):
            body += [f"if {self.b_expr(child, 1)}:" if self.chance(0.5) else "if True:", IND + raise_line]
        body = indent(body + self.block(child, self.rng.randint(0, 1), depth - 1) if body else ["pass"])
        catch = self.pick([exc, "Exception", f"({exc}, RuntimeError)", "LookupError" if exc in ("KeyError", "IndexError") else exc])
        var = self.fresh("err")
        lines = ["try:"] + body + [f"except {catch} as {var}:"]
        handler = [f"{IND}G_LIST.append(type({var}).__name__)"]
        if self.chance(0.5):
            handler.append(f"{IND}G_LIST.append(len({var}.args))")
        handler += self.sub_block(sc, depth, 1)
        lines += handler
        if self.chance(0.3):
            lines += ["else:"] + self.sub_block(sc, depth, 1)
        if self.chance(0.4):
            lines += ["finally:", f"{IND}G_COUNT += 1"]
        return lines

    # --- match ------------------------------------------------------------------------------
    def s_match(self, sc, depth):
        out = self.fresh()
        lt, ds, objs = sc.of("LT", "LN"), sc.of("D"), sc.of("O", "NT", "DC")
        options = [lambda: self._match_int(sc, out)]
        if lt:
            options.append(lambda: self._match_seq(sc, self.pick(lt), out))
        if ds:
            options.append(lambda: self._match_map(sc, self.pick(ds), out))
        if objs:
            options.append(lambda: self._match_cls(sc, self.pick(objs), out))
        lines = self.pick(options)()
        sc.names[out] = Box("N")
        return lines

    def _match_int(self, sc, out):
        return [f"match {self.i_expr(sc, 1)}:",
                f"{IND}case 0 | 1:", f"{IND * 2}{out} = 10",
                f"{IND}case int(_n) if _n > 3:", f"{IND * 2}{out} = _n",
                f"{IND}case _:", f"{IND * 2}{out} = -1"]

    def _match_seq(self, sc, seq, out):
        return [f"match {seq}:",
                f"{IND}case []:", f"{IND * 2}{out} = 0",
                f"{IND}case [_a]:", f"{IND * 2}{out} = _a",
                f"{IND}case [_a, _b, *_rest]:", f"{IND * 2}{out} = _a * len(_rest) + _b",
                f"{IND}case _:", f"{IND * 2}{out} = 1"]

    def _match_map(self, sc, d, out):
        return [f"match {d}:",
                f"{IND}case {{'a': _va, 'b': int(_vb)}}:", f"{IND * 2}{out} = _va * _vb",
                f"{IND}case {{'k': _vk, **_rest}}:", f"{IND * 2}{out} = _vk + len(_rest)",
                f"{IND}case {{'a': _va}}:", f"{IND * 2}{out} = _va",
                f"{IND}case _:", f"{IND * 2}{out} = 2"]

    def _match_cls(self, sc, o, out):
        spec = sc.box(o).cls
        lines = [f"match {o}:"]
        if spec.kind == "plain":
            lines += [f"{IND}case {spec.name}(b=0):", f"{IND * 2}{out} = 0",
                      f"{IND}case {spec.name}(a=_pa, b=_pb) if _pb > 1:", f"{IND * 2}{out} = _pa * _pb"]
        else:
            lines += [f"{IND}case {spec.name}(_pu, 0):", f"{IND * 2}{out} = _pu",
                      f"{IND}case {spec.name}(u=_pu, v=_pv):", f"{IND * 2}{out} = _pu + _pv"]
        lines += [f"{IND}case (1, 2):", f"{IND * 2}{out} = 12", f"{IND}case _:", f"{IND * 2}{out} = 3"]
        return lines
