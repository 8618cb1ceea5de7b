"""What a contract rule is and what it checks: a registered resource as the cloud would receive
it, the stack registered so far, and the violations a rule finds."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SECRET_KEY = "4dabf18193072939515e22adb298388d"
"""The key Pulumi marks a secret value with on the wire (pulumi.runtime.rpc)."""


def plain(value: Any) -> Any:
    """Inputs as the provider sees them: secrets unwrapped, whole floats as ints (the mock
    engine hands every number over as a float), containers copied."""
    if isinstance(value, Mapping):
        if SECRET_KEY in value and "value" in value:
            return plain(value["value"])
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True)
class Resource:
    """One registration: its type token, Pulumi name and plain inputs."""

    typ: str
    name: str
    inputs: Mapping[str, Any]
    urn: str = ""
    dependencies: tuple[str, ...] = ()  # URNs this registration depends on
    ignore_changes: tuple[str, ...] = ()

    @property
    def cloud(self) -> str:
        return self.typ.split(":", 1)[0]

    def get(self, key: str, default: Any = None) -> Any:
        return self.inputs.get(key, default)


@dataclass
class Stack:
    """What the contracts know besides the resource at hand: every registration so far (by
    mock id and by URN), the provider's region and project, the clock when the program runs
    under a fixed one, and the machine image the mock's lookup returned."""

    resources: list[Resource] = field(default_factory=list)
    by_id: dict[str, Resource] = field(default_factory=dict)
    by_urn: dict[str, Resource] = field(default_factory=dict)
    region: str = "us-east-1"
    project: str = "test-project"
    now: datetime | None = None
    image_root_gb: int | None = None  # the AMI's root snapshot size, as the lookup returned it
    image_root_device: str | None = None  # and its root device name

    def add(self, resource: Resource, resource_id: str) -> None:
        self.resources.append(resource)
        self.by_id[resource_id] = resource
        if resource.urn:
            self.by_urn[resource.urn] = resource

    def of_type(self, typ: str) -> list[Resource]:
        return [r for r in self.resources if r.typ == typ]

    def referenced(self, resource_id: Any) -> Resource | None:
        return self.by_id.get(str(resource_id)) if resource_id is not None else None

    def depends_on(self, resource: Resource) -> set[str]:
        """Every URN ``resource`` depends on, directly or through other registrations."""
        seen: set[str] = set()
        todo = list(resource.dependencies)
        while todo:
            urn = todo.pop()
            if urn in seen:
                continue
            seen.add(urn)
            found = self.by_urn.get(urn)
            if found is not None:
                todo.extend(found.dependencies)
        return seen


Check = Callable[[Resource, Stack], Iterable[str]]


@dataclass(frozen=True)
class Rule:
    """One thing the cloud refuses. ``applies`` lists the type tokens it checks (``aws:*`` /
    ``gcp:*`` for every resource of a cloud); ``check`` yields one message per problem;
    ``source`` is the documentation that states the rule. ``accepts`` and ``refuses`` are
    registrations the cloud takes and turns away, which the rule's own test replays (in the
    stack ``context`` makes, when the rule needs one).

    A ``whole_stack`` rule is about how resources fit together (a security group and the
    interfaces that use it): it runs once the program has registered everything, and its
    examples are whole stacks, ``accepting_stack`` and ``refusing_stack``."""

    id: str
    summary: str
    source: str
    applies: tuple[str, ...]
    check: Check
    accepts: tuple[Resource, ...] = ()
    refuses: tuple[Resource, ...] = ()
    context: Callable[[], Stack] | None = None
    whole_stack: bool = False
    accepting_stack: Callable[[], Stack] | None = None
    refusing_stack: Callable[[], Stack] | None = None

    def covers(self, typ: str) -> bool:
        return any(typ == a or (a.endswith(":*") and typ.startswith(a[:-1])) for a in self.applies)


STACK = Resource("pulumi:pulumi:Stack", "stack", {})
"""What a whole-stack rule's violations are reported against."""


@dataclass(frozen=True)
class Violation:
    rule: Rule
    resource: Resource
    detail: str

    def __str__(self) -> str:
        return (
            f"{self.resource.typ} {self.resource.name}: {self.detail} "
            f"[{self.rule.id}: {self.rule.summary}; {self.rule.source}]"
        )


class ContractError(AssertionError):
    """The cloud would refuse this registration (or this stack): the mock refuses it too."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        super().__init__("the cloud would refuse:\n" + "\n".join(f"  {v}" for v in violations))


def unique_hex(seed: str, length: int = 7) -> str:
    """A stand-in for the random hex a provider appends (deterministic, so runs compare)."""
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def autoname(resource_name: str) -> str:
    """Pulumi's autoname: the resource name, ``-`` and seven random hex characters
    (``resource.NewUniqueHex(name + "-", 7, maxlen)``, pulumi sdk/go/common/resource/
    properties_id.go; applied by pulumi-aws and pulumi-gcp to an unset ``name``)."""
    return f"{resource_name}-{unique_hex(resource_name)}"


TF_UNIQUE_SUFFIX = "20261202120000000000000001"
"""terraform-plugin-sdk ``id.PrefixedUniqueId``: a UTC timestamp ``20060102150405`` with four
digits of sub-seconds and an 8-hex-digit counter, 26 characters
(https://github.com/hashicorp/terraform-plugin-sdk/blob/main/helper/id/id.go)."""


def prefixed(prefix: str) -> str:
    """The name terraform-provider-aws makes from a ``name_prefix``."""
    return prefix + TF_UNIQUE_SUFFIX
