"""The marker rule of tests/conftest.py: ``llm`` and ``integration`` tests count as ``slow``."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import importlib.util

spec = importlib.util.spec_from_file_location("glmrag_tests_conftest", {str(ROOT / "tests" / "conftest.py")!r})
conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conftest)
pytest_collection_modifyitems = conftest.pytest_collection_modifyitems
"""

TESTS = """
import pytest

def test_plain(): pass

@pytest.mark.llm
def test_llm(): pass

@pytest.mark.integration
def test_integration(): pass

@pytest.mark.slow
def test_slow(): pass
"""


def selected(folder: Path, expression: str) -> list[str]:
    """Names of the tests that ``-m expression`` selects, under the project's pytest settings.

    Collected in this process (``pytest.main``), as ``pytester`` does: a subprocess would pay the package's
    imports again, about 7 CPU-seconds per call on the shared 2-core machine.
    """

    class Selection:
        names: list[str] = []

        def pytest_collection_finish(self, session):
            self.names = sorted(item.name for item in session.items)

    selection = Selection()
    command = [str(folder), "-m", expression, "--collect-only", "-q"]
    command += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(folder), "-p", "no:cacheprovider"]
    code = pytest.main(command, plugins=[selection])
    assert code in (0, 5), code
    return selection.names


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("markers")
    (path / "conftest.py").write_text(CONFTEST)
    (path / "test_example.py").write_text(TESTS)
    return path


def test_the_default_run_leaves_out_llm_and_integration_tests(folder):
    assert selected(folder, "not slow") == ["test_plain"]


def test_ci_selects_the_integration_tests_by_their_marker(folder):
    assert selected(folder, "integration and not llm") == ["test_integration"]
