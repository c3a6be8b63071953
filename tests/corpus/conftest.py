"""How the corpus runs.

- Until ``kiln.compile`` exists (and its C frame hook is built) the cases are skipped.
- Once it does, every case runs. The cases listed in ``known_failures.txt`` (gaps of the capture
  stage at the time they were listed) are marked xfail (not strict), so CI stays green while the
  list is burned down: a listed case that passes shows as XPASS (``pytest tests/corpus -rX``);
  delete its line. A case not listed must pass.
- ``KILN_CORPUS_STRICT=1`` ignores the list (every case must pass).
- ``KILN_CORPUS_ENGINE=dynamo`` runs the cases under torch.compile instead, to check their
  expectations against PyTorch's own capture (the list is ignored there too).
"""
import os

from tests import known_failures

_HERE = os.path.dirname(os.path.abspath(__file__))
_ALWAYS_RUN = frozenset({"test_harness.py"})


def pytest_collection_modifyitems(config, items):
    known_failures.apply(items, _HERE, "known gap of kiln's capture stage", _ALWAYS_RUN)
