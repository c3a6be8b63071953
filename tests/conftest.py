"""Test session setup: compiled kernels go to a temporary cache shared by the whole session."""
import os
import tempfile

os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))
# Tests compile the same graphs again after kiln.reset() and look at what was generated: the warm
# whole-graph cache (docs/caching.md) stays off unless a test turns it on (tests/backends/test_warm_cache.py).
os.environ.setdefault("KILN_WARM_CACHE", "0")
