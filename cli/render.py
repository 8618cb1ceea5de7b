"""Plans and offers as text a person reads in a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from cli.figures import money as money, number as number, table as table, where
from cli.fleet_text import (
    breadth_line as breadth_line,
    capacity_line as capacity_line,
    fleet_line as fleet_line,
    prices_line as prices_line,
)
from cli.serve_text import serve_lines
from cli.setup_text import setup_line, setup_terms
from selector.attempt_pin import pin_note
from selector.batch_concurrency import CALIBRATED_DECODE_CONCURRENCY, is_estimate
from selector.catalog import Catalog, Offer
from selector.cost import UNKNOWN_INTERRUPTION_BUCKET, Cost
from selector.freshness import price_ages
from selector.obtainability import obtainability
from selector.rates import CloudRates
from selector.refuge import worst_case_clause
from selector.select import Candidate, Plan
from selector.sizing import Term, usable_gib
from selector.units import format_hours


def _gpus(candidate: Candidate) -> str:
    it = candidate.offer.instance
    count = it.gpu_count * candidate.shape.instances
    return f"{count}×{it.gpu.name}"


def _flag(offer: Offer) -> str:
    low = (
        offer.confidence == "low"
        or offer.instance.confidence == "low"
        or offer.instance.gpu.confidence == "low"
    )
    return " (low-confidence figure)" if low else ""


def _cost_line(cost: Cost, serving: bool) -> str:
    parts = [
        f"compute {money(cost.compute_usd)}",
        f"storage {money(cost.storage_usd)}",
        f"egress {money(cost.egress_usd)}",
    ]
    if cost.data_transfer_usd:
        parts.append(f"dataset transfer {money(cost.data_transfer_usd)}")
    span = "for" if serving else "per job,"
    line = f"{money(cost.total_usd)} {span} {format_hours(cost.hours)}: " + " · ".join(parts)
    if cost.spot_factor > 1.0:
        line += f" (spot rework ×{cost.spot_factor:.4f})"
    return line


def disk_lines(plan: Plan) -> list[str]:
    """The boot disk per machine and what it holds (``selector.cost.disk_parts``), and whether
    the job's outputs are counted."""
    from selector.cost import disk_parts, disk_size_gb, outputs_note

    spec, req = plan.spec, plan.requirements
    size = disk_size_gb(spec, req)
    if spec.storage.disk_gb is not None:
        lines = [f"{size:,.0f} GB per machine (storage.disk_gb)"]
    else:
        parts = " + ".join(f"{p.name} {p.gb:,.0f}" for p in disk_parts(spec, req))
        lines = [f"{size:,.0f} GB per machine: {parts}"]
    note = outputs_note(spec)
    if note:
        lines.append(note)
    return lines


def excluded_lines(plan: Plan) -> list[str]:
    """One line per ``placement.exclude`` entry: where, and why and when when recorded."""
    return [
        e.label + "".join(f", {part}" for part in (e.reason, e.at) if part)
        for e in plan.spec.placement.exclude
    ]


_MD_MARKS = "\\`*_{}[]()#|<>~"


def md_text(text: str) -> str:
    """``text`` as literal Markdown (GitHub Flavored Markdown's backslash escapes,
    https://github.github.com/gfm/#backslash-escapes), ``@`` broken so no one is mentioned."""
    flat = " ".join(text.split())
    return "".join(f"\\{c}" if c in _MD_MARKS else c for c in flat).replace("@", "@\u200b")


def _example_md(example: str) -> str:
    """A rejection example; one that quotes a ``placement.exclude`` reason (user text) literal."""
    return md_text(example) if "placement.exclude" in example else example


def _choice_hourly(offer: Offer, cost: Cost, instances: int) -> float:
    """The Choice line's $/h per instance: a reservation's machines are paid (overflow aside)."""
    return cost.hourly_usd / instances if offer.market == "reservation" else offer.hourly_usd


