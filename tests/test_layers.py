"""The package graph flows one way: no module imports a higher floor, no imports go round in a circle.

The floors, lowest first, are written once in :data:`LAYERS` (the house of ``/work/shared/STYLE.md`` and
the README's layout table): a module may import its own floor and any floor below it. Hydra and OmegaConf
belong to the entry floor only; lower floors take typed settings objects. Every import counts, including
imports inside functions and under ``if TYPE_CHECKING:``: both are dependencies a reader must follow.

Violations that exist today are listed in :data:`KNOWN_VIOLATIONS` (issue 13's refactor removes them):
the first test fails on any violation not in that list, the second on a listed one that no longer occurs,
so the list can only shrink.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "glmrag"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("io", "progress"),  # shared file helpers (atomic writes, the cache root) and progress lines, used by every floor
    ("data",),
    ("llm",),
    ("index",),
    ("graph",),
    ("nn",),
    ("datamodules",),  # the data side of training: DataModules, records, batches, samplers
    ("models",),  # the LightningModules and their callbacks
    ("retrievers",),
    ("qa", "eval"),
    ("jobs", "api"),  # the entry floor: the jobs train.py and eval.py call, and the Python API over them
)
"""Floors, lowest first, by the first name below ``glmrag`` (a subpackage or a top-level module)."""

ENTRY_ONLY_LIBRARIES = ("hydra", "omegaconf")
"""Third-party packages that only the entry floor (the last of :data:`LAYERS`) may import."""

KNOWN_VIOLATIONS: frozenset[str] = frozenset()
"""Violations tolerated: none since issue 13 (the jobs floor, ranking below models); never add one."""


@dataclass(frozen=True)
class Module:
    name: str
    """Dotted name, e.g. ``glmrag.index.cache``."""
    path: Path
    is_package: bool
    """An ``__init__.py``: its relative imports resolve against itself, not its parent."""


def package_modules(root: Path = PACKAGE_DIR) -> dict[str, Module]:
    """Every module of the package under ``root``, by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, is_package)
    return modules


def imported_names(module: Module) -> set[str]:
    """Absolute dotted names of everything ``module`` imports, at any depth of its syntax tree.

    ``from a.b import c`` yields ``a.b.c``: the caller keeps it if it is a module, else falls back to ``a.b``
    (so ``from glmrag.eval import metrics`` depends on ``glmrag.eval.metrics``, not on ``glmrag/eval/__init__``).
    """
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    here = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module
            names.update(base if alias.name == "*" else f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict[str, Module]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(internal, external)``: for each module, the package modules it imports and the top-level names
    of the other packages it imports."""
    internal: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    top = next(iter(modules)).split(".")[0]
    for name, module in modules.items():
        internal[name], external[name] = set(), set()
        for imported in imported_names(module):
            if imported.split(".")[0] != top:
                external[name].add(imported.split(".")[0])
                continue
            while imported not in modules:  # an attribute of a module: the module is the dependency
                imported = imported.rsplit(".", 1)[0]
            if imported != name:
                internal[name].add(imported)
    return internal, external


def floor_name(module: str) -> str | None:
    """The first name below the package (``glmrag.index.cache`` -> ``index``); None for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def floor_of(module: str) -> int:
    name = floor_name(module)
    if name is None:  # glmrag/__init__.py: the whole package's face, above every floor
        return len(LAYERS)
    for level, floor in enumerate(LAYERS):
        if name in floor:
            return level
    raise AssertionError(f"glmrag.{name} (from {module}) is on no floor: add it to LAYERS in {__file__}")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node, each sorted, as a list (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe_cycle(kind: str, members: list[str]) -> str:
    """One line per circle: the members of one strongly connected component, which all reach each other."""
    return f"{kind} cycle among " + ", ".join(short(m) for m in members)


def short(module: str) -> str:
    """The name below the package, as violations are written (``glmrag.index.cache`` -> ``index.cache``)."""
    return module.split(".", 1)[1] if "." in module else module


def violations(modules: dict[str, Module]) -> list[str]:
    """Every upward import, entry-only library below the entry floor, and module or package cycle."""
    internal, external = import_graph(modules)
    entry = len(LAYERS) - 1
    found = []
    for name in sorted(internal):
        for imported in sorted(internal[name]):
            if floor_of(imported) > floor_of(name):
                found.append(f"upward: {short(name)} imports {short(imported)}")
        if floor_of(name) < entry:
            for library in sorted(external[name] & set(ENTRY_ONLY_LIBRARIES)):
                found.append(f"entry-only library: {short(name)} imports {library}")
    found += [describe_cycle("module", c) for c in cycles(internal)]
    packages: dict[str, set[str]] = {}
    for name, imports in internal.items():
        if floor_name(name) is None:
            continue
        packages.setdefault(floor_name(name), set()).update(
            floor_name(i) for i in imports if floor_name(i) not in (None, floor_name(name))
        )
    found += [describe_cycle("package", c) for c in cycles(packages)]
    return found


@pytest.fixture(scope="module")
def found() -> list[str]:
    return violations(package_modules())


def test_no_new_upward_import_or_cycle(found):
    new = [v for v in found if v not in KNOWN_VIOLATIONS]
    assert not new, (
        f"{len(new)} import(s) break the one-way package graph ({' -> '.join('/'.join(f) for f in LAYERS)}):\n  "
        + "\n  ".join(new)
        + "\nImport only from your own floor or one below; move shared code down instead of importing up."
    )


def test_known_violations_still_occur(found):
    stale = sorted(KNOWN_VIOLATIONS - set(found))
    assert not stale, (
        "these KNOWN_VIOLATIONS no longer occur; delete them from tests/test_layers.py so they cannot return:\n  "
        + "\n  ".join(stale)
    )


# --- the checker itself, on small packages written for each rule ------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for relative, text in files.items():
        path = root / "glmrag" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package_modules(root / "glmrag")


def test_checker_reports_an_upward_import_a_cycle_and_hydra_below_the_entry_floor(tmp_path):
    modules = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "data/__init__.py": "",
            "data/types.py": "def f():\n    from glmrag.index.kg import KGIndex\n",  # upward, inside a function
            "index/__init__.py": "from .kg import KGIndex\n",
            "index/kg.py": "import hydra\nfrom glmrag.data import types\n",
            "nn/__init__.py": "",
            "nn/a.py": "from . import b\n",
            "nn/b.py": "from glmrag.nn.a import x\n",
            "jobs/__init__.py": "",
            "jobs/evaluate.py": "import hydra\nfrom glmrag.nn import a\n",  # the entry floor may
        },
    )
    assert violations(modules) == [
        "upward: data.types imports index.kg",
        "entry-only library: index.kg imports hydra",
        "module cycle among data.types, index.kg",
        "module cycle among nn.a, nn.b",
        "package cycle among data, index",
    ]


def test_checker_accepts_a_one_way_package_and_names_a_module_on_no_floor(tmp_path):
    modules = write_package(
        tmp_path,
        {"__init__.py": "", "graph/__init__.py": "", "graph/g.py": "from glmrag.index import kg\n", "index/kg.py": ""},
    )
    assert violations(modules) == []
    with pytest.raises(AssertionError, match="glmrag.attic .*is on no floor"):
        violations(write_package(tmp_path, {"attic/old.py": ""}))
