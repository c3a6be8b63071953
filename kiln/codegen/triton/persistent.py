"""Whether a row kernel's inner spaces fit one block (the *persistent* style), for symbolic sizes too.

A persistent kernel holds each row whole in one block of ``RBLOCK`` lanes (no loop): faster for short
rows, and the only style that lets a member read another member's inner block from registers
(``kernel.fusable``). With symbolic inner sizes the choice is made at the size hints and kept sound by
a *shape guard*, recorded in the graph's ShapeEnv while fusing and generating code:

- the largest inner size (by hint) must be at least every other one for every size (``known``: else
  the looped style), so that the launcher's ``RBLOCK`` (the power of two at or above it, chosen per
  size bucket) covers every member's row;
- ``rnumel <= persistent_max`` is decided for every size where the bounds allow (no guard), else taken
  at the hint: a hint that fits records the guard ``rnumel <= persistent_max`` (a call with longer rows
  fails the shape check and recompiles, then in the looped style, which serves every size and needs no
  guard); a hint that does not fit gives the looped style, without a guard.

Why a guard rather than a size dispatch in the launcher: the fusion decisions that need registers
(``needs_persistent`` in ``fusable``) change which kernels exist, so the looped alternative of such a
group is another schedule, not another launch of the same kernel; a guard keeps one schedule per entry.
"""
from __future__ import annotations

import sympy

from kiln.loopir.sizes import any_symbolic, guard, hint, known


def persistent_fits(inners: list, persistent_max: int) -> bool:
    """Whether inner spaces ``inners`` (ints or size expressions) fit one block of ``persistent_max``."""
    rnumel = max(inners, key=hint)
    if not any_symbolic(inners):
        return rnumel <= persistent_max
    if any(known(sympy.Ge(rnumel, other)) is not True for other in inners if other is not rnumel):
        return False  # (another member's row may be the longest at other sizes)
    decided = known(sympy.Le(rnumel, persistent_max))
    if decided is not None:
        return decided
    if hint(rnumel) > persistent_max:
        return False
    return guard(sympy.Le(rnumel, persistent_max))