def render_plan(plan: Plan, today: date) -> str:
    spec, req = plan.spec, plan.requirements
    head = (
        f"{spec.name}: {spec.task} {req.arch.name} in {spec.precision} — catalog "
        f"{plan.catalog.source or plan.catalog.path} (built {plan.catalog.as_of}); {prices_line(plan, today)}"
    )
    lines = [head]
    if req.arch.hf_commit:  # what a moved branch cannot change: the commit sized (and served)
        rev = spec.model.revision or "the default branch"
        lines.append(f"Model     {req.arch.hf} at commit {req.arch.hf_commit} ({rev} when planned)")
    warning = plan.price_ages.warning(today) if plan.price_ages is not None else None
    if warning:
        lines.append(f"WARNING: {warning}")
    lines += [f"Excluded  {e}" for e in excluded_lines(plan)]
    pinned = pin_note(plan.spec.placement.attempt)
    if pinned:
        lines.append(f"Pinned    {pinned}")
    lines.append("")
    choice = plan.choice
    serving = spec.task == "serve"
    if choice is not None:
        offer, shape, cost = choice.offer, choice.shape, choice.cost
        it = offer.instance
        link = "NVLink" if it.nvlink else "PCIe"
        lines.append(
            f"Choice    {it.cloud} {it.name} in {where(offer)}, {offer.market}, "
            f"{money(_choice_hourly(offer, cost, shape.instances))}/h × {shape.instances} instance"
            f"{'s' if shape.instances > 1 else ''}{_flag(offer)}"
        )
        lines.append(
            f"          {it.gpu_count}×{it.gpu.name} ({it.gpu.memory_gib:.1f} GiB, "
            f"{it.gpu.bandwidth_gbps:g} GB/s, {link}{', FP8' if it.gpu.fp8 else ''}); "
            f"TP {shape.tensor_parallel}, {shape.gpus_per_replica} GPU"
            f"{'s' if shape.gpus_per_replica > 1 else ''} per replica, "
            f"{shape.nodes_per_replica} node{'s' if shape.nodes_per_replica > 1 else ''}, "
            f"{shape.replicas} replica{'s' if shape.replicas > 1 else ''}"
        )
        if shape.tokens_per_s_per_stream is not None:
            target = f" (needs {req.tokens_per_s_per_stream:g})" if req.tokens_per_s_per_stream else ""
            lines.append(
                f"          {shape.tokens_per_s_per_stream:.1f} tok/s per stream{target}, "
                f"{shape.tokens_per_s_per_replica or 0:.0f} tok/s per replica"
            )
        if shape.concurrency:
            calibrated = f"ESTIMATE beyond the calibrated {CALIBRATED_DECODE_CONCURRENCY}; "
            lines.append(
                f"          batch concurrency {shape.concurrency} sequences per replica ("
                f"{calibrated if is_estimate(shape.concurrency) else ''}fewest instance-hours whose KV "
                "cache fits; see --explain)"
            )
        if spec.batch_engine != "none":
            lines.append(
                f"          gpufit starts {spec.batch_engine} on 127.0.0.1 (TP {shape.tensor_parallel}, "
                f"max-num-seqs {shape.concurrency or req.concurrency}); "
                "job.command sends to $GPUFIT_ENGINE_URL"
            )
        elif shape.concurrency:
            lines.append(
                "          your job.command's engine must pass $GPUFIT_MAX_NUM_SEQS "
                "(--max-num-seqs / --max-running-requests): the job time assumes it"
            )
        if shape.job_hours is not None:
            lines.append(f"          job time {format_hours(shape.job_hours)} on {_gpus(choice)}")
        lines.append(
            f"Needs     {shape.vram_gib_per_replica:.1f} GiB per replica, "
            f"{shape.vram_gib_per_gpu:.1f} GiB per GPU of {usable_gib(it.gpu, req):.1f} usable"
            + (f"; {req.min_bandwidth_gbps:,.0f} GB/s for the token rate" if req.min_bandwidth_gbps else "")
        )
        lines.append(f"Cost      {_cost_line(cost, serving)}{worst_case_clause(plan, money)}")
        setup = setup_line(plan)
        if setup:
            lines.append(f"Setup     {setup}")
        lines += [f"{'Disk' if i == 0 else '':<10}{line}" for i, line in enumerate(disk_lines(plan))]
        if offer.market == "spot":
            bucket = offer.interruption_bucket
            if bucket:
                known = f"{bucket} of instances interrupted a month (Spot Instance Advisor)"
            else:
                known = f"no sourced interruption frequency; costed as {UNKNOWN_INTERRUPTION_BUCKET}"
            lines.append(f"Spot      {known}; {cost.interruption_rate_per_h:.2g} interruptions/h expected")
        for item in cost.unpriced:
            lines.append(f"          not priced: {item}")
        lines.append(f"Capacity  {capacity_line(plan, today)}")
        lines.append(f"Price     {plan.catalog.describe_source(offer.source)}; as of {offer.as_of}")
        lines.append(f"Fleet     {fleet_line(plan)}")
        if (breadth := breadth_line(plan)) is not None:
            lines.append(f"Breadth   {breadth}")
        lines += [f"{'Serve' if i == 0 else '':<10}{line}" for i, line in enumerate(serve_lines(plan))]
    else:
        verdict = "over budget" if plan.status == "over-budget" else "nothing feasible"
        lines.append(f"No choice: {verdict} among {plan.considered} offers.")
    if plan.alternatives:
        lines += ["", "Alternatives (best offer per instance type and market)"]
        rows = []
        for i, cand in enumerate(plan.alternatives, start=1):
            o = cand.offer
            tok = cand.shape.tokens_per_s_per_stream
            rows.append(
                [
                    str(i),
                    o.instance.cloud,
                    o.instance.name,
                    where(o),
                    o.market,
                    _gpus(cand),
                    money(cand.cost.hourly_usd),
                    money(cand.cost.total_usd),
                    f"{tok:.1f}" if tok is not None else format_hours(cand.cost.hours),
                    cand.cost.obtainability.level if cand.cost.obtainability else "",
                    money(cand.cost.expected_usd),
                ]
            )
        last = "tok/s" if serving else "hours"
        lines.append(
            table(
                [
                    *("#", "cloud", "instance", "where", "market", "GPUs", "$/h", "total", last),
                    *("capacity", "ranked at"),
                ],
                rows,
                right=(6, 7, 8, 10),
            )
        )
    if plan.rejections:
        lines += ["", f"Rejected {sum(plan.rejections.values())} of {plan.considered} offers:"]
        for name, count in sorted(plan.rejections.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name:<12} {count:>6}  e.g. {plan.rejection_examples[name]}")
    if plan.misses and (choice is None or plan.status != "ok" or len(plan.misses) > 0):
        lines += ["", "Closest misses"]
        for miss in plan.misses[:3]:
            o = miss.offer
            lines.append(
                f"  {o.instance.cloud} {o.instance.name} ({where(o)}, {o.market}, "
                f"{money(o.hourly_usd)}/h) — {miss.rejection.filter}: {miss.rejection.reason}"
            )
    return "\n".join(lines)


