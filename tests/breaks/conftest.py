"""How the graph-break cases run (same rules as tests/corpus/conftest.py).

- Until ``kiln.compile`` exists (with its C frame hook) the cases are skipped.
- Cases listed in ``known_failures.txt`` are marked xfail (not strict): graph breaks are being built
  while these cases are written, so the list holds what kiln does not do yet. A listed case that
  passes shows as XPASS (``pytest tests/breaks -rX``); delete its line. A case not listed must pass.
- A line's case may end in ``@py3.11`` / ``@py3.12``: it is listed for that Python version only
  (bytecode differs: 3.12 inlines comprehensions, for one).
- ``KILN_CORPUS_STRICT=1`` ignores the list; ``KILN_CORPUS_ENGINE=dynamo`` runs the cases under
  torch.compile to check their expectations against TorchDynamo (the list is ignored there too).
"""
import os
import sys

import pytest

from tests.corpus.harness import USE_DYNAMO, kiln_ready

_HERE = os.path.dirname(os.path.abspath(__file__))


def _known_failures() -> dict:
    path = os.path.join(_HERE, "known_failures.txt")
    if not os.path.exists(path):
        return {}
    out = {}
    with open(path) as f:
        for line in f:
            case, _, why = line.partition("#")
            case = case.strip()
            case, _, version = case.partition("@py")
            if version and version != f"{sys.version_info[0]}.{sys.version_info[1]}":
                continue
            if case:
                out[case] = why.strip() or "known gap of kiln's graph breaks"
    return out


def pytest_collection_modifyitems(config, items):
    mine = [(item, os.path.basename(str(item.fspath))) for item in items
            if str(item.fspath).startswith(_HERE + os.sep)]
    if not kiln_ready():
        skip = pytest.mark.skip(reason="kiln.compile (with its frame hook) is not there yet")
        for item, _ in mine:
            item.add_marker(skip)
        return
    if USE_DYNAMO or os.environ.get("KILN_CORPUS_STRICT") == "1":
        return
    known = _known_failures()
    for item, filename in mine:
        key = f"{filename}::{item.name}"
        if key in known:
            item.add_marker(pytest.mark.xfail(reason=f"known failure: {known[key]}", strict=False))
