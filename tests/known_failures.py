"""The known-failures list of a case directory (tests/corpus, tests/breaks): one place that reads it.

Each directory keeps a ``known_failures.txt``: one ``<file>::<test name>[@py3.11|@py3.12]  # why`` a
line. Listed cases are marked xfail (not strict), so CI stays green while the list is burned down; a
listed case that passes shows as XPASS (``-rX``): delete its line. A ``@py3.X`` tag limits a line to
that Python version. Until ``kiln.compile`` (with its frame hook) exists, the cases are skipped;
``KILN_CORPUS_STRICT=1`` ignores the list, and so does ``KILN_CORPUS_ENGINE=dynamo``.
"""
from __future__ import annotations

import os
import sys

import pytest

from tests.corpus.harness import USE_DYNAMO, kiln_ready


def read(directory: str, default_reason: str) -> dict[str, str]:
    path = os.path.join(directory, "known_failures.txt")
    if not os.path.exists(path):
        return {}
    out = {}
    with open(path) as f:
        for line in f:
            case, _, why = line.partition("#")
            case, _, version = case.strip().partition("@py")
            if version and version != f"{sys.version_info[0]}.{sys.version_info[1]}":
                continue
            if case:
                out[case] = why.strip() or default_reason
    return out


def apply(items, directory: str, default_reason: str, always_run: frozenset = frozenset()) -> None:
    """Skip or mark the collected items that live in `directory` (see the module docstring)."""
    mine = [(item, os.path.basename(str(item.fspath))) for item in items
            if str(item.fspath).startswith(directory + os.sep)
            and os.path.basename(str(item.fspath)) not in always_run]
    if not kiln_ready():
        skip = pytest.mark.skip(reason="kiln.compile (with its frame hook) is not there yet")
        for item, _ in mine:
            item.add_marker(skip)
        return
    if USE_DYNAMO or os.environ.get("KILN_CORPUS_STRICT") == "1":
        return
    known = read(directory, default_reason)
    for item, filename in mine:
        reason = known.get(f"{filename}::{item.name}")
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"known failure: {reason}", strict=False))
