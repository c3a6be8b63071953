"""Random small Python programs for differential testing of kiln's capture stage.

    src = generate(seed)      # module source text defining f(x, y, lst, d)

A program is a module: imports, globals (G_COUNT, G_LIST, G_D, G_T), an exception class, 0-3
generated classes (plain classes with a random set of dunder methods and properties, subclasses with
an extra attribute, namedtuples, typing.NamedTuples, dataclasses and their subclasses), helper
functions (tensor/int helpers that may call earlier helpers, generator functions, closure
factories with nonlocal state, helpers that raise), and ``f(x, y, lst, d)`` where x and y are
(2, 3) float tensors, lst a list of at least 3 such tensors and d a dict with keys 'a' (tensor),
'b' (int), 'c' (tensor). The same seed gives the same program.
"""
from __future__ import annotations

import random

from .scope import RETURNABLE, Box, ClassSpec, Scope
from .stmts import IND, indent
from .stmts_flow import FlowStmts

PRELUDE = [
    "import collections",
    "import dataclasses",
    "import functools",
    "import itertools",
    "import typing",
    "import torch",
    "",
    "G_COUNT = 0",
    "G_LIST = []",
    "G_D = {'k': 1}",
    "G_T = torch.ones(2, 3)",
    "",
    "",
    "class FuzzError(ValueError):",
    "    pass",
]

PLAIN_FEATURES = ("method", "eq", "hash", "len", "iter", "getitem", "add", "prop", "classattr", "bump")


