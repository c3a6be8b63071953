"""Errors for people: what failed, where (the user's file:line), why, and what to do."""
from __future__ import annotations


class KilnError(Exception):
    """Base class of every error kiln raises on purpose."""


class Unsupported(KilnError):
    """The capture stage met a construct it cannot put in a graph.

    Without fullgraph this becomes a graph break (or an eager fallback for the frame);
    with fullgraph=True it reaches the user as ``GraphBreakError``.
    """

    def __init__(self, reason: str, *, hint: str = "", filename: str = "", lineno: int = 0, whole_frame: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.whole_frame = whole_frame  # no graph break can model it: the frame runs as Python
        self.filename = filename
        self.lineno = lineno

    def locate(self, filename: str, lineno: int) -> "Unsupported":
        if not self.filename:
            self.filename, self.lineno = filename, lineno
        return self

    def where(self) -> str:
        return f"{self.filename}:{self.lineno}" if self.filename else "<unknown location>"


class GraphBreakError(KilnError):
    """Raised under ``fullgraph=True`` when the program cannot be captured as one graph."""

    def __init__(self, reason: str, filename: str, lineno: int, hint: str = ""):
        self.reason, self.filename, self.lineno, self.hint = reason, filename, lineno, hint
        lines = [
            f"kiln could not capture the whole program as one graph (fullgraph=True).",
            f"  where: {filename}:{lineno}",
            f"  why:   {reason}",
        ]
        if hint:
            lines.append(f"  what to do: {hint}")
        else:
            lines.append("  what to do: rewrite that line, or drop fullgraph=True to let kiln run it eagerly.")
        super().__init__("\n".join(lines))


class BackendError(KilnError):
    """A backend failed to compile a captured graph."""


class InternalError(KilnError):
    """A bug in kiln. Carries the stage where it happened."""


class KernelBuildError(BackendError):
    """The system compiler rejected a generated kernel (a kiln bug, or a broken toolchain)."""

    def __init__(self, what: str, command: str, stderr: str, source_path: str):
        self.command, self.stderr, self.source_path = command, stderr, source_path
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        super().__init__(
            f"kiln could not build {what}.\n"
            f"  command: {command}\n"
            f"  source:  {source_path}\n"
            f"  compiler said:\n{tail}\n"
            f"  what to do: check that a C++17 compiler with OpenMP is installed (g++ -fopenmp); if it is, "
            f"this is a kiln bug: please report it with the source file above. "
            f"kiln.compile(..., backend='aot_eager') runs the program without generated kernels meanwhile."
        )


class IndexOutOfBoundsError(IndexError, RuntimeError):
    """A generated kernel met an index outside the dimension it indexes. Eager PyTorch raises IndexError for
    some indexing ops (``x[i]``, ``index_select``) and RuntimeError for others (``gather``, ``scatter``,
    ``index_add``, and an empty dimension): this is both, so the user's ``except`` catches it either way."""
