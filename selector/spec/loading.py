"""Reading a spec: YAML text or a file (a plain spec or a Pulumi stack file holding one) into a
``WorkloadSpec``, every problem one ``SpecProblem`` line; and the JSON Schemas editors use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from selector.spec.workload import WorkloadSpec


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong with a spec: where, and what was expected."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def one_line(text: str) -> str:
    """``text`` with every line break and control character escaped (``\\x85``), so that a
    problem quoting the user's input stays one line however that input was written."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class SpecError(Exception):
    """A spec that cannot be used; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def _problems_from(err: ValidationError, prefix: str) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    for item in err.errors(include_url=False):
        loc = [str(part) for part in item["loc"]]
        path = ".".join(([prefix] if prefix else []) + loc)
        msg = str(item["msg"])
        msg = msg.removeprefix("Value error, ")
        kind = item["type"]
        if kind == "extra_forbidden":
            msg = "unknown field (see `gpufit schema` for the fields)"
        elif kind == "missing":
            msg = "required field is missing"
        elif kind in ("literal_error", "enum"):
            msg = f"got {item.get('input')!r}; {msg.lower()}"
        elif "input" in item and kind not in ("value_error", "assertion_error"):
            shown = item["input"]
            if not isinstance(shown, dict | list):
                msg = f"got {shown!r}; {msg.lower()}"
        # a check that found several problems reports one per line (a hostile config.json)
        problems += [SpecProblem(path or prefix, line) for line in msg.splitlines() or [msg]]
    return problems


def parse_spec(data: object, source: str = "spec", prefix: str = "") -> WorkloadSpec:
    """Validate a decoded spec object; raise ``SpecError`` with one line per problem."""
    if not isinstance(data, dict):
        raise SpecError(
            source, [SpecProblem(prefix, f"expected a mapping of fields, got {type(data).__name__}")]
        )
    try:
        return WorkloadSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(source, _problems_from(err, prefix)) from None
    except (ValueError, TypeError, RecursionError) as err:  # defensive: never a traceback
        raise SpecError(source, [SpecProblem(prefix, f"could not read the spec: {err}")]) from None


STACK_KEY = "gpufit:workload"


def load_spec_text(text: str, source: str) -> WorkloadSpec:
    """Read a spec from YAML text: a plain spec or a Pulumi stack file holding one."""
    from selector.datafile import DuplicateKeyError, load_yaml_text

    try:
        doc = load_yaml_text(text)
    except DuplicateKeyError as err:
        raise SpecError(source, [SpecProblem(d.field, d.message) for d in err.duplicates]) from None
    except Exception as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(source, [SpecProblem("", f"{where}not valid YAML ({problem})")]) from None
    if isinstance(doc, dict) and isinstance(doc.get("config"), dict) and "name" not in doc:
        config = doc["config"]
        if STACK_KEY not in config:
            raise SpecError(
                source,
                [SpecProblem("config", f"a Pulumi stack file needs a {STACK_KEY!r} object")],
            )
        return parse_spec(config[STACK_KEY], source, prefix=f"config.{STACK_KEY}")
    return parse_spec(doc, source)


def load_spec(path: str | Path) -> WorkloadSpec:
    """Read a spec file (plain spec or Pulumi stack file)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(file), [SpecProblem("", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(str(file), [SpecProblem("", f"cannot read the file ({err})")]) from None
    return load_spec_text(text, str(file))


def json_schema() -> dict[str, Any]:
    schema = WorkloadSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpufit workload spec"
    return schema


def stack_json_schema() -> dict[str, Any]:
    """JSON Schema of a Pulumi stack file whose ``config`` holds a ``gpufit:workload``."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpufit Pulumi stack file",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": {
                    STACK_KEY: {"$ref": "workload.schema.json"},
                    "gpufit:catalog": {"type": "string"},
                    "gpufit:image": {"type": "string"},
                    "gpufit:subnetId": {"type": "string"},
                    "gpufit:expiresAt": {"type": "string", "format": "date-time"},
                },
                "required": [STACK_KEY],
            }
        },
        "required": ["config"],
    }
