"""ACC beside EM/F1 (DTKG §4.1): the contains match and the LLM judge, each labelled as what it is."""

from glmrag.data.types import Question
from glmrag.qa.accuracy import JUDGE_TAG, LLMJudge, add_judged_accuracy, contains_match


def test_contains_match_is_whole_words_after_normalisation():
    assert contains_match("Christopher Nolan, the director", ["christopher nolan"]) == 1.0
    assert contains_match("The Beatles", ["Beatles"]) == 1.0  # articles dropped (SQuAD normalisation)
    assert contains_match("Nolanville", ["Nolan"]) == 0.0  # a word inside another word is no match
    assert contains_match("London", ["Paris", "Londres"]) == 0.0 and contains_match("x", [""]) == 0.0
    assert contains_match("born in 1901 in Boston", ["Mount Etna", "boston"]) == 1.0


def test_llm_judge_reads_yes_no_and_counts_unreadable(scripted_llm):
    def reply(text):
        predicted = text.split("Predicted answer: ")[1].split("\n")[0]
        return {"Nolan": "Yes.", "Spielberg": "no", "???": "maybe"}[predicted]

    llm = scripted_llm(reply)
    judge = LLMJudge(llm)
    assert judge.label == "ACC (LLM judge, scripted)"
    verdicts = judge.judge(["Who?"] * 3, ["Nolan", "Spielberg", "???"], [["Christopher Nolan"]] * 3)
    assert verdicts == [1.0, 0.0, None]
    assert "Gold answer: Christopher Nolan" in llm.prompts[0]
    usage = llm.usage.by_method()[JUDGE_TAG]
    assert usage.calls == 3 and usage.events["label_fallback"] == 1


def test_judged_rows_and_means(scripted_llm):
    llm = scripted_llm(lambda text: "yes" if "Predicted answer: Boston" in text else "no")
    questions = [Question("a", "Where?", ("Boston",), ()), Question("b", "Who?", ("Ann Lee",), ())]
    rows = {"s": [{"question_id": "a", "prediction": "Boston"}, {"question_id": "b", "prediction": "Bob"}]}
    summary = add_judged_accuracy(rows, questions, LLMJudge(llm))
    assert [r["acc_llm_judge"] for r in rows["s"]] == [1.0, 0.0]
    assert summary["s"] == {"label": "ACC (LLM judge, scripted)", "mean": 0.5, "judged": 2, "unreadable": 0}