def _term_rows(terms: Sequence[Term]) -> list[list[str]]:
    return [
        [t.name, f"{t.value:.6f}" if t.unit == "×" else number(t.value), t.unit, t.formula] for t in terms
    ]


def render_explain(plan: Plan) -> str:
    """Every term of the arithmetic with its value and formula."""
    req = plan.requirements
    lines = ["", "Requirements (independent of the GPU)"]
    lines.append(table(["term", "value", "unit", "formula"], _term_rows(req.terms), right=(1,)))
    lines.append(
        f"  efficiency: bandwidth {req.bandwidth_efficiency:g}, MFU {req.mfu:g} "
        "(override with tuning.bandwidth_efficiency / tuning.mfu)"
    )
    if plan.choice is not None:
        c = plan.choice
        lines += ["", f"Fit on {c.offer.instance.name}"]
        lines.append(table(["term", "value", "unit", "formula"], _term_rows(c.shape.terms), right=(1,)))
        cost = c.cost
        cost_terms = [
            Term("hours run", cost.hours, "h", "duration, or (job hours + setup) × spot rework factor"),
            Term("billed hours", cost.billed_hours, "h", "per-second billing, 60 s minimum"),
            Term(
                "compute",
                cost.compute_usd,
                "USD",
                f"{money(c.offer.hourly_usd)}/h × {c.shape.instances} × billed hours",
            ),
            Term("boot disks", cost.disk_usd, "USD", "GB × $/GB-month × instances × hours ÷ 730"),
            Term("checkpoint bucket", cost.bucket_usd, "USD", "GB × $/GB-month × (hours + keep_days) ÷ 730"),
            Term("egress", cost.egress_usd, "USD", "GB by the cloud's monthly tiers"),
            Term("dataset transfer", cost.data_transfer_usd, "USD", "dataset GB moved from data.region"),
            Term("total", cost.total_usd, "USD", "sum (what is billed)"),
            Term(
                "expected wait",
                cost.wait_hours,
                "h",
                "(1 + interruptions) × (1 − p) ÷ p, p = chance of capacity within an hour (estimate)",
            ),
            Term(
                "wait value",
                cost.wait_usd,
                "USD",
                f"expected wait × {money(cost.wait_value_per_hour)}/h (a feasible plan's least $/h)",
            ),
            Term(
                "failure to launch",
                cost.failure_usd,
                "USD",
                f"f × (window × $/h + re-run − launched), f = {cost.launch_failure:.3f} "
                "(no capacity before the deadline; estimate)",
            ),
            Term("ranked at", cost.expected_usd, "USD", "total + wait value + failure to launch"),
        ]
        if cost.spot_factor > 1.0:
            cost_terms.insert(
                1,
                Term(
                    "spot rework factor",
                    cost.spot_factor,
                    "×",
                    f"1 + {cost.interruption_rate_per_h:.3g}/h × (interval/2 + restart)",
                ),
            )
        lines += ["", "Cost"]
        lines.append(table(["term", "value", "unit", "formula"], _term_rows(cost_terms), right=(1,)))
        setup, sources = setup_terms(plan)
        if setup:
            lines += ["", "Setup (selector/data/setup_times.yaml)"]
            lines += [table(["term", "value", "unit", "formula"], _term_rows(setup), right=(1,)), *sources]
        lines += _serve_terms(plan)
    return "\n".join(lines)


