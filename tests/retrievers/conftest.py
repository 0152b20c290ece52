"""Fixtures of the retriever tests."""

import pytest
from stand_ins import HashEncoder


@pytest.fixture
def hash_encoder() -> HashEncoder:
    return HashEncoder(8)
