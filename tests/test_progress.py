"""Progress of long stages: one summary line with count and rate in a log, nothing when quiet."""

import logging

from glmrag.progress import progress, quiet_third_party, running_line, set_quiet, stage_line


def test_a_stage_logs_one_line_with_count_and_rate_when_not_on_a_terminal(caplog, monkeypatch):
    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        assert list(progress(iter(range(5)), "spaCy extraction", total=5, unit="passage")) == [0, 1, 2, 3, 4]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("spaCy extraction: 5 passages in ") and line.endswith(" passage/s)")
    assert stage_line("LLM OpenIE", 1, "batch", 2.0) == "LLM OpenIE: 1 batch in 2.0 s (0.5 batch/s)"
    assert stage_line("synonym search", 3, "entity", 1.0) == "synonym search: 3 entities in 1.0 s (3.0 entity/s)"


def test_quiet_silences_the_stage_lines(caplog, monkeypatch):
    monkeypatch.setenv("GLMRAG_QUIET", "1")
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        list(progress(range(3), "subgraph shards"))
    monkeypatch.delenv("GLMRAG_QUIET")
    set_quiet()
    try:
        with caplog.at_level(logging.INFO, logger="glmrag.progress"):
            list(progress(range(3), "subgraph shards"))
    finally:
        set_quiet(False)
    assert not caplog.records


def test_third_party_info_is_lowered(monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)  # quiet_third_party sets it off a terminal
    logging.getLogger("httpx").setLevel(logging.INFO)
    quiet_third_party()
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)


def test_a_running_stage_logs_count_rate_and_time_left_every_few_seconds(caplog, monkeypatch):
    """Issue 25 item 8: the 19,102-phrase embedding printed one line after 6.5 minutes; now a line comes every
    LOG_EVERY_S seconds from a timer, also while one piece of work is still running."""
    import time

    from glmrag import progress as progress_module
    from glmrag.progress import stage_progress

    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    monkeypatch.setattr(progress_module, "LOG_EVERY_S", 0.05)
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        with stage_progress("embedding", 10, unit="phrase") as advance:
            time.sleep(0.2)  # no piece done yet
            advance(4)
            time.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("embedding: running for 0 s of 10 phrases") for line in lines), lines
    assert any(line.startswith("embedding: 4/10 phrases (40%) in 0 s, ") and " left" in line for line in lines), lines
    assert lines[-1].startswith("embedding: 4 phrases in ")  # the summary comes last: the timer has stopped


def test_running_line_reads_count_percentage_rate_and_time_left():
    assert running_line("embedding", 4096, 19102, "phrase", 85.0) == (
        "embedding: 4096/19102 phrases (21%) in 85 s, 48.2 phrase/s, ~5 min 11 s left"  # 15006 / 48.19 = 311 s
    )
    assert running_line("synonym search", 0, None, "entity", 31.0) == "synonym search: running for 31 s"
    assert running_line("shards", 3, None, "shard", 120.0) == "shards: 3 shards in 2 min 00 s, 0.0 shard/s"
    assert running_line("shards", 3, None, "shard", 5000.0) == "shards: 3 shards in 83 min, 0.0 shard/s"


def test_no_timer_lines_on_a_terminal(caplog, monkeypatch):
    import time

    from glmrag import progress as progress_module
    from glmrag.progress import stage_progress

    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    monkeypatch.setattr(progress_module, "LOG_EVERY_S", 0.02)
    monkeypatch.setattr(progress_module.sys.stderr, "isatty", lambda: True)
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        with stage_progress("embedding", 2, unit="phrase") as advance:
            time.sleep(0.1)
            advance(2)
    assert [r.getMessage()[:22] for r in caplog.records] == ["embedding: 2 phrases i"]  # the bar shows progress


def test_embedding_names_its_stage_and_warns_nothing(caplog, monkeypatch, recwarn):
    """Issue 25 item 9: no FutureWarning (get_sentence_embedding_dimension) from glmrag's own code; the dense
    retriever's passages are reported as such, not as 'phrases'."""
    from glmrag.data.types import Corpus, Passage
    from glmrag.index.embed import Embedder
    from glmrag.retrievers.dense import DenseRetriever

    monkeypatch.delenv("GLMRAG_QUIET", raising=False)
    assert Embedder().dim == 384
    dense = DenseRetriever()
    with caplog.at_level(logging.INFO, logger="glmrag.progress"):
        dense.passage_matrix(Corpus([Passage.make("Lyon", "A city."), Passage.make("Paris", "A capital.")]))
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("dense retriever: passage embedding: 2 passages in ") for line in lines), lines
    ours = [w for w in recwarn if "glmrag" in w.filename]
    assert not ours, [str(w.message) for w in ours]


def test_off_a_terminal_the_hugging_face_bars_are_off(monkeypatch):
    """The 'Loading weights' bar of transformers wrote control characters into every job's log."""
    import sys

    import transformers

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)  # restored after the test
    transformers.utils.logging.enable_progress_bar()
    try:
        quiet_third_party()
        assert not transformers.utils.logging.is_progress_bar_enabled()
    finally:
        transformers.utils.logging.enable_progress_bar()
