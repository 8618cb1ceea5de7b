"""The README's table of example stacks and what each costs per the plan."""

from __future__ import annotations

from pathlib import Path

from cli.render import money, table
from deployment import lifetime_hours
from selector.catalog import Catalog
from selector.select import plan
from selector.spec import load_spec
from selector.units import format_hours


def stacks_table(stack_dir: Path, catalog: Catalog) -> str:
    rows = []
    for path in sorted(stack_dir.glob("Pulumi.*.yaml")):
        spec = load_spec(path)
        result = plan(spec, catalog)
        choice = result.choice
        if choice is None:
            rows.append([path.stem.removeprefix("Pulumi."), spec.task, result.status, "", "", "", ""])
            continue
        o, shape, cost = choice.offer, choice.shape, choice.cost
        count = f" × {shape.instances}" if shape.instances > 1 else ""
        rows.append(
            [
                path.stem.removeprefix("Pulumi."),
                spec.task,
                f"{o.instance.cloud} {o.instance.name}{count}, {o.region}, {o.market}",
                money(cost.hourly_usd),
                money(cost.total_usd),
                format_hours(lifetime_hours(result)),
                cost.obtainability.level if cost.obtainability is not None else "",
            ]
        )
    return table(
        ["stack", "task", "choice", "$/h", "estimated total", "deadline after", "capacity"],
        rows,
        right=(3, 4, 5),
    )
