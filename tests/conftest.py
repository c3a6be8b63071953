"""Test session setup: compiled kernels go to a temporary cache shared by the whole session, and
generated code is never swapped for eager by timing (Options.choose_faster: the tests of generated code
must test generated code; tests/backends/test_choose_faster.py turns it on where it is tested)."""
import os
import tempfile

os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))
os.environ.setdefault("KILN_CHOOSE_FASTER", "0")
# Tests compile the same graphs again after kiln.reset() and look at what was generated: the warm
# whole-graph cache (docs/caching.md) stays off unless a test turns it on (tests/backends/test_warm_cache.py).
os.environ.setdefault("KILN_WARM_CACHE", "0")
