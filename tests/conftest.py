"""Test session setup: compiled kernels go to a temporary cache shared by the whole session."""
import os
import tempfile

os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-test-cache-"))