def _serve_terms(plan: Plan) -> list[str]:
    """The model server's health grace period and how it is estimated."""
    from deployment import DOWNLOAD_MB_PER_S, ENGINE_START_S, ServingError, server_launch

    try:
        launch = server_launch(plan)
    except ServingError:
        return []
    if launch is None:
        return []
    terms = [
        Term(
            "weights to download",
            launch.weights_gb,
            "GB",
            f"{launch.model}: {plan.spec.served().download_note}",
        ),
        Term(
            "health grace period",
            launch.grace_seconds / 60,
            "min",
            f"({ENGINE_START_S} s image and start + 2 × GB × 1000 ÷ {DOWNLOAD_MB_PER_S:g} MB/s "
            "download and load), rounded up to a minute",
        ),
    ]
    return ["", "Serving", table(["term", "value", "unit", "formula"], _term_rows(terms), right=(1,))]


OFFER_COLUMNS = (
    "cloud",
    "region",
    "instance",
    "GPU",
    "n",
    "GiB/GPU",
    "GB/s",
    "FP8",
    "NVLink",
    "market",
    "$/h",
    "$/GiB-h",
    "billing",
    "as of",
    "capacity",
)


def _billing(rates: CloudRates | None) -> str:
    if rates is None:
        return "?"
    return f"{rates.billing_increment_s:g}s, min {rates.billing_minimum_s:g}s"


