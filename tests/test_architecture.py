"""The house's walls, read from the code: every product module's imports (parsed, not run) go
only to its own home or to a home the table below lets it use; no two modules import each other,
however indirectly; no product file outgrows one sitting. The README's "Where things live" shows
the same table.

Every import statement counts, wherever it is: at the top, inside a function (the lazy imports
that keep cloud SDKs off ``gpufit plan``'s path) or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

LIBRARY = frozenset(
    {"selector", "cloudapi", "deployment", "catalog", "machine", "hub", "gitops", "providers"}
)
"""Every home below the composition roots."""

HOMES: dict[str, frozenset[str]] = {
    # L0: pure planning, no I/O but its data files
    "selector": frozenset(),
    # L1
    "cloudapi": frozenset(),
    "deployment": frozenset({"selector"}),
    # L2
    "catalog": frozenset({"selector", "cloudapi"}),
    "machine": frozenset({"selector", "deployment"}),
    # L3 (hub keeps its cache in the catalog store's cache directory; providers hold the clouds'
    # halves of gitops' sweep)
    "hub": frozenset({"selector", "catalog"}),
    "gitops": frozenset({"selector", "catalog", "deployment"}),
    "providers": frozenset({"selector", "cloudapi", "deployment", "catalog", "machine", "gitops"}),
    # L4: composition roots
    "cli": LIBRARY,
    "__main__": LIBRARY,
    "scripts": LIBRARY,
    "benchmarks": LIBRARY | {"tests"},  # they reuse the tests' fakes
    "policy": frozenset({"selector"}),  # the pack runs from the checkout with PyYAML alone
}
"""Each home and the homes it may import from (besides itself)."""

SEPARATE = (
    ("providers.aws", "providers.gcp"),
    ("providers.gcp", "providers.aws"),
    ("catalog.aws", "catalog.gcp"),
    ("catalog.gcp", "catalog.aws"),
)
"""Siblings inside a home that must not use each other: one cloud's part never loads the other's."""

PURE = ("selector", "deployment", "machine")
SDKS = frozenset({"pulumi", "pulumi_aws", "pulumi_gcp", "pulumi_random", "boto3", "botocore", "google"})
"""Homes that import no cloud SDK and no pulumi: they run, and are tested, without either."""

MAX_LINES = 600
SKIP = {".venv", ".tools", ".git", "build", "tests", ".hypothesis", ".mypy_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Module:
    name: str  # dotted, as imported: "selector.spec.model", "__main__", "policy.gpufit_policies"
    home: str
    path: Path


def product_modules() -> list[Module]:
    """Every .py file outside tests/ (and tool folders), with its dotted name and home."""
    modules = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        modules.append(Module(".".join(parts), parts[0], path))
    return modules


MODULES = product_modules()
BY_NAME = {m.name: m for m in MODULES}
TOP = set(HOMES) | {"tests"}


def imports(module: Module) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every first-party import in ``module``, resolved to the
    longest module that exists (``from selector.spec import parse_spec`` -> ``selector.spec``)."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] not in TOP:
                if f"{package}.{target.split('.')[0]}" not in BY_NAME:
                    continue  # the standard library or a third party
                target = f"{package}.{target}"  # the policy pack imports its own files by bare name
            parts = target.split(".")
            while len(parts) > 1 and ".".join(parts) not in BY_NAME:
                parts.pop()
            yield node.lineno, ".".join(parts)


EDGES = {m.name: sorted({target for _, target in imports(m)} - {m.name}) for m in MODULES}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_table_names_every_home() -> None:
    assert {m.home for m in MODULES} == set(HOMES), "a new top-level folder needs a row in HOMES"


def test_imports_point_to_the_own_home_or_an_allowed_one() -> None:
    wrong = [
        f"{m.path.relative_to(ROOT)}:{line}: {m.home} imports {target}"
        for m in MODULES
        for line, target in imports(m)
        if target.split(".")[0] not in HOMES[m.home] | {m.home}
        or any(_within(m.name, a) and _within(target, b) for a, b in SEPARATE)
    ]
    assert not wrong, "imports across the walls (see HOMES):\n" + "\n".join(wrong)


def test_pure_homes_import_no_cloud_sdk_or_pulumi() -> None:
    wrong = []
    for m in MODULES:
        if m.home not in PURE:
            continue
        for node in ast.walk(ast.parse(m.path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            where = f"{m.path.relative_to(ROOT)}:{node.lineno}"
            wrong += [f"{where}: {name}" for name in names if name.split(".")[0] in SDKS]
    assert not wrong, "cloud SDKs or pulumi in a pure home:\n" + "\n".join(wrong)


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules() -> None:
    cycles = _cycles(EDGES)
    assert not cycles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def test_every_product_file_reads_in_one_sitting() -> None:
    long = {
        str(m.path.relative_to(ROOT)): n
        for m in MODULES
        if (n := len(m.path.read_text(encoding="utf-8").splitlines())) >= MAX_LINES
    }
    assert not long, f"files of {MAX_LINES} lines or more: split them by concern: {long}"


def test_the_readme_shows_this_table() -> None:
    """The README's "Where things live" has one row per home, allowing what ``HOMES`` allows
    (``L0–L3``: every home below the composition roots)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Where things live") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    shown: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"L\d", cells[0]):
            continue
        home = cells[1].strip("`").removesuffix("/").removesuffix(".py")
        allowed = set(re.findall(r"`([a-z_]+)`", cells[3].split("(")[0]))
        if "L0–L3" in cells[3]:
            allowed |= LIBRARY
        shown[home] = frozenset(allowed)
    assert shown == HOMES
