"""Self-contained HTML pages: the offers comparison (``gpufit offers --html``) and the plan
report (``gpufit plan --html``). Inline CSS, inline JavaScript, inline SVG charts
(``cli.svg``): nothing is fetched when the page is viewed."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cli.svg import Point, pareto, scatter, stacked_bar

if TYPE_CHECKING:
    from selector.catalog import Catalog, Offer
    from selector.rates import CloudRates
    from selector.select import Candidate, Plan
    from selector.sizing import Term

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:22px 0 8px}
.muted{color:#666} .warn{color:#a40}
table{border-collapse:collapse;margin:6px 0} th,td{padding:3px 8px;border-bottom:1px solid #e3e3e3;
text-align:left;white-space:nowrap} td.num,th.num{text-align:right} th.sortable{cursor:pointer;user-select:none}
th.sortable:hover{background:#f2f2f2} th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"} tr.choice td{font-weight:600;background:#fff6d6} #choice td{white-space:normal}
form#filters{display:flex;flex-wrap:wrap;gap:12px;align-items:center;margin:10px 0}
.charts{display:flex;flex-wrap:wrap;gap:16px} svg.chart{width:640px;max-width:100%;height:auto;
border:1px solid #ddd;background:#fff} .axis{stroke:#444} .grid{stroke:#eee} .tick{font-size:10px;fill:#555}
.axis-label{font-size:11px;fill:#333} .chart-title{font-size:13px;font-weight:600} .legend text{font-size:10px}
circle.mark{fill-opacity:.75;stroke:#fff;stroke-width:.5} circle.mark:hover{stroke:#000;stroke-width:1.5}
circle.mark.choice{stroke:#000;stroke-width:2.5;fill-opacity:1} polyline.frontier{fill:none;stroke:#d62728;
stroke-width:1.5;stroke-dasharray:5 3}
"""

SCRIPT = """
(function(){
  function value(td){var v=td.hasAttribute('data-v')?td.getAttribute('data-v'):td.textContent;
    var n=Number(v);return v!==''&&!isNaN(n)?n:v;}
  document.querySelectorAll('table.sortable').forEach(function(table){
    table.querySelectorAll('th.sortable').forEach(function(th,col){
      th.addEventListener('click',function(){
        var asc=th.getAttribute('aria-sort')!=='ascending';
        table.querySelectorAll('th').forEach(function(h){h.removeAttribute('aria-sort');});
        th.setAttribute('aria-sort',asc?'ascending':'descending');
        var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
        rows.sort(function(a,b){var x=value(a.cells[col]),y=value(b.cells[col]);
          if(x===y)return 0;return (x<y?-1:1)*(asc?1:-1);});
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  });
  var form=document.getElementById('filters');
  if(!form)return;
  function apply(){
    var f=new FormData(form);var shown=0;var keys={};
    document.querySelectorAll('#offers tbody tr').forEach(function(tr){
      var d=tr.dataset;var ok=(!f.get('cloud')||d.cloud===f.get('cloud'))
        &&(!f.get('region')||d.region===f.get('region'))&&(!f.get('gpu')||d.gpu===f.get('gpu'))
        &&(parseFloat(d.vram)>=(parseFloat(f.get('min_vram'))||0))
        &&(!f.get('fp8')||d.fp8==='yes')&&(!f.get('nvlink')||d.nvlink==='yes')
        &&(!f.get('spot')||d.market==='spot');
      tr.hidden=!ok;if(ok){shown++;keys[d.key]=true;}
    });
    document.querySelectorAll('circle.mark').forEach(function(c){
      c.style.display=keys[c.getAttribute('data-key')]?'':'none';});
    document.getElementById('count').textContent=shown+' offers shown';
  }
  form.addEventListener('input',apply);form.addEventListener('change',apply);apply();
})();
"""


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )


def _cell(text: str, sort: object, num: bool = False) -> str:
    """A cell; ``data-v`` holds its sort value only where that differs from its text."""
    cls = ' class="num"' if num else ""
    value = "" if str(sort) == text else f' data-v="{html.escape(str(sort))}"'
    return f"<td{cls}{value}>{html.escape(text)}</td>"


def _head(columns: Sequence[tuple[str, bool]]) -> str:
    return "".join(
        f'<th class="sortable{" num" if num else ""}" scope="col">{html.escape(name)}</th>'
        for name, num in columns
    )


def _options(name: str, label: str, values: Sequence[str]) -> str:
    opts = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in sorted(set(values)))
    return f'<label>{label} <select name="{name}"><option value="">all</option>{opts}</select></label>'


OFFER_COLUMNS = (
    ("cloud", False), ("region", False), ("zone", False), ("instance", False), ("GPU", False),
    ("n", True), ("GiB/GPU", True), ("GB/s", True), ("FP8", False), ("NVLink", False), ("market", False),
    ("$/h", True), ("$/GiB-h", True), ("$/(GB/s)-h", True), ("billing", False), ("source", False), ("as of", False),
)  # fmt: skip