def render_offers(offers: Sequence[Offer], rates: dict[str, CloudRates]) -> str:
    """The comparison table a person reads before renting."""
    rows = []
    for o in offers:
        it, gpu = o.instance, o.instance.gpu
        rows.append(
            [
                it.cloud,
                o.region + (f"/{o.zone}" if o.zone else ""),
                it.name,
                gpu.name,
                str(it.gpu_count),
                f"{gpu.memory_gib:.1f}",
                f"{gpu.bandwidth_gbps:g}",
                "yes" if gpu.fp8 else "-",
                "yes" if it.nvlink else "-",
                o.market,
                f"{o.hourly_usd:,.3f}" + ("*" if o.confidence == "low" else "") + ("†" if o.unpriced else ""),
                f"{o.hourly_usd / (it.gpu_count * gpu.memory_gib):.4f}",
                _billing(rates.get(it.cloud)),
                o.as_of,
                "-" if o.unpriced else obtainability(o).level,
            ]
        )
    out = table(OFFER_COLUMNS, rows, right=(4, 5, 6, 10, 11))
    out += "\n* = low-confidence price (see the catalog's notes)."
    unpriced = [o for o in offers if o.unpriced]
    if unpriced:
        out += "\n† = kept in the catalog but never priced:"
        for o in unpriced:
            out += f"\n  {o.instance.cloud} {o.instance.name} {o.zone or o.region} {o.market}: {o.unpriced}"
    return out


def offers_footer(offers: Sequence[Offer], catalog: Catalog, today: date) -> str:
    """How many offers, of which catalog, how old their prices are (with a warning past the
    threshold) and how many were left out as not sold that way."""
    priced = sum(1 for o in offers if not o.unpriced)
    ages = price_ages(o.as_of for o in offers if not o.unpriced)
    lines = [
        f"{priced} offers ({len(offers) - priced} more kept but not priced); catalog {catalog.source} "
        f"(built {catalog.as_of}); " + (ages.describe(today) if ages else "no prices")
    ]
    warning = ages.warning(today) if ages else None
    if warning:
        lines.append(f"WARNING: {warning}")
    if catalog.not_sold:
        lines.append(f"left out, not sold that way: {'; '.join(catalog.not_sold)}")
    return "\n".join(lines)


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def mermaid_totals(plan: Plan, top: int = 6) -> str:
    """A Mermaid ``xychart-beta`` bar chart of the choice's and the top alternatives' expected
    totals, which GitHub draws in a pull-request comment (empty without a choice)."""
    shown = [c for c in (plan.choice, *plan.alternatives) if c is not None][:top]
    if not shown:
        return ""
    names = ", ".join(f'"{c.offer.instance.name} {c.offer.market}"' for c in shown)
    totals = ", ".join(f"{c.cost.total_usd:.0f}" for c in shown)
    return "\n".join(
        [
            "```mermaid",
            "xychart-beta",
            '    title "Expected total, USD (the choice first)"',
            f"    x-axis [{names}]",
            '    y-axis "USD"',
            f"    bar [{totals}]",
            "```",
        ]
    )


