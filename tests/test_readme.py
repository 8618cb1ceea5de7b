"""The README stays true: its example output is what gpufit prints, and it documents every field."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout

from pydantic import BaseModel

from cli.main import main
from selector.spec import WorkloadSpec
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block_after(marker: str) -> str:
    start = README.index(marker)
    fence = README.index("```\n", start) + 4
    return README[fence : README.index("```", fence)]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    command = [ln for ln in lines if ln and not ln.startswith(("#", "set ", "cd "))][-1]
    assert command == "make test"
    assert re.search(r"^make test\b", README, re.M)
    assert re.search(r"^make plan\b", README, re.M)


def test_worked_example_output_is_current() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["plan", str(ROOT / "stacks" / "Pulumi.llama70b-chat.yaml")]) == 0
    assert _block_after("`make plan` prints") == out.getvalue()


def _field_names(model: type[BaseModel]) -> set[str]:
    names = set()
    for name, info in model.model_fields.items():
        names.add(name)
        annotation = info.annotation
        for candidate in getattr(annotation, "__args__", ()) or (annotation,):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                names |= _field_names(candidate)
    return names


def test_spec_reference_names_every_field() -> None:
    reference = README[README.index("## The spec") : README.index("## How the numbers are made")]
    missing = sorted(name for name in _field_names(WorkloadSpec) if name not in reference)
    assert not missing, f"README spec reference lacks {missing}"


def test_stacks_table_is_current() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["stacks", str(ROOT / "stacks")]) == 0
    assert _block_after("what each costs per the plan (`gpufit stacks`)") == out.getvalue()


def test_the_qlora_example_lines_are_current() -> None:
    """The README quotes three lines of the QLoRA example's plan: they are what gpufit prints."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["plan", str(ROOT / "examples" / "guanaco-65b.yaml")]) == 0
    quoted = _block_after("with two fallbacks:").strip().splitlines()
    printed = out.getvalue().splitlines()
    assert len(quoted) == 3 and all(line in printed for line in quoted)


def test_the_command_table_lists_every_option_of_gpufit_lock() -> None:
    """Review of i22h, nit 4: ``--refresh-model`` was on ``gpufit lock`` but not in its row."""
    import argparse

    from cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = [o for a in sub.choices["lock"]._actions for o in a.option_strings if o.startswith("--")]
    row = next(line for line in README.splitlines() if line.startswith("| `gpufit lock "))
    assert [o for o in options if o not in row and o != "--help"] == []
