"""The house's walls, read from the code: every product module's imports (parsed, not run) go
only to its own home or to a home the table below lets it use, and the table lets a home use
only lower layers; no module imports another's private (``_``) names; no two modules import
each other, however indirectly; no product file outgrows one sitting. The README's "Where
things live" shows the same table, and the tool settings that list the homes (pyproject.toml,
the Makefile, the plan workflow) are checked against it.

Every import counts, wherever it is: at the top, inside a function (the lazy imports that keep
cloud SDKs off ``gpufit plan``'s path), under ``TYPE_CHECKING``, or an
``importlib.import_module``/``__import__`` call with a literal name.
"""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import ROOT

LIBRARY = frozenset(
    {"selector", "cloudapi", "deployment", "catalog", "machine", "hub", "gitops", "providers"}
)
"""Every home below the composition roots."""

HOMES: dict[str, tuple[int, frozenset[str]]] = {
    "selector": (0, frozenset()),  # pure planning, no I/O but its data files
    "cloudapi": (1, frozenset()),
    "deployment": (1, frozenset({"selector"})),
    "catalog": (2, frozenset({"selector", "cloudapi"})),
    "machine": (2, frozenset({"deployment"})),
    "gitops": (2, frozenset({"selector", "deployment"})),
    "hub": (3, frozenset({"selector", "catalog"})),  # its cache is in the catalog store's directory
    "providers": (3, frozenset({"cloudapi", "deployment", "machine", "gitops"})),  # sweep's halves
    # the composition roots
    "cli": (4, LIBRARY),
    "__main__": (4, LIBRARY),
    "scripts": (4, LIBRARY),
    "benchmarks": (4, LIBRARY | {"tests"}),  # they reuse the tests' fakes
    "policy": (4, frozenset({"selector"})),  # the pack runs from the checkout with PyYAML alone
}
"""Each home: its layer, and the homes it may import from (besides itself). A home below the
composition roots may import exactly the homes its row names; a composition root (allowed all of
``LIBRARY``) may wire any of them."""

LAYER = {home: layer for home, (layer, _) in HOMES.items()}
ALLOWED = {home: allowed for home, (_, allowed) in HOMES.items()}
ROOTS = frozenset(home for home, allowed in ALLOWED.items() if allowed >= LIBRARY)
NO_HOME = frozenset({"tests"})
"""Imported by a product module, yet no home of the product: the benchmarks' fakes."""

INSTALLED = frozenset({"cli"}) | ALLOWED["cli"]
"""What the wheel ships: the ``gpufit`` command and every home it may use."""
PREVIEWED = frozenset({"__main__", "policy"}) | ALLOWED["__main__"] | ALLOWED["policy"]
"""What ``pulumi preview --policy-pack policy`` runs: the program, the pack and their homes."""