def render_markdown(plan: Plan, today: date) -> str:
    """The plan as a pull-request comment: choice, requirements, cost, alternatives, rejections."""
    spec, req = plan.spec, plan.requirements
    lines = [f"### gpufit plan: `{spec.name}` ({spec.task} {req.arch.name}, {spec.precision})", ""]
    warning = plan.price_ages.warning(today) if plan.price_ages is not None else None
    if warning:
        lines += [f"> **Warning:** {warning}", ""]
    if plan.spec.placement.exclude:
        lines += [
            f"> **Excluded** (placement.exclude): {'; '.join(md_text(e) for e in excluded_lines(plan))}",
            "",
        ]
    pinned = pin_note(plan.spec.placement.attempt)
    if pinned:
        lines += [f"> **Pinned:** {md_text(pinned)}", ""]
    choice = plan.choice
    if choice is None:
        verdict = "over budget" if plan.status == "over-budget" else "nothing feasible"
        lines.append(f"**No choice: {verdict}** among {plan.considered} offers.")
    else:
        o, shape, cost = choice.offer, choice.shape, choice.cost
        it = o.instance
        rows = [
            ["choice", f"**{it.cloud} {it.name}** × {shape.instances} in {where(o)}, {o.market}{_flag(o)}"],
            [
                "GPUs",
                f"{it.gpu_count}×{it.gpu.name} per instance ({it.gpu.memory_gib:.1f} GiB, "
                f"{it.gpu.bandwidth_gbps:g} GB/s, {'NVLink' if it.nvlink else 'PCIe'})",
            ],
            [
                "layout",
                f"TP {shape.tensor_parallel}, {shape.gpus_per_replica} GPUs per replica, "
                f"{shape.nodes_per_replica} node(s), {shape.replicas} replica(s)",
            ],
            [
                "memory",
                f"{shape.vram_gib_per_replica:.1f} GiB per replica, {shape.vram_gib_per_gpu:.1f} GiB per GPU",
            ],
        ]
        if shape.tokens_per_s_per_stream is not None:
            rows.append(["speed", f"{shape.tokens_per_s_per_stream:.1f} tok/s per stream"])
        if shape.concurrency:
            rows.append(["batch concurrency", f"{shape.concurrency} sequences per replica"])
        if shape.job_hours is not None:
            rows.append(["job time", format_hours(shape.job_hours)])
        setup = setup_line(plan)
        if setup:
            rows.append(["setup", setup])
        rows += [
            ["$/h", money(cost.hourly_usd)],
            ["total", f"**{money(cost.total_usd)}** over {format_hours(cost.hours)}"],
            [
                "breakdown",
                f"compute {money(cost.compute_usd)} · storage {money(cost.storage_usd)} · "
                f"egress {money(cost.egress_usd)} · dataset transfer {money(cost.data_transfer_usd)}",
            ],
            ["capacity", capacity_line(plan, today)],
            ["price source", f"{o.source}, as of {o.as_of}"],
            ["fleet", fleet_line(plan)],
            *([["breadth", breadth]] if (breadth := breadth_line(plan)) is not None else []),
        ]
        serve = serve_lines(plan)
        if serve:
            rows.append(["serve", "<br>".join(serve)])
        lines.append(_md_table(["", ""], rows))
    chart = mermaid_totals(plan)
    if chart:
        lines += ["", chart]
    if plan.alternatives:
        lines += ["", "<details><summary>Alternatives</summary>", ""]
        lines.append(
            _md_table(
                ["cloud", "instance", "where", "market", "GPUs", "$/h", "total"],
                [
                    [
                        c.offer.instance.cloud,
                        c.offer.instance.name,
                        where(c.offer),
                        c.offer.market,
                        _gpus(c),
                        money(c.cost.hourly_usd),
                        money(c.cost.total_usd),
                    ]
                    for c in plan.alternatives
                ],
            )
        )
        lines += ["", "</details>"]
    if plan.rejections:
        lines += ["", "<details><summary>Rejections</summary>", ""]
        lines.append(
            _md_table(
                ["filter", "offers", "example"],
                [
                    [name, str(n), _example_md(plan.rejection_examples[name])]
                    for name, n in sorted(plan.rejections.items(), key=lambda kv: -kv[1])
                ],
            )
        )
        lines += ["", "</details>"]
    built = f"{plan.catalog.source} (built {plan.catalog.as_of})"
    lines += ["", f"_Catalog: {built}; {prices_line(plan, today)}._"]
    return "\n".join(lines)
