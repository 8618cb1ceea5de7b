"""Self-contained HTML pages: the offers comparison (``gpufit offers --html``) and the plan
report (``gpufit plan --html``). Inline CSS, inline JavaScript, inline SVG charts
(``cli.svg``): nothing is fetched when the page is viewed.

The offers table has one row per cloud, instance type, region and market (``offer_groups``):
AWS prices spot per zone, so a region's zones are one row with their count, the range of
their prices (sorted by the cheapest) and each zone's price in the zones cell's tooltip. With
every region and zone of both clouds that is ~2,200 rows; written out as table markup they
would take ~1.3 MB even so, because each row repeats its instance type's specs, so the page
carries the rows as compact JSON (instance types, regions, zones, sources and dates written
once, each row as indices and prices) and its script writes the table when the page opens.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

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
  var data=document.getElementById('offers-data');
  if(data){drawOffers(JSON.parse(data.textContent));}
  function esc(s){return String(s).replace(/[&<>"]/g,function(c){
    return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
  function td(text,sort,num){var v=String(sort)===String(text)?'':' data-v="'+esc(sort)+'"';
    return '<td'+(num?' class="num"':'')+v+'>'+esc(text)+'</td>';}
  function usd(v,d){return v.toLocaleString('en-US',{minimumFractionDigits:d,maximumFractionDigits:d});}
  function drawOffers(d){
    var out=[];
    d.rows.forEach(function(r){
      var t=d.types[r[0]],cloud=t[0],name=t[1],gpu=t[2],n=t[3],gib=t[4],gbps=t[5],fp8=t[6],nvl=t[7];
      var region=d.regions[r[1]],market=r[2]?'spot':'on-demand',lo=Infinity,hi=0,zones={},count=0,tips=[];
      r[3].forEach(function(o){
        lo=Math.min(lo,o[0]);hi=Math.max(hi,o[0]);
        var names=o[1].map(function(i){return d.zones[i];});
        names.forEach(function(z){if(!zones[z]){zones[z]=1;count++;}});
        tips.push((names.length?names.join(', '):'zones not known')+': $'+o[0]);
      });
      var vram=gib*n,bw=gbps*n,price=lo===hi?'$'+usd(lo,3):'$'+usd(lo,3)+'\u2013'+usd(hi,3);
      var why=r[7]>=0?d.reasons[r[7]]:'';if(why){price='('+price+') not priced';}
      out.push('<tr data-cloud="'+cloud+'" data-region="'+esc(region)+'" data-gpu="'+esc(gpu)
        +'" data-vram="'+gib.toFixed(1)+'" data-fp8="'+(fp8?'yes':'no')+'" data-nvlink="'+(nvl?'yes':'no')
        +'" data-market="'+market+'" data-offers="'+r[3].length+'" data-key="'+esc(cloud+'/'+name+'/'+market)+'">'
        +td(cloud,cloud)+td(region,region)
        +'<td class="num zones" title="'+esc(tips.join('; '))+'"'+(count?'':' data-v="0"')+'>'+(count||'-')+'</td>'
        +td(name,name)+td(gpu,gpu)+td(String(n),n,1)+td(gib.toFixed(1),Math.round(gib*100)/100,1)
        +td(String(gbps),gbps,1)+td(fp8?'yes':'no',fp8)+td(nvl?'yes':'no',nvl)+td(market,market)
        +td(price,lo,1)+td('$'+(lo/vram).toFixed(4),Math.round(lo/vram*1e6)/1e6,1)
        +td('$'+(lo/bw*1000).toFixed(4)+'/1k',Math.round(lo/bw*1e8)/1e8,1)
        +td(d.billing[cloud]||'',d.billing[cloud]||'')+td(d.sources[r[4]],d.sources[r[4]])
        +td(d.dates[r[5]],d.dates[r[5]])+td(d.levels[r[6]],d.levels[r[6]])
        +'<td class="why" title="'+esc(why)+'">'+esc(why)+'</td></tr>');
    });
    document.querySelector('#offers tbody').innerHTML=out.join('');
  }
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
    var offers=0;
    document.querySelectorAll('#offers tbody tr').forEach(function(tr){
      var d=tr.dataset;var ok=(!f.get('cloud')||d.cloud===f.get('cloud'))
        &&(!f.get('region')||d.region===f.get('region'))&&(!f.get('gpu')||d.gpu===f.get('gpu'))
        &&(parseFloat(d.vram)>=(parseFloat(f.get('min_vram'))||0))
        &&(!f.get('fp8')||d.fp8==='yes')&&(!f.get('nvlink')||d.nvlink==='yes')
        &&(!f.get('spot')||d.market==='spot');
      tr.hidden=!ok;if(ok){shown++;offers+=Number(d.offers);keys[d.key]=true;}
    });
    document.querySelectorAll('circle.mark').forEach(function(c){
      c.style.display=keys[c.getAttribute('data-key')]?'':'none';});
    document.getElementById('count').textContent=shown+' rows shown ('+offers+' offers)';
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
    ("cloud", False), ("region", False), ("zones", True), ("instance", False), ("GPU", False),
    ("n", True), ("GiB/GPU", True), ("GB/s", True), ("FP8", False), ("NVLink", False), ("market", False),
    ("$/h", True), ("$/GiB-h", True), ("$/(GB/s)-h", True), ("billing", False), ("source", False), ("as of", False),
    ("capacity", False), ("not priced because", False),
)  # fmt: skip


@dataclass(frozen=True)
class OfferGroup:
    """The offers of one instance type in one region and market: one per zone where the price
    is a zone's own (AWS spot), else one region-level offer; the cheapest first."""

    offers: tuple[Offer, ...]

    @property
    def cheapest(self) -> Offer:
        return self.offers[0]


