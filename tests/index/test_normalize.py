import pytest

from glmrag.index.normalize import alnum_count, normalize_phrase


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Pál Gábor", "pál gábor"),
        ("São Paulo", "são paulo"),
        ("Sa\u0303o Paulo", "são paulo"),  # decomposed tilde composes instead of splitting the word
        ("C++", "c"),
        ("  Thomas   Sudhof!  ", "thomas sudhof"),
        ("rock_and_roll", "rock and roll"),
        ("Straße", "strasse"),
        ("１９６０", "1960"),
        ("Lothair II, King", "lothair ii king"),
        ("—", ""),
    ],
)
def test_normalize_phrase(raw, expected):
    assert normalize_phrase(raw) == expected


def test_normalize_is_idempotent():
    for raw in ["Pál Gábor", "São Paulo", "C++", "A-B  c"]:
        once = normalize_phrase(raw)
        assert normalize_phrase(once) == once


def test_alnum_count():
    assert alnum_count("c") == 1
    assert alnum_count("são paulo") == 8
    assert alnum_count("a b") == 2
