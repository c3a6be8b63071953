"""One spawn of 2 gloo processes runs every CPU scenario (all_workers.py); tests read their section."""
import pytest

from tests.distributed.harness import run_ranks


@pytest.fixture(scope="session")
def cpu_ranks():
    from tests.distributed.all_workers import run_all

    return run_ranks(run_all, timeout=300)