def offer_groups(offers: Sequence[Offer]) -> list[OfferGroup]:
    """``offers`` grouped by (cloud, instance type, region, market), each group in the order of
    its first offer, its offers cheapest first."""
    groups: dict[tuple[str, str, str, str, bool], list[Offer]] = {}
    for o in offers:
        groups.setdefault((o.cloud, o.instance.name, o.region, o.market, bool(o.unpriced)), []).append(o)
    return [OfferGroup(tuple(sorted(g, key=lambda o: o.hourly_usd))) for g in groups.values()]


def offers_data(groups: Sequence[OfferGroup], rates: dict[str, CloudRates]) -> dict[str, Any]:
    """The table's rows for the page's script, each string written once: ``types`` (cloud,
    name, GPU, GPUs, GiB per GPU, GB/s per GPU, FP8, NVLink), ``regions``, ``zones``,
    ``sources``, ``dates``, ``billing`` by cloud, and ``rows``: [type, region, spot (0/1),
    [[price, [zone, ...]], ...] one per offer, source, date, obtainability level, why the
    prices are not used (-1: priced)] (source, date and level the cheapest's)."""
    from selector.obtainability import obtainability

    tables: dict[str, dict[Any, int]] = {
        "types": {}, "regions": {}, "zones": {}, "sources": {}, "dates": {}, "levels": {}, "reasons": {},
    }  # fmt: skip

    def index(table: str, value: Any) -> int:
        return tables[table].setdefault(value, len(tables[table]))

    rows = []
    for g in groups:
        first = g.cheapest
        it, gpu = first.instance, first.instance.gpu
        kind = (it.cloud, it.name, gpu.name, it.gpu_count, round(gpu.memory_gib, 2), gpu.bandwidth_gbps)
        rows.append(
            [
                index("types", (*kind, int(gpu.fp8), int(it.nvlink))),
                index("regions", first.region),
                int(first.market == "spot"),
                [[o.hourly_usd, [index("zones", z) for z in o.zones]] for o in g.offers],
                index("sources", first.source),
                index("dates", first.as_of),
                index("levels", "-" if first.unpriced else obtainability(first).level),
                index("reasons", "; ".join(sorted({o.unpriced for o in g.offers}))) if first.unpriced else -1,
            ]
        )
    billing = {
        cloud: f"{r.billing_increment_s:g}s, min {r.billing_minimum_s:g}s"
        for cloud, r in sorted(rates.items())
    }
    return {**{name: list(values) for name, values in tables.items()}, "billing": billing, "rows": rows}


