"""The path-mode kernel on its own: it returns the graph block's positions and where no path joins a pair."""

import numpy as np

from glmrag.graph.path_positions import path_positions


def starts_of(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)])


def test_a_chain_reads_as_its_text():
    # head of 2 tokens, relation of 1, tail of 1: the sentence "h h r t" at positions 0 1 2 3
    lengths = np.array([2, 1, 1])
    position, apart = path_positions(np.array([[0, 1, 2]]), lengths, starts_of(lengths))
    steps = np.arange(4)
    assert position.dtype == np.int32 and apart.dtype == bool
    np.testing.assert_array_equal(position, steps[None, :] - steps[:, None])  # key minus query
    assert not apart.any()


def test_pairs_no_path_joins_are_apart_and_zero():
    lengths = np.ones(6, dtype=np.int64)  # two separate triples a r b, c s d, one token each
    position, apart = path_positions(np.array([[0, 1, 2], [3, 4, 5]]), lengths, starts_of(lengths))
    block = np.arange(3)
    expected_apart = np.ones((6, 6), dtype=bool)
    expected_apart[:3, :3] = expected_apart[3:, 3:] = False
    np.testing.assert_array_equal(apart, expected_apart)
    np.testing.assert_array_equal(position[:3, :3], block[None, :] - block[:, None])
    assert not position[expected_apart].any()


def test_no_nodes_give_empty_blocks():
    position, apart = path_positions(np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(1))
    assert position.shape == apart.shape == (0, 0)