SEPARATE = (
    ("providers.aws", "providers.gcp"),
    ("providers.gcp", "providers.aws"),
    ("catalog.aws", "catalog.gcp"),
    ("catalog.gcp", "catalog.aws"),
    ("catalog.snapshot.aws", "catalog.snapshot.gcp"),
    ("catalog.snapshot.gcp", "catalog.snapshot.aws"),
    ("cloudapi.aws", "cloudapi.gcp"),
    ("cloudapi.gcp", "cloudapi.aws"),
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
FIRST_PARTY = (set(HOMES) - {"__main__"}) | NO_HOME
"""First components that name our code in an absolute import (``import __main__`` would name the
running script, whichever it is)."""
PATH_ENTRIES = {"policy": "policy"}
"""Homes whose entry point puts a folder on ``sys.path`` (``policy/__main__.py`` adds ``policy/``),
so that there a bare name of one of that folder's files is first-party too."""


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # the first-party module, resolved to the longest one that exists
    name: str  # the name taken from it by ``from ... import``; "" for the module itself


def _literal_import(node: ast.Call) -> str | None:
    """The module that ``importlib.import_module("x.y")`` or ``__import__("x.y")`` names, if it
    is a literal."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def imports(module: Module) -> Iterator[Import]:
    """Every first-party import in ``module``: absolute ones whose first component is ours,
    relative ones, and literal ``import_module``/``__import__`` calls."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [(alias.name, "", 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            stem = node.module or ""
            found = [(f"{stem}.{alias.name}".lstrip("."), alias.name, node.level) for alias in node.names]
        elif isinstance(node, ast.Call) and (literal := _literal_import(node)):
            stripped = literal.lstrip(".")
            found = [(stripped, "", len(literal) - len(stripped))]
        else:
            continue
        for dotted, name, level in found:
            if level:
                base = package.split(".")[: len(package.split(".")) - level + 1]
                target = ".".join([*base, dotted] if dotted else base)
            elif dotted.split(".")[0] in FIRST_PARTY:
                target = dotted
            elif (folder := PATH_ENTRIES.get(module.home)) and f"{folder}.{dotted.split('.')[0]}" in BY_NAME:
                target = f"{folder}.{dotted}"
            else:
                continue  # the standard library or a third party
            parts = target.split(".")
            while len(parts) > 1 and ".".join(parts) not in BY_NAME:
                parts.pop()
            resolved = ".".join(parts)
            yield Import(node.lineno, resolved, "" if resolved == target else name)


EDGES = {m.name: sorted({i.target for i in imports(m)} - {m.name}) for m in MODULES}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_table_names_every_home() -> None:
    assert {m.home for m in MODULES} == set(HOMES), "a new top-level folder needs a row in HOMES"


def _not_downward(homes: Mapping[str, tuple[int, frozenset[str]]]) -> list[str]:
    layers = {home: layer for home, (layer, _) in homes.items()}
    return [
        f"{home} (L{layer}) may import {other} (L{layers[other]})"
        for home, (layer, allowed) in homes.items()
        for other in sorted(allowed - NO_HOME)
        if layers[other] >= layer
    ]


def test_every_allowed_import_points_to_a_lower_layer() -> None:
    wrong = _not_downward(HOMES)
    assert not wrong, "the table lets a home import its own layer or a higher one:\n" + "\n".join(wrong)


def test_the_layer_check_refuses_sideways_and_upward_edges() -> None:
    empty: frozenset[str] = frozenset()
    assert _not_downward({"a": (0, frozenset({"b"})), "b": (1, empty)}) == ["a (L0) may import b (L1)"]
    assert _not_downward({"a": (1, frozenset({"b"})), "b": (1, empty)}) == ["a (L1) may import b (L1)"]
    assert _not_downward({"a": (2, frozenset({"b"})), "b": (1, empty)}) == []


def test_imports_point_to_the_own_home_or_an_allowed_one() -> None:
    wrong = [
        f"{m.path.relative_to(ROOT)}:{i.line}: {m.home} imports {i.target}"
        for m in MODULES
        for i in imports(m)
        if i.target.split(".")[0] not in ALLOWED[m.home] | {m.home}
        or any(_within(m.name, a) and _within(i.target, b) for a, b in SEPARATE)
    ]
    assert not wrong, "imports across the walls (see HOMES):\n" + "\n".join(wrong)


def test_every_allowed_import_is_used() -> None:
    """Below the composition roots the table is exactly what the code imports, so a new edge
    between homes shows up as a change to the table (and the README)."""
    used: dict[str, set[str]] = {home: set() for home in HOMES}
    for m in MODULES:
        used[m.home] |= {target.split(".")[0] for target in EDGES[m.name]} - {m.home}
    unused = {home: sorted(ALLOWED[home] - used[home]) for home in set(HOMES) - ROOTS}
    assert not any(unused.values()), f"allowed but never imported (drop them from HOMES): {unused}"


def test_no_module_imports_a_private_name_of_another() -> None:
    """A leading underscore means "this module's own": another module, even in the same home,
    imports only public names (make it public, or move the code where it is used)."""
    wrong = [
        f"{m.path.relative_to(ROOT)}:{i.line}: from {i.target} import {i.name}"
        for m in MODULES
        for i in imports(m)
        if i.name.startswith("_") and not i.name.endswith("__") and i.target != m.name
    ]
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


def test_the_import_reader_sees_what_python_would_import(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "import select\n"  # the standard library, not selector/select.py
        "from . import select as ours\n"
        "import importlib\n"
        "importlib.import_module('catalog.store')\n"
        "__import__('hub.client')\n"
        "from selector.spec import _private, parse_spec\n"
        "from gpufit_policies import check_stack\n",  # a bare name outside policy/: a third party
        encoding="utf-8",
    )
    found = sorted((i.line, i.target, i.name) for i in imports(Module("selector.probe", "selector", source)))
    assert found == [
        (2, "selector.select", ""),
        (4, "catalog.store", ""),
        (5, "hub.client", ""),
        (6, "selector.spec", "_private"),
        (6, "selector.spec", "parse_spec"),
    ]
    in_policy = {i.target for i in imports(Module("policy.probe", "policy", source))}
    assert "policy.gpufit_policies" in in_policy  # policy/__main__.py puts policy/ on sys.path


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
            elif isinstance(node, ast.Call) and (literal := _literal_import(node)):
                names = [literal]
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
    """The README's "Where things live" has one row per home, with its layer and what it may
    import (``L0–L3``: every home below the composition roots)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Where things live") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    shown: dict[str, tuple[int, frozenset[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"L\d", cells[0]):
            continue
        home = cells[1].strip("`").removesuffix("/").removesuffix(".py")
        allowed = set(re.findall(r"`([a-z_]+)`", cells[3].split("(")[0]))
        if "L0–L3" in cells[3]:
            allowed |= LIBRARY
        shown[home] = (int(cells[0][1:]), frozenset(allowed))
    assert shown == HOMES


def _folders(names: set[str] | frozenset[str]) -> set[str]:
    return {"__main__.py" if name == "__main__" else name for name in names}


def test_the_tool_settings_name_every_home_they_need() -> None:
    """The lists of homes in pyproject.toml, the Makefile and the plan workflow, against the
    table: the wheel, the bytecode and isort cover what the command installs; mypy (strict)
    covers that, the Pulumi program and the policy pack; the plan workflow runs on a change to
    anything ``pulumi preview`` runs."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tool = pyproject["tool"]
    typed = INSTALLED | PREVIEWED
    assert set(tool["hatch"]["build"]["targets"]["wheel"]["packages"]) == INSTALLED
    assert set(tool["mypy"]["files"]) == _folders(typed)
    strict = next(o["module"] for o in tool["mypy"]["overrides"] if o.get("strict"))
    assert set(strict) == {home if home == "__main__" else f"{home}.*" for home in typed}
    assert set(tool["ruff"]["lint"]["isort"]["known-first-party"]) == (typed - {"__main__"}) | NO_HOME

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    compiled = re.search(r"-m compileall -q ([^\n]+)", makefile)
    assert compiled and set(shlex.split(compiled.group(1))) == INSTALLED

    workflow = (ROOT / ".github" / "workflows" / "plan.yml").read_text(encoding="utf-8")
    homes = _folders(set(HOMES))
    on = yaml.safe_load(workflow)[True]  # YAML 1.1 reads the key `on` as true
    paths = {p.removesuffix("/**") for p in on["pull_request"]["paths"]}
    assert paths & homes == _folders(PREVIEWED)
    program = re.search(r"PROGRAM = (\([^)]*\))", workflow)
    assert program, "plan.yml's PROGRAM tuple"
    prefixes = {p.removesuffix("/") for p in ast.literal_eval(program.group(1))}
    assert prefixes & homes == _folders(PREVIEWED)