def _json_script(element_id: str, data: Any) -> str:
    """``data`` as an inline JSON data block (every ``<`` escaped, so that no text in it can end
    the element or open a comment)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def offers_page(offers: Sequence[Offer], rates: dict[str, CloudRates], catalog: Catalog, today: date) -> str:
    """The comparison table, one row per instance type, region and market with its zones and
    their price range, with sorting and filters; and two charts ($/h against VRAM per GPU and
    against memory bandwidth) with one point per instance type and market (its cheapest
    region and zone), coloured by GPU."""
    groups = offer_groups(offers)
    cheapest: dict[tuple[str, str, str], Offer] = {}
    for o in offers:
        if o.unpriced:
            continue
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
                f"in {o.zone or o.region}"
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
    shown = f"{len(groups)} rows shown ({len(offers)} offers)"
    from selector.freshness import price_ages

    ages = price_ages(o.as_of for o in offers if not o.unpriced)
    warning = ages.warning(today) if ages is not None else None
    unpriced = sum(1 for o in offers if o.unpriced)
    body = (
        "<h1>GPU offers</h1>"
        + (f'<p class="warn" id="stale">Warning: {html.escape(warning)}</p>' if warning else "")
        + f'<p class="muted">{len(offers)} offers ({unpriced} kept but not priced, the reason in the last '
        f"column) from the catalog {html.escape(catalog.source or catalog.path)} (built "
        f"{html.escape(catalog.as_of)}; {html.escape(ages.describe(today) if ages else 'no prices')}), in "
        f"{len(groups)} rows: one per instance type, region and "
        "market. Where the price differs by zone (AWS spot) a row spans the region's zones: $/h is "
        "the cheapest zone's price (what the row sorts by) and the range runs to the dearest; hover "
        "the zones count to see each zone's price. Every price names its source and date; click a "
        "column to sort, hover a point to name it.</p>"
        f'{filters}<p id="count">{shown}</p>'
        f'<div class="charts">{charts}</div>'
        f'<table id="offers" class="sortable"><thead><tr>{_head(OFFER_COLUMNS)}</tr></thead><tbody></tbody></table>'
        '<noscript><p class="warn">The table is written by the page\'s script: allow JavaScript to see it.</p></noscript>'
        + _json_script("offers-data", offers_data(groups, rates))
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


def plan_page(plan: Plan, feasible: Sequence[Candidate], today: date) -> str:
    """The plan report: the choice, its cost as a stacked bar, the requirements arithmetic, the
    rejections by filter, and every feasible offer's total cost against job hours (tokens/s per
    stream when serving), the Pareto frontier drawn and the choice highlighted."""
    from cli.render import breadth_line, capacity_line, fleet_line, money, prices_line
    from cli.serve_text import serve_lines
    from selector.units import format_hours

    spec, req, choice = plan.spec, plan.requirements, plan.choice
    serving = spec.task == "serve"
    parts = [f"<h1>gpufit plan: {html.escape(spec.name)}</h1>"]
    warning = plan.price_ages.warning(today) if plan.price_ages is not None else None
    if warning:
        parts.append(f'<p class="warn" id="stale">Warning: {html.escape(warning)}</p>')
    parts.append(
        f'<p class="muted">{html.escape(spec.task)} {html.escape(req.arch.name)} in {html.escape(spec.precision)}; '
        f"catalog {html.escape(plan.catalog.source or plan.catalog.path)} (built {html.escape(plan.catalog.as_of)}); "
        f"{html.escape(prices_line(plan, today))}; {plan.feasible} of {plan.considered} offers feasible.</p>"
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
            ("capacity", capacity_line(plan, today)),
            ("price", f"{o.source}, as of {o.as_of}"),
            ("fleet", fleet_line(plan)),
            *([("breadth", breadth)] if (breadth := breadth_line(plan)) is not None else []),
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
        # no key: nothing on this page hides marks, and a key each would add ~50 bytes a mark
        points.append(Point(x, c.cost.total_usd, label, it.gpu.name, highlight=is_choice))
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