def offers_page(offers: Sequence[Offer], rates: dict[str, CloudRates], catalog: Catalog) -> str:
    """The comparison table with sorting and filters, and two charts ($/h against VRAM per GPU
    and against memory bandwidth) with one point per instance type and market (its cheapest
    region), coloured by GPU."""
    rows = []
    for o in offers:
        it, gpu = o.instance, o.instance.gpu
        vram = gpu.memory_gib * it.gpu_count
        bandwidth = gpu.bandwidth_gbps * it.gpu_count
        r = rates.get(it.cloud)
        billing = f"{r.billing_increment_s:g}s, min {r.billing_minimum_s:g}s" if r else ""
        rows.append(
            f'<tr data-cloud="{it.cloud}" data-region="{html.escape(o.region)}" data-gpu="{html.escape(gpu.name)}" '
            f'data-vram="{gpu.memory_gib:.1f}" data-fp8="{"yes" if gpu.fp8 else "no"}" '
            f'data-nvlink="{"yes" if it.nvlink else "no"}" data-market="{o.market}" '
            f'data-key="{html.escape(f"{it.cloud}/{it.name}/{o.market}")}">'
            + _cell(it.cloud, it.cloud)
            + _cell(o.region, o.region)
            + _cell(o.zone or "-", o.zone or "")
            + _cell(it.name, it.name)
            + _cell(gpu.name, gpu.name)
            + _cell(str(it.gpu_count), it.gpu_count, True)
            + _cell(f"{gpu.memory_gib:.1f}", round(gpu.memory_gib, 2), True)
            + _cell(f"{gpu.bandwidth_gbps:g}", gpu.bandwidth_gbps, True)
            + _cell("yes" if gpu.fp8 else "no", int(gpu.fp8))
            + _cell("yes" if it.nvlink else "no", int(it.nvlink))
            + _cell(o.market, o.market)
            + _cell(f"${o.hourly_usd:,.3f}", o.hourly_usd, True)
            + _cell(f"${o.hourly_usd / vram:.4f}", round(o.hourly_usd / vram, 6), True)
            + _cell(f"${o.hourly_usd / bandwidth * 1000:.4f}/1k", round(o.hourly_usd / bandwidth, 8), True)
            + _cell(billing, billing)
            + _cell(o.source, o.source)
            + _cell(o.as_of, o.as_of)
            + "</tr>"
        )
    cheapest: dict[tuple[str, str, str], Offer] = {}
    for o in offers:
        key = (o.cloud, o.instance.name, o.market)
        if key not in cheapest or o.hourly_usd < cheapest[key].hourly_usd:
            cheapest[key] = o

    def points(x_of: str) -> list[Point]:
        out = []
        for (cloud, name, market), o in sorted(cheapest.items()):
            gpu = o.instance.gpu
            x = gpu.memory_gib if x_of == "vram" else gpu.bandwidth_gbps
            label = (
                f"{cloud} {name} ({o.instance.gpu_count}×{gpu.name}), {market}: ${o.hourly_usd:,.2f}/h "
                f"in {o.region}"
            )
            out.append(Point(x, o.hourly_usd, label, gpu.name, f"{cloud}/{name}/{market}"))
        return out

    charts = scatter(
        points("vram"),
        chart_id="chart-vram",
        title="$/h against memory per GPU",
        x_label="GiB per GPU",
        y_label="$ an hour (log)",
        log_y=True,
    ) + scatter(
        points("bandwidth"),
        chart_id="chart-bandwidth",
        title="$/h against memory bandwidth per GPU",
        x_label="GB/s per GPU",
        y_label="$ an hour (log)",
        log_y=True,
    )
    filters = (
        '<form id="filters">'
        + _options("cloud", "cloud", [o.cloud for o in offers])
        + _options("region", "region", [o.region for o in offers])
        + _options("gpu", "GPU", [o.instance.gpu.name for o in offers])
        + '<label>min GiB/GPU <input name="min_vram" type="number" min="0" step="1" value="0"></label>'
        + '<label><input name="fp8" type="checkbox" value="1"> FP8</label>'
        + '<label><input name="nvlink" type="checkbox" value="1"> NVLink</label>'
        + '<label><input name="spot" type="checkbox" value="1"> spot only</label></form>'
    )
    body = (
        "<h1>GPU offers</h1>"
        f'<p class="muted">{len(offers)} offers from the catalog {html.escape(catalog.source or catalog.path)}, '
        f"as of {html.escape(catalog.as_of)}. Every price names its source and date; click a column "
        "to sort, hover a point to name it.</p>"
        f'{filters}<p id="count">{len(offers)} offers shown</p>'
        f'<div class="charts">{charts}</div>'
        f'<table id="offers" class="sortable"><thead><tr>{_head(OFFER_COLUMNS)}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return _page("gpufit offers", body)


def _terms_table(terms: Sequence[Term]) -> str:
    from cli.render import number

    rows = "".join(
        f'<tr><td>{html.escape(t.name)}</td><td class="num">{html.escape(number(t.value))}</td>'
        f'<td>{html.escape(t.unit)}</td><td class="muted">{html.escape(t.formula)}</td></tr>'
        for t in terms
    )
    return f'<table><thead><tr><th>term</th><th class="num">value</th><th>unit</th><th>formula</th></tr></thead><tbody>{rows}</tbody></table>'


def plan_page(plan: Plan, feasible: Sequence[Candidate]) -> str:
    """The plan report: the choice, its cost as a stacked bar, the requirements arithmetic, the
    rejections by filter, and every feasible offer's total cost against job hours (tokens/s per
    stream when serving), the Pareto frontier drawn and the choice highlighted."""
    from cli.render import fleet_line, money, serve_lines
    from selector.units import format_hours

    spec, req, choice = plan.spec, plan.requirements, plan.choice
    serving = spec.task == "serve"
    parts = [f"<h1>gpufit plan: {html.escape(spec.name)}</h1>"]
    parts.append(
        f'<p class="muted">{html.escape(spec.task)} {html.escape(req.arch.name)} in {html.escape(spec.precision)}; '
        f"catalog {html.escape(plan.catalog.source or plan.catalog.path)} as of {html.escape(plan.catalog.as_of)}; "
        f"{plan.feasible} of {plan.considered} offers feasible.</p>"
    )
    if choice is None:
        verdict = "over budget" if plan.status == "over-budget" else "nothing feasible"
        parts.append(f'<p class="warn"><strong>No choice: {verdict}.</strong></p>')
    else:
        o, shape, cost = choice.offer, choice.shape, choice.cost
        it = o.instance
        facts = [
            ("choice", f"{it.cloud} {it.name} × {shape.instances} in {o.zone or o.region}, {o.market}"),
            (
                "GPUs",
                f"{it.gpu_count}×{it.gpu.name} ({it.gpu.memory_gib:.1f} GiB, {it.gpu.bandwidth_gbps:g} GB/s)",
            ),
            (
                "layout",
                f"TP {shape.tensor_parallel}, {shape.gpus_per_replica} GPU(s) per replica, {shape.replicas} replica(s)",
            ),
            ("$/h", money(cost.hourly_usd)),
            ("total", f"{money(cost.total_usd)} over {format_hours(cost.hours)}"),
            ("price", f"{o.source}, as of {o.as_of}"),
            ("fleet", fleet_line(plan)),
            *[("serve", line) for line in serve_lines(plan)],
        ]
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts)
        parts.append(f'<h2>Choice</h2><table id="choice">{rows}</table>')
        breakdown = [
            ("compute", cost.compute_usd),
            ("disks", cost.disk_usd),
            ("bucket", cost.bucket_usd),
            ("egress", cost.egress_usd),
            ("dataset transfer", cost.data_transfer_usd),
        ]
        parts.append(
            "<h2>Cost</h2>"
            + stacked_bar(
                [(k, v) for k, v in breakdown if v > 0],
                chart_id="chart-cost",
                title=f"{money(cost.total_usd)} in all",
            )
        )
    points = []
    for c in feasible:
        x = (c.shape.tokens_per_s_per_stream or 0.0) if serving else c.cost.hours
        it = c.offer.instance
        is_choice = choice is not None and c.offer.key == choice.offer.key
        label = (
            f"{it.cloud} {it.name} × {c.shape.instances} in {c.offer.zone or c.offer.region}, {c.offer.market}: "
            f"{money(c.cost.total_usd)}, " + (f"{x:.1f} tok/s per stream" if serving else format_hours(x))
        )
        points.append(
            Point(x, c.cost.total_usd, label, it.gpu.name, "/".join(map(str, c.offer.key)), is_choice)
        )
    front = pareto(points, more_x_is_better=serving)
    parts.append(
        "<h2>Every feasible offer</h2>"
        '<p class="muted">Dashed: the Pareto frontier (no offer is both cheaper and '
        + ("faster per stream" if serving else "quicker")
        + "); the ringed point is the choice. Hover a point to name it.</p>"
        + scatter(
            points,
            chart_id="chart-pareto",
            title="Expected total cost against " + ("tokens/s per stream" if serving else "job hours"),
            x_label="tokens/s per stream" if serving else "hours, spot rework included",
            y_label="expected total, $ (log)",
            log_y=True,
            frontier=front,
        )
    )
    parts.append("<h2>Requirements</h2>" + _terms_table(req.terms))
    if choice is not None:
        parts.append(
            f"<h2>Fit on {html.escape(choice.offer.instance.name)}</h2>" + _terms_table(choice.shape.terms)
        )
    if plan.rejections:
        rows = "".join(
            f'<tr><td>{html.escape(name)}</td><td class="num">{n}</td><td>{html.escape(plan.rejection_examples[name])}</td></tr>'
            for name, n in sorted(plan.rejections.items(), key=lambda kv: -kv[1])
        )
        parts.append(
            f'<h2>Rejected by filter</h2><table id="rejections"><thead><tr><th>filter</th><th class="num">offers</th>'
            f"<th>for example</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return _page(f"gpufit plan: {spec.name}", "".join(parts))
