"""Random programs of views and in-place writes on inputs of every layout (contiguous, transposed, a slice
with gaps, a slice with an offset, permuted): what functionalization must get exactly right. Each program
runs eagerly and compiled on equal inputs; the outputs (values and strides), the inputs after the call
and the exceptions raised must agree.

    python -m tests.fuzz.views --seed 0 --n 500 --backend aot_eager   # a longer run (kiln: C++ kernels)

It found a view of an offset input written in the graph read one row off, and zeros_like of a sliced
diagonal laid out unlike eager's (session 12); tests/fuzz/test_fuzz_views.py runs a slice of it."""
from __future__ import annotations

import argparse
import random

import torch

VIEWS = ["{t}.t()", "{t}.transpose(0, 1)", "{t}[1:]", "{t}[:, :2]", "{t}[0]", "{t}.select(1, 0)", "{t}.narrow(0, 0, 2)",
         "{t}.unsqueeze(0)", "{t}.squeeze()", "{t}.diagonal()", "{t}[::2]", "{t}.view(-1)", "{t}.reshape(-1)",
         "{t}.flatten()", "{t}.unbind(0)[0]", "{t}.split(1, 0)[0]", "{t}.movedim(0, -1)", "{t}.T", "{t}.mT",
         "{t}.expand(2, *{t}.shape)", "{t}.as_strided((2,), (1,))"]
WRITES = ["{t}.add_(1)", "{t}.mul_(2)", "{t}.copy_(torch.ones_like({t}) * 3)", "{t}.fill_(5)", "{t}.zero_()",
          "{t}.clamp_(-0.5, 0.5)", "{t}.sub_({t} * 0.5)", "{t}.neg_()", "{t}.exp_()", "{t}[...] = 7",
          "{t}.cumsum_(0)", "{t}.t_()", "{t}.unsqueeze_(0)", "{t}.squeeze_()", "{t}.abs_()", "{t}.addcmul_({t}, {t})"]
OTHERS = ["{t} + 1", "{t} * 2", "{t}.sum(0)", "{t}.clone()", "{t}.contiguous()", "torch.zeros_like({t})", "{t}.relu()"]


def make_input(rng: random.Random) -> str:
    """Source of an input tensor expression of a random layout."""
    shape = [rng.randint(2, 5) for _ in range(rng.choice([2, 2, 3]))]
    dims = ", ".join(map(str, shape))
    kind = rng.choice(["contiguous", "transposed", "gaps", "offset", "permuted"])
    if kind == "contiguous":
        return f"torch.randn({dims})"
    if kind == "transposed":
        return f"torch.randn({', '.join(map(str, shape[::-1]))}).transpose(0, -1)"
    if kind == "gaps":
        return f"torch.randn({', '.join(map(str, shape[:-1] + [shape[-1] * 2]))})[..., ::2]"
    if kind == "offset":
        return f"torch.randn({', '.join(map(str, [shape[0] + 1] + shape[1:]))})[1:]"
    order = ", ".join(str(i) for i in reversed(range(len(shape))))
    return f"torch.randn({', '.join(map(str, shape[::-1]))}).permute({order})"


def make_program(rng: random.Random, n_inputs: int) -> str:
    names = [f"x{i}" for i in range(n_inputs)]
    pool, lines = list(names), []
    for k in range(rng.randint(2, 7)):
        t, r = rng.choice(pool), rng.random()
        if 0.4 <= r < 0.75:
            lines.append("    " + rng.choice(WRITES).format(t=t))
            continue
        lines.append(f"    v{k} = " + rng.choice(VIEWS if r < 0.4 else OTHERS).format(t=t))
        pool.append(f"v{k}")
    lines.append("    return (" + ", ".join(rng.sample(pool, min(len(pool), 3))) + ",)")
    return f"def f({', '.join(names)}):\n" + "\n".join(lines) + "\n"


def case(seed: int) -> tuple[str, list[str]]:
    rng = random.Random(seed)
    inputs = [make_input(rng) for _ in range(rng.choice([1, 1, 2]))]
    return make_program(rng, len(inputs)), inputs


def mismatch(seed: int, backend: str) -> str | None:
    """None when the compiled program agrees with eager, else what differs (with the program)."""
    import kiln

    source, inputs = case(seed)
    namespace = {"torch": torch}
    exec(source, namespace)
    fn = namespace["f"]

    def fresh():
        torch.manual_seed(seed)
        return [eval(s, {"torch": torch}) for s in inputs]

    def run(f, args):
        try:
            return f(*args), None
        except Exception as exc:  # noqa: BLE001 -- compared below
            return None, exc

    want_in, got_in = fresh(), fresh()
    want, want_error = run(fn, want_in)
    kiln.reset()
    got, got_error = run(kiln.compile(fn, backend=backend), got_in)
    what = None
    if (want_error is None) != (got_error is None) or type(want_error) is not type(got_error):
        what = f"exceptions: eager {want_error!r}, compiled {got_error!r}"
    elif want_error is None:
        for i, (g, w) in enumerate(zip(got, want)):
            if g.shape != w.shape or not torch.allclose(g, w, equal_nan=True, atol=1e-5, rtol=1e-4):
                what = f"output {i}: values"
            elif g.stride() != w.stride() and g.numel() > 1:
                what = f"output {i}: strides {g.stride()}, eager {w.stride()}"
        for i, (g, w) in enumerate(zip(got_in, want_in)):
            if g.shape != w.shape or g.stride() != w.stride() or not torch.allclose(g, w, equal_nan=True,
                                                                                     atol=1e-5, rtol=1e-4):
                what = f"input {i} after the call"
    return None if what is None else f"seed {seed}: {what}\ninputs: {inputs}\n{source}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--backend", default="aot_eager")
    args = p.parse_args()
    bad = [m for m in (mismatch(s, args.backend) for s in range(args.seed, args.seed + args.n)) if m]
    for m in bad:
        print("===", m)
    print(f"{len(bad)} of {args.n} programs differ from eager")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
