import pytest

from .harness import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Every corpus case runs on each backend; a case parametrizing "backend" itself overrides this."""
    return request.param
