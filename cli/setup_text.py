"""A job's setup time as the plan prints it: one line under ``Setup``, and ``--explain``'s
step-by-step table with each figure's source (``selector.setup_time``)."""

from __future__ import annotations

from selector.report import plan_setup
from selector.select import Plan
from selector.sizing import Term
from selector.units import format_hours


def setup_line(plan: Plan) -> str | None:
    """A job's setup on the chosen offer, inside its hours and cost (``selector.setup_time``)."""
    setup = plan_setup(plan)
    if setup is None:
        return None
    parts = " + ".join(f"{p.name} {p.seconds / 60:,.0f} min" for p in setup.parts)
    note = " (boot and image times are gpufit estimates)" if setup.estimated else ""
    return f"{format_hours(setup.hours)} before the first step, billed in the job's hours: {parts}{note}"


def setup_terms(plan: Plan) -> tuple[list[Term], list[str]]:
    """``--explain``'s setup steps as terms, and one line per source they rest on (none for a
    service)."""
    setup = plan_setup(plan)
    if setup is None:
        return [], []
    terms = [
        Term(p.name, p.seconds / 60, "min", p.formula + ("; a gpufit estimate" if p.estimate else ""))
        for p in setup.parts
    ]
    terms.append(Term("setup", setup.hours, "h", "sum; every machine of the job waits through it, billed"))
    return terms, [f"  {fig.source} ({fig.url})" for fig in setup.sources]
