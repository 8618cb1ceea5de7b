"""Contracts: what `pulumi up` would send, checked against the clouds' own rules.

One place holds every rule (``aws_rules.RULES``, ``gcp_rules.RULES``), each with the page that
states it. The Pulumi mocks (``tests.pulumi_harness.RecordingMocks``) run them on every
registration and refuse, as the cloud would, what breaks one; whole-stack rules (how resources
fit together) run when the program has finished. So every Pulumi test in the suite exercises
them, and a new resource type or input that no contract knows is refused until one does.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable
from typing import Any

from tests.contracts import aws_rules, gcp_rules, value_rules
from tests.contracts.model import STACK, ContractError, Resource, Rule, Stack, Violation, plain

RULES: tuple[Rule, ...] = (*aws_rules.RULES, *gcp_rules.RULES, *value_rules.RULES)
EXEMPT = ("pulumi:", "gpufit:", "random:")
"""Types no cloud API receives: providers, the stack, gpufit's components, random values."""


def exempt(typ: str) -> bool:
    return typ.startswith(EXEMPT)


def check_resource(resource: Resource, stack: Stack, rules: Iterable[Rule] = RULES) -> list[Violation]:
    """Violations of the per-registration rules by ``resource``."""
    if exempt(resource.typ):
        return []
    return [
        Violation(rule, resource, detail)
        for rule in rules
        if not rule.whole_stack and rule.covers(resource.typ)
        for detail in rule.check(resource, stack)
    ]


def check_stack(stack: Stack, rules: Iterable[Rule] = RULES) -> list[Violation]:
    """Violations of the whole-stack rules by everything registered."""
    clouds = {r.cloud for r in stack.resources if not exempt(r.typ)}
    return [
        Violation(rule, STACK, detail)
        for rule in rules
        if rule.whole_stack and any(a.split(":", 1)[0] in clouds for a in rule.applies)
        for detail in rule.check(STACK, stack)
    ]


class Contracts:
    """The contracts' view of one program run, fed by the mocks."""

    def __init__(self, stack: Stack | None = None) -> None:
        self.stack = stack if stack is not None else Stack()
        self.refused: list[Violation] = []

    def register(
        self,
        typ: str,
        name: str,
        inputs: dict[str, Any],
        resource_id: str,
        request: Any = None,
        urn: str | None = None,
    ) -> Resource:
        """Check one registration (ContractError when the cloud would refuse it) and remember it.
        ``request`` is the engine's RegisterResource request (dependencies, ignoreChanges)."""
        resource = Resource(
            typ,
            name,
            plain(inputs),
            urn=urn or _urn(typ, name),
            dependencies=tuple(getattr(request, "dependencies", ()) or ()),
            ignore_changes=tuple(getattr(request, "ignoreChanges", ()) or ()),
        )
        found = check_resource(resource, self.stack)
        if found:
            self.refused.extend(found)
            raise ContractError(found)
        self.stack.add(resource, resource_id)
        return resource

    def finish(self) -> None:
        """Check how the registered resources fit together (ContractError if they do not)."""
        found = check_stack(self.stack)
        if found:
            raise ContractError(found)

    def reraise(self, error: BaseException) -> None:
        """After a program failed: the contracts' refusal, when that is why (as one plain
        ContractError, not the engine's chain of "While processing ..." errors around it),
        else ``error`` itself.

        The engine leaves the failed registrations' futures unretrieved; they are collected
        here, quietly, rather than whenever the garbage collector next runs: asyncio's
        "exception was never retrieved" log, run from a finaliser in the middle of pytest
        parsing a traceback's source, trips CPython 3.11's AST recursion check (SystemError)."""
        quiet = logging.getLogger("asyncio")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            gc.collect()
        finally:
            quiet.setLevel(level)
        if self.refused:
            raise ContractError(self.refused) from None
        raise error


def _urn(typ: str, name: str) -> str:
    return f"urn:pulumi:test::gpufit::{typ}::{name}"


__all__ = [
    "RULES",
    "ContractError",
    "Contracts",
    "Resource",
    "Rule",
    "Stack",
    "Violation",
    "check_resource",
    "check_stack",
]
