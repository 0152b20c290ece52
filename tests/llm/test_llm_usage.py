import threading

import pytest

from glmrag.llm.base import LLM, Generation, UsageCounter, check_prompts, truncate_at_stop


class EchoLLM(LLM):
    """Answers each prompt with its last word; one prompt token per word, one generated token."""

    name = "echo"

    def _generate(self, prompts, max_new_tokens, temperature, stop):
        texts = [p if isinstance(p, str) else p[-1]["content"] for p in prompts]
        return [Generation(t.split()[-1], len(t.split()), 1, seconds=0.5) for t in texts]


def test_usage_is_counted_per_method_and_question():
    llm = EchoLLM()
    llm.generate(["outside any method"])
    with llm.track("dtkg"):
        with llm.track(question_id="q1"):
            llm.generate(["a b c", [{"role": "user", "content": "d e"}]])
        with llm.track(question_id="q2"):
            llm.generate(["f"])
            llm.usage.count("json_fallback")
    with llm.track("hyperaddress", "q1"):
        llm.generate(["g h i j"])

    assert llm.usage.get("untagged").calls == 1
    dtkg = llm.usage.by_question("dtkg")
    assert set(dtkg) == {"q1", "q2"}
    assert (dtkg["q1"].calls, dtkg["q1"].prompt_tokens, dtkg["q1"].generated_tokens) == (2, 5, 2)
    assert dtkg["q1"].seconds == pytest.approx(1.0)
    assert dtkg["q2"].events == {"json_fallback": 1}
    by_method = llm.usage.by_method()
    assert by_method["dtkg"].calls == 3 and by_method["hyperaddress"].prompt_tokens == 4
    total = llm.usage.total()
    assert (total.calls, total.prompt_tokens, total.cache_hits) == (5, 13, 0)
    assert {(r["method"], r["question_id"]) for r in llm.usage.rows()} == {
        ("untagged", None),
        ("dtkg", "q1"),
        ("dtkg", "q2"),
        ("hyperaddress", "q1"),
    }
    # The tag is gone once the block ends.
    assert UsageCounter.current_tag() == ("untagged", None)
    llm.usage.reset()
    assert llm.usage.total().calls == 0


def test_a_counter_can_be_shared_and_threads_tag_themselves():
    shared = UsageCounter()
    a, b = EchoLLM(shared), EchoLLM(shared)

    def work(llm, qid):
        with llm.track("m", qid):
            for _ in range(20):
                llm.generate(["x y"])

    threads = [threading.Thread(target=work, args=(llm, f"q{i}")) for i, llm in enumerate([a, b, a, b])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {q: u.calls for q, u in shared.by_question("m").items()} == {f"q{i}": 20 for i in range(4)}


def test_bad_prompts_are_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"wrap one prompt"):
        check_prompts("just a string")
    with pytest.raises(TypeError, match=r"wrap one prompt"):
        check_prompts([{"role": "user", "content": "a chat not in a list"}])
    with pytest.raises(TypeError, match=r"prompt 1, message 0"):
        check_prompts(["ok", [{"role": "user"}]])
    with pytest.raises(ValueError, match="max_new_tokens"):
        EchoLLM().generate(["a"], max_new_tokens=0)
    assert EchoLLM().generate([]) == []


def test_stop_strings_cut_at_the_earliest():
    assert truncate_at_stop("Answer: Paris\nThought: done", ["Thought:", "\n"]) == ("Answer: Paris", True)
    assert truncate_at_stop("no stop here", ["###"]) == ("no stop here", False)
    assert truncate_at_stop("abc", [""]) == ("abc", False)


def test_usage_since_is_what_was_counted_in_between():
    llm = EchoLLM()
    with llm.track("m", "q"):
        llm.generate(["a b"])
        llm.usage.count("json_fallback")
        before = llm.usage.get("m", "q")
        llm.generate(["c d e", "f"])
        llm.usage.count("json_repaired", 2)
    delta = llm.usage.get("m", "q").since(before)
    assert (delta.calls, delta.prompt_tokens, delta.generated_tokens) == (2, 4, 2)
    assert delta.seconds == pytest.approx(1.0) and delta.events == {"json_repaired": 2}
    assert llm.usage.get("m", "q").since(None).calls == 3
