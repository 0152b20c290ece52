"""Fixtures shared by all test folders."""

import pytest

from glmrag.index.synthetic import build_kg, random_kg


@pytest.fixture
def kg():
    """The factory :func:`glmrag.index.synthetic.build_kg`."""
    return build_kg


@pytest.fixture
def random_graph():
    """The factory :func:`glmrag.index.synthetic.random_kg`."""
    return random_kg
