import pytest

from glmrag.llm.base import UsageCounter
from glmrag.llm.parse import parse_choice, parse_json

REPAIRED = [
    ('```json\n{"a": 1, "b": [1, 2]}\n```', {"a": 1, "b": [1, 2]}),
    ('Sure! Here are the entities:\n{"named_entities": ["Paris", "France"]}\nHope it helps.', None),
    ('{"triples": [["Paris", "capital of", "France"],],}', {"triples": [["Paris", "capital of", "France"]]}),
    ("{'a': 'x', 'ok': True, 'none': None}", {"a": "x", "ok": True, "none": None}),
    ('Answer: ["x", "y", ]', ["x", "y"]),
    ('{"named_entities": ["Paris", "Fra', {"named_entities": ["Paris", "Fra"]}),  # cut by max_new_tokens
    ('{"a": [1, 2,', {"a": [1, 2]}),
    ('```\n[{"s": "a {b}"}]\n```', [{"s": "a {b}"}]),
]


@pytest.mark.parametrize(("text", "expected"), REPAIRED)
def test_parse_json_repairs_and_counts(text, expected):
    counter = UsageCounter()
    value = parse_json(text, default={}, counter=counter)
    if expected is None:
        expected = {"named_entities": ["Paris", "France"]}
    assert value == expected
    assert counter.total().events == {"json_repaired": 1}


def test_valid_json_is_not_counted():
    counter = UsageCounter()
    assert parse_json(' {"a": [1, 2]} ', {}, counter) == {"a": [1, 2]}
    assert counter.total().events == {}


@pytest.mark.parametrize("text", [None, "", "   ", "no json at all", "{{{{", '{"a": }'])
def test_parse_json_falls_back_to_a_copy_of_the_default(text):
    counter = UsageCounter()
    default = {"named_entities": []}
    value = parse_json(text, default, counter)
    assert value == default and value is not default
    value["named_entities"].append("x")
    assert default == {"named_entities": []}
    assert counter.total().events == {"json_fallback": 1}


def test_parse_json_expect_rejects_the_wrong_type():
    counter = UsageCounter()
    assert parse_json('"just a string"', default=[], counter=counter, expect=list) == []
    assert parse_json("the list: [1, 2]", default=[], counter=counter, expect=list) == [1, 2]
    assert counter.total().events == {"json_fallback": 1, "json_repaired": 1}


def test_parse_json_counts_under_the_current_tag():
    counter = UsageCounter()
    with counter.track("openie", "passage-7"):
        parse_json("oops", None, counter)
    assert counter.get("openie", "passage-7").events == {"json_fallback": 1}
    assert parse_json("oops", None) is None  # no counter: still no exception


def test_parse_choice():
    counter = UsageCounter()
    choices = ["chained", "parallel"]
    assert parse_choice("Parallel.", choices, "chained", counter) == "parallel"
    assert counter.total().events == {}
    assert parse_choice("The question is chained, not parallel.", choices, "parallel", counter) == "chained"
    assert parse_choice("I think it is PARALLEL", choices, "chained", counter) == "parallel"
    assert counter.total().events == {"label_repaired": 2}
    assert parse_choice("unchainedness", choices, "parallel", counter) == "parallel"
    assert parse_choice("", choices, "parallel", counter) == "parallel"
    assert parse_choice(None, choices, "parallel", counter) == "parallel"
    assert counter.total().events == {"label_repaired": 2, "label_fallback": 3}