class ProgramGenerator(FlowStmts):
    """Generates one program from a seed (see the module docstring)."""

    def __init__(self, seed: int, size: int | None = None):
        self.rng = random.Random(seed)
        self.counter = 0
        self.pending: list = []
        self.helpers: list = []  # (name, param kinds, result kind)
        self.helper_params: dict = {}
        self.gen_helpers: list = []
        self.factories: list = []
        self.raise_helpers: list = []
        self.classes: list = []
        self.size = size if size is not None else self.rng.randint(3, 9)

    def param_names(self, helper: str) -> list:
        return self.helper_params[helper]

    def generate(self) -> str:
        out = list(PRELUDE)
        for _ in range(self.rng.randint(0, 3)):
            out += ["", ""] + self.gen_class()
        for _ in range(self.rng.randint(0, 4)):
            out += ["", ""] + self.gen_helper()
        plain = [c for c in self.classes if c.kind == "plain"]
        self.global_obj = None
        if plain and self.chance(0.5):
            self.global_obj = self.pick(plain)
            extra = ", torch.zeros(2, 3)" if self.global_obj.extra_field else ""
            out += ["", f"G_OBJ = {self.global_obj.name}(torch.ones(2, 3), 2{extra})"]
        out += ["", ""] + self.gen_f()
        return "\n".join(out) + "\n"

    # --- classes ----------------------------------------------------------------------------
    def gen_class(self) -> list[str]:
        kind = self.pick(["plain", "plain", "plain", "nt", "dc"])
        bases = [c for c in self.classes if c.kind == kind and c.base is None and kind != "nt"]
        if bases and self.chance(0.4):
            return self.gen_subclass(self.pick(bases))
        name = self.fresh("C" if kind == "plain" else ("P" if kind == "nt" else "D"))
        if kind == "nt":
            return self.gen_namedtuple(name)
        if kind == "dc":
            spec = ClassSpec(name, "dc", frozenset({"total"}))
            self.classes.append(spec)
            return ["@dataclasses.dataclass", f"class {name}:", f"{IND}u: torch.Tensor", f"{IND}v: int = 1", "",
                    f"{IND}def total(self):", f"{IND * 2}return self.u * self.v"]
        features = frozenset(f for f in PLAIN_FEATURES if self.chance(0.4))
        if "hash" in features and "eq" not in features and self.chance(0.5):
            features = features - {"hash"}
        spec = ClassSpec(name, "plain", features)
        self.classes.append(spec)
        return self.plain_class_lines(spec)

    def plain_class_lines(self, spec: ClassSpec) -> list[str]:
        n, f = spec.name, spec.features
        lines = [f"class {n}:"]
        if "classattr" in f:
            lines += [f"{IND}count = 0", ""]
        lines += [f"{IND}def __init__(self, a, b):", f"{IND * 2}self.a = a", f"{IND * 2}self.b = b"]
        if "classattr" in f:
            lines.append(f"{IND * 2}{n}.count += 1")
        methods = {
            "method": ["def scale(self, t):", f"{IND}return t * self.b + self.a"],
            "eq": ["def __eq__(self, other):", f"{IND}return isinstance(other, {n}) and self.b == other.b"],
            "hash": ["def __hash__(self):", f"{IND}return hash(self.b)"],
            "len": ["def __len__(self):", f"{IND}return abs(self.b) % 4 + 1"],
            "iter": ["def __iter__(self):", f"{IND}return iter([self.a, self.b])"],
            "getitem": ["def __getitem__(self, i):", f"{IND}if i >= 2:", f"{IND * 2}raise IndexError(i)",
                        f"{IND}return self.a * (i + 1)"],
            "add": ["def __add__(self, other):", f"{IND}return {n}(self.a + other.a, self.b + other.b)"],
            "prop": ["@property", "def double(self):", f"{IND}return self.a * 2"],
            "bump": ["def bump(self, k):", f"{IND}self.b += k", f"{IND}self.a = self.a + k", f"{IND}return self"],
        }
        for feat in PLAIN_FEATURES:
            if feat in f and feat in methods:
                lines += [""] + indent(methods[feat])
        return lines

    def gen_subclass(self, base: ClassSpec) -> list[str]:
        name = self.fresh(base.name[0])
        if base.kind == "dc":
            spec = ClassSpec(name, "dc", frozenset({"total"}), base=base, extra_field=True)
            self.classes.append(spec)
            return ["@dataclasses.dataclass", f"class {name}({base.name}):", f"{IND}w: int = 2", "",
                    f"{IND}def total(self):", f"{IND * 2}return super().total() + self.w"]
        feats = frozenset(self.pick([set(), {"len"}, {"method"}, {"prop"}]))
        spec = ClassSpec(name, "plain", feats, base=base, extra_field=True)
        self.classes.append(spec)
        lines = [f"class {name}({base.name}):", f"{IND}def __init__(self, a, b, c):",
                 f"{IND * 2}super().__init__(a, b)", f"{IND * 2}self.c = c"]
        if "method" in feats:
            call = "super().scale(t)" if base.has("method") else "t"
            lines += ["", f"{IND}def scale(self, t):", f"{IND * 2}return {call} - self.c"]
        if "len" in feats:
            lines += ["", f"{IND}def __len__(self):", f"{IND * 2}return 2"]
        if "prop" in feats:
            lines += ["", f"{IND}@property", f"{IND}def double(self):", f"{IND * 2}return self.c + self.a"]
        return lines

    def gen_namedtuple(self, name: str) -> list[str]:
        style = self.pick(["collections", "typing", "subclass"])
        if style == "collections":
            self.classes.append(ClassSpec(name, "nt"))
            return [f"{name} = collections.namedtuple({name!r}, ['u', 'v'])"]
        if style == "typing":
            self.classes.append(ClassSpec(name, "nt", frozenset({"total"})))
            return [f"class {name}(typing.NamedTuple):", f"{IND}u: torch.Tensor", f"{IND}v: int = 0", "",
                    f"{IND}def total(self):", f"{IND * 2}return self.u * self.v"]
        self.classes.append(ClassSpec(name, "nt", frozenset({"total"})))
        return [f"class {name}(collections.namedtuple('{name}Base', ['u', 'v'])):",
                f"{IND}def total(self):", f"{IND * 2}return self.u + self.v"]

    # --- helpers ----------------------------------------------------------------------------
    def gen_helper(self) -> list[str]:
        kind = self.pick(["tensor", "tensor", "tensor", "int", "list", "build", "gen", "factory", "raise"])
        return getattr(self, f"helper_{kind}")()

    def function(self, name: str, params: dict, result: str, n: int) -> list[str]:
        sc = Scope({p: Box(k, minlen=0) for p, k in params.items()})
        sc.names.update({})
        body = self.block(sc, n, depth=1)
        ret = {"T": self.t_expr, "I": self.i_expr}[result](sc)
        return [f"def {name}({', '.join(params)}):", f"{IND}global G_COUNT"] + indent(body) + [f"{IND}return {ret}"]

    def helper_tensor(self):
        name = self.fresh("h")
        params = self.pick([{"t": "T", "k": "I"}, {"t": "T"}, {"t": "T", "u": "T"}])
        lines = self.function(name, params, "T", self.rng.randint(0, 3))
        self.helpers.append((name, tuple(params.values()), "T"))
        self.helper_params[name] = list(params)
        return lines

    def helper_int(self):
        name = self.fresh("h")
        lines = self.function(name, {"t": "T"}, "I", self.rng.randint(0, 2))
        self.helpers.append((name, ("T",), "I"))
        self.helper_params[name] = ["t"]
        return lines

    def helper_list(self):
        name = self.fresh("h")
        lines = self.function(name, {"seq": "LT", "t": "T"}, "T", self.rng.randint(1, 3))
        self.helpers.append((name, ("LT", "T"), "T"))
        self.helper_params[name] = ["seq", "t"]
        return lines

    def helper_build(self):
        """A helper that builds and returns a list of tensors (never empty)."""
        name = self.fresh("hb")
        sc = Scope({"t": Box("T"), "k": Box("I")})
        out = self.fresh("out")
        sc.names[out] = Box("LT", minlen=1)
        body = self.block(sc, self.rng.randint(0, 3), depth=1)
        lines = [f"def {name}(t, k):", f"{IND}global G_COUNT", f"{IND}{out} = [t * k]"] + indent(body)
        lines.append(f"{IND}return {out}")
        self.helpers.append((name, ("T", "I"), "LT"))
        self.helper_params[name] = ["t", "k"]
        return lines

    def helper_gen(self):
        name = self.fresh("g")
        self.gen_helpers.append(name)
        body = self.pick([
            [f"for _i, _e in enumerate(seq):", f"{IND}G_LIST.append(_i)", f"{IND}yield _e * (_i + 1)"],
            [f"yield from (_e + 1 for _e in seq)", "yield torch.ones(2, 3)"],
            [f"for _e in reversed(seq):", f"{IND}if len(G_LIST) > 100:", f"{IND * 2}return",
             f"{IND}yield _e.relu()"],
            # reads that must happen when the item is taken: the global, the list's length then
            [f"for _i in range(len(seq)):", f"{IND}yield seq[_i] * (G_COUNT + len(seq))"],
            # a generator driven with send/throw/close (its items are still tensors)
            [f"_acc = None", f"for _e in seq:", f"{IND}try:", f"{IND * 2}_got = yield _e",
             f"{IND}except FuzzError:", f"{IND * 2}G_LIST.append(-1)", f"{IND * 2}_got = _e * 2",
             f"{IND}finally:", f"{IND * 2}G_LIST.append(len(seq))",
             f"{IND}if _got is not None:", f"{IND * 2}_acc = _got if _acc is None else _acc + _got",
             f"return _acc"],
        ])
        return [f"def {name}(seq):", f"{IND}global G_COUNT"] + indent(body)

    def helper_factory(self):
        name = self.fresh("make")
        self.factories.append(name)
        return [f"def {name}(k):", f"{IND}calls = 0", "", f"{IND}def apply(t):", f"{IND * 2}nonlocal calls",
                f"{IND * 2}calls += 1", f"{IND * 2}return t * k + calls", "", f"{IND}return apply"]

    def helper_raise(self):
        name = self.fresh("check")
        self.raise_helpers.append(name)
        cond = self.pick(["k % 2 == 0", "k < 10", "k > 1"])
        return [f"def {name}(k):", f"{IND}if {cond}:", f"{IND * 2}raise FuzzError('bad', k)", f"{IND}return k"]

    # --- f ----------------------------------------------------------------------------------
    def gen_f(self) -> list[str]:
        sc = Scope({"x": Box("T"), "y": Box("T"), "lst": Box("LT", minlen=3),
                    "d": Box("D", keys={"a": "T", "b": "I", "c": "T"})})
        if self.global_obj is not None:
            sc.names["G_OBJ"] = Box("O", cls=self.global_obj)
        body = self.block(sc, self.size, depth=self.rng.randint(1, 3))
        if self.chance(0.05):
            body += [f"if {self.b_expr(sc, 1)}:", f"{IND}raise FuzzError('end', {self.i_expr(sc, 1)})"]
        body.append(f"return {self.return_expr(sc)}")
        return ["def f(x, y, lst, d):", f"{IND}global G_COUNT"] + indent(body)

    def return_expr(self, sc: Scope) -> str:
        names = [n for n, b in sc.names.items() if b.kind in RETURNABLE]
        recent = names[-6:]
        chosen = list(dict.fromkeys(self.pick(recent if self.chance(0.7) else names)
                                    for _ in range(self.rng.randint(1, 4))))
        style = self.rng.random()
        if len(chosen) == 1 and style < 0.3:
            return chosen[0]
        if style < 0.15:
            return "[" + ", ".join(chosen) + "]"
        if style < 0.3:
            return "{" + ", ".join(f"{n!r}: {n}" for n in chosen) + "}"
        return "(" + ", ".join(chosen) + ",)"


def generate(seed: int, size: int | None = None) -> str:
    """The source text of program number ``seed``."""
    return ProgramGenerator(seed, size).generate()
