"""Progress of long stages: one summary line with count and rate in a log, nothing when quiet."""

import logging

from glmrag.progress import progress, quiet_third_party, set_quiet, stage_line


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


def test_third_party_info_is_lowered():
    logging.getLogger("httpx").setLevel(logging.INFO)
    quiet_third_party()
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
