"""The ``gpufit`` command.

Exit codes: 0 ok; 2 invalid spec; 3 nothing feasible; 4 over budget; 5 unusable catalog;
6 catalog refresh fetched nothing useful; 7 cloud credentials or permission missing;
8 a lock is missing or stale; 9 reaping failed; 10 a sweep could not finish (a region or
instance failed); 11 a status could not be read; 12 ``gpufit status``: a job failed;
14-16 ``gpufit up`` (capacity ran out everywhere tried / fleet partly up / failed otherwise);
64 bad command line. Errors are one line per problem on stderr, never a traceback.
Cloud SDKs and pulumi are never imported on the ``plan``/``offers`` path.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from selector.model_arch import ModelArch
from cli.exit_codes import (
    BAD_CATALOG as EXIT_BAD_CATALOG,
    INFEASIBLE as EXIT_INFEASIBLE,
    INVALID_SPEC as EXIT_INVALID_SPEC,
    OK as EXIT_OK,
    OVER_BUDGET as EXIT_OVER_BUDGET,
    USAGE as EXIT_USAGE,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"gpufit: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("expected a non-negative integer")
    return value


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``only``) just one command's: building every subcommand costs
    tens of milliseconds on the cold path of ``gpufit plan``."""

    def want(*names: str) -> bool:
        return only is None or only in names

    parser = _Parser(
        prog="gpufit", description="Find the cheapest GPU instance that fits a generative-AI workload."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    if want("plan"):
        _plan_parser(sub)
    if want("offers"):
        _offers_parser(sub)
    if want("schema"):
        sc = sub.add_parser("schema", help="print the workload spec's JSON Schema")
        sc.add_argument("--stack", action="store_true", help="the schema of a Pulumi stack file instead")
    if want("presets"):
        sub.add_parser("presets", help="list the model presets with their sources")
    if want("catalog"):
        from cli import catalog_cmd

        catalog_cmd.add_parser(sub)
    if want("lock", "diff", "reap"):
        from cli import gitops_cmd

        gitops_cmd.add_parsers(sub)
    if want("sweep"):
        from cli import sweep_cmd

        sweep_cmd.add_parser(sub)
    if want("status"):
        from cli import status_cmd

        status_cmd.add_parser(sub)
    if want("up"):
        from cli import up_cmd

        up_cmd.add_parser(sub)
    if want("stacks"):
        st = sub.add_parser("stacks", help="plan every Pulumi stack file in a folder: choice and cost")
        st.add_argument("folder", nargs="?", default="stacks", help="default: stacks")
        st.add_argument("--catalog", help="snapshot, cache or a catalog file (default: the freshest valid)")
    return parser


REFRESH_HELP = (
    "model.hf: ask the Hub again instead of the cache (a branch's entry serves a day, a commit's for ever)"
)


def _plan_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="choose the cheapest feasible offer for a workload spec")
    p.add_argument("spec", help="a spec YAML file or a Pulumi stack file (stacks/Pulumi.<stack>.yaml)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (same as --format json)")
    p.add_argument(
        "--format",
        choices=["text", "json", "markdown"],
        default=None,
        help="text (default), json, or markdown for a pull-request comment",
    )
    p.add_argument("--explain", action="store_true", help="show every term with its value and formula")
    p.add_argument("--top", type=_positive_int, default=5, help="alternatives to list (default 5)")
    p.add_argument("--catalog", help="snapshot, cache or a catalog file (default: the freshest valid)")
    p.add_argument("--html", metavar="FILE", help="also write the plan report as a self-contained HTML page")
    p.add_argument("--refresh-model", action="store_true", help=REFRESH_HELP)
    p.add_argument(
        "--capacity-blocks",
        choices=["reference", "live"],
        default="reference",
        help="Capacity Block prices: reference rates (offline, default) or live offerings (AWS credentials)",
    )


def _offers_parser(sub: Any) -> None:
    o = sub.add_parser("offers", help="the comparison table of GPU offers")
    o.add_argument("--cloud", choices=["aws", "gcp"])
    o.add_argument("--region", help="region name or glob")
    o.add_argument("--gpu", help="GPU name (e.g. H100, L40S), case-insensitive")
    o.add_argument("--min-vram-gib", type=float, default=0.0, help="minimum memory per GPU")
    o.add_argument("--fp8", action="store_true", help="only GPUs with FP8 tensor cores")
    o.add_argument("--nvlink", action="store_true", help="only NVLink/NVSwitch instances")
    o.add_argument("--spot", action="store_true", help="only spot offers")
    o.add_argument("--sort", choices=["price", "vram", "bandwidth", "price-per-gib"], default="price")
    o.add_argument("--catalog", help="snapshot, cache or a catalog file (default: the freshest valid)")
    o.add_argument("--json", action="store_true", help="print a JSON list of offers")
    o.add_argument("--html", metavar="FILE", help="also write the comparison as a self-contained HTML page")
    from cli.capacity_cmd import add_offers_arguments

    add_offers_arguments(o)


def _write_page(path: str, page: str) -> bool:
    """Write an HTML page; a one-line error (False) when the file cannot be written."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(page)
    except OSError as err:
        sys.stderr.write(f"gpufit: --html {path}: {err.strerror or err}\n")
        return False
    sys.stderr.write(f"gpufit: wrote {path} ({len(page.encode()) / 1024:.0f} KiB)\n")
    return True


def _fail(lines: Sequence[str], code: int) -> int:
    """Write one line per problem (line breaks in quoted input escaped) and return ``code``."""
    from selector.spec import one_line

    for line in lines:
        sys.stderr.write(f"{one_line(line)}\n")
    return code


def cmd_plan(args: argparse.Namespace) -> int:
    from cli.catalog_choice import resolved_catalog
    from cli.clock import now
    from selector.catalog import CatalogError
    from selector.report import plan_to_dict
    from selector.select import plan
    from selector.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
    except SpecError as err:
        return _fail([f"{err.source}: {p}" for p in err.problems], EXIT_INVALID_SPEC)
    clock = now()
    today = clock.date()
    try:
        catalog = resolved_catalog(args.catalog, clock)
    except CatalogError as err:
        return _fail([f"gpufit: catalog: {err}"], EXIT_BAD_CATALOG)
    feasible: list[Any] | None = [] if args.html else None
    quotes = None
    if args.capacity_blocks == "live" and spec.capacity.blocks != "no":
        from cli.capacity_cmd import live_quotes

        quotes = live_quotes(spec, catalog, today)
    result = plan(spec, catalog, top=args.top, feasible_out=feasible, today=today, block_quotes=quotes)
    if args.html:
        from cli.pages import plan_page

        if not _write_page(args.html, plan_page(result, feasible or [], today)):
            return EXIT_USAGE
    fmt = "json" if args.json else (args.format or "text")
    if fmt == "json":
        sys.stdout.write(json.dumps(plan_to_dict(result, today), indent=2) + "\n")
    elif fmt == "markdown":
        from cli.render import render_markdown

        sys.stdout.write(render_markdown(result, today) + "\n")
    else:
        from cli.render import render_explain, render_plan

        sys.stdout.write(render_plan(result, today) + "\n")
        if args.explain:
            sys.stdout.write(render_explain(result) + "\n")
    if result.status == "ok":
        return EXIT_OK
    if fmt == "text":
        reason = "over budget" if result.status == "over-budget" else "nothing feasible"
        sys.stderr.write(f"gpufit: {spec.name}: {reason}; see the closest misses above\n")
    return EXIT_OVER_BUDGET if result.status == "over-budget" else EXIT_INFEASIBLE


def cmd_offers(args: argparse.Namespace) -> int:
    import fnmatch

    from cli.catalog_choice import resolved_catalog
    from cli.clock import now
    from selector.catalog import CatalogError
    from selector.report import offer_to_dict

    clock = now()
    try:
        catalog = resolved_catalog(args.catalog, clock)
    except CatalogError as err:
        return _fail([f"gpufit: catalog: {err}"], EXIT_BAD_CATALOG)
    if args.capacity_blocks:
        from cli.capacity_cmd import block_rows, print_blocks

        print_blocks(block_rows(args, catalog, clock.date()), args.json)
        return EXIT_OK
    gpu = args.gpu.lower() if args.gpu else None
    chosen = []
    for offer in (*catalog.offers, *catalog.unpriced):
        it = offer.instance
        if args.cloud and it.cloud != args.cloud:
            continue
        if args.region and not fnmatch.fnmatchcase(offer.region, args.region):
            continue
        if gpu and gpu not in (it.gpu.name.lower(), *(a.lower() for a in it.gpu.aliases)):
            continue
        if it.gpu.memory_gib < args.min_vram_gib:
            continue
        if (args.fp8 and not it.gpu.fp8) or (args.nvlink and not it.nvlink):
            continue
        if args.spot and offer.market != "spot":
            continue
        chosen.append(offer)
    sort_keys = {
        "price": lambda o: (o.hourly_usd, o.instance.name),
        "vram": lambda o: (-o.instance.gpu.memory_gib * o.instance.gpu_count, o.hourly_usd),
        "bandwidth": lambda o: (-o.instance.gpu.bandwidth_gbps, o.hourly_usd),
        "price-per-gib": lambda o: (
            o.hourly_usd / (o.instance.gpu_count * o.instance.gpu.memory_gib),
            o.instance.name,
        ),
    }
    chosen.sort(key=sort_keys[args.sort])
    if args.html:
        from cli.pages import offers_page
        from selector.rates import load_rates

        if not _write_page(args.html, offers_page(chosen, load_rates(), catalog, clock.date())):
            return EXIT_USAGE
    if args.json:
        rows = [offer_to_dict(o, clock.date()) for o in chosen]
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
    else:
        from cli.render import offers_footer, render_offers
        from selector.rates import load_rates

        sys.stdout.write(render_offers(chosen, load_rates()) + "\n")
        sys.stdout.write(offers_footer(chosen, catalog, clock.date()) + "\n")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from selector.spec import json_schema, stack_json_schema

    schema = stack_json_schema() if args.stack else json_schema()
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK


PRESET_GROUPS = (
    ("language", "Language models"),
    ("multimodal", "Multimodal (vision-language) models"),
    ("diffusion", "Image generation (diffusion)"),
    ("audio", "Speech recognition (encoder-decoder audio)"),
)


def cmd_presets(_: argparse.Namespace) -> int:
    """The presets grouped by what they do, each with its architecture as gpufit sizes it,
    what one batch item costs where the preset knows it, and its source."""
    from cli.render import table
    from selector.presets import arch_from_preset, preset_entry, preset_names

    groups: dict[str, list[list[str]]] = {key: [] for key, _ in PRESET_GROUPS}
    for name in preset_names():
        arch, entry = arch_from_preset(name), preset_entry(name)
        params = f"{arch.params / 1e9:.3g}B"
        if arch.is_moe:
            params += f" ({arch.params_active / 1e9:.3g}B active)"
        if arch.kind == "transformer":
            shape = f"{arch.layers}L h{arch.hidden} kv{arch.kv_heads}"
            if arch.is_mla:
                shape = f"{arch.layers}L h{arch.hidden} MLA {arch.kv_lora_rank}+{arch.qk_rope_head_dim}"
            if arch.is_moe:
                shape += f" {arch.experts}x{arch.experts_active} experts"
            if arch.sliding_window:
                shape += f" window {arch.sliding_window} on {arch.window_layers}L"
            if arch.linear_layers:
                shape += f" linear attention on {arch.linear_layers}L"
            if arch.is_multimodal:
                shape += f" + vision {arch.vision_params / 1e9:.2g}B"
        elif arch.kind == "audio":
            shape = f"{arch.encoder_layers}+{arch.layers}L enc-dec h{arch.hidden}"
        else:
            shape = "-"
        item = arch.item
        cost = f"{item.seconds:g} s/{item.unit} on {item.gpu}" if item else "-"
        group: str = "language" if arch.kind == "transformer" else arch.kind
        if arch.is_multimodal:
            group = "multimodal"
        groups.setdefault(group, []).append(
            [
                name,
                params,
                shape,
                str(arch.context or "-"),
                cost,
                *_serves(name, arch),
                entry["source_ref"]["url"],
            ]
        )
    headers = ["preset", "params", "architecture", "context", "per item", "serves", "engines", "source"]
    parts = []
    for key, title in PRESET_GROUPS:
        if groups.get(key):
            parts.append(f"{title} ({len(groups[key])})\n" + table(headers, groups[key]))
    sys.stdout.write("\n\n".join(parts) + "\n")
    return EXIT_OK


def _serves(name: str, arch: ModelArch) -> list[str]:
    """What ``serve`` pulls for a preset (bf16) and the engine releases that serve its family
    (vLLM/SGLang floor, and a ceiling where one dropped it)."""
    from selector.engines import engine_data
    from selector.served import served_model

    if arch.kind != "transformer":
        return ["-", "-"]
    repo = served_model(name, None, arch, "bf16", sized_by_hub=False).repo or "-"
    family = engine_data()["model_families"].get(arch.family) or {}
    spans = []
    for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang")):
        span = family.get(engine)
        if span:
            spans.append(f"{label} {span['since']}" + (f"-{span['until']}" if span.get("until") else "+"))
    return [repo, ", ".join(spans) or "-"]


def cmd_stacks(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cli.catalog_choice import resolved_catalog
    from cli.stacks_table import stacks_table
    from selector.catalog import CatalogError
    from selector.spec import SpecError

    try:
        catalog = resolved_catalog(args.catalog)
    except CatalogError as err:
        return _fail([f"gpufit: catalog: {err}"], EXIT_BAD_CATALOG)
    try:
        sys.stdout.write(stacks_table(Path(args.folder), catalog) + "\n")
    except SpecError as err:
        return _fail([f"{err.source}: {p}" for p in err.problems], EXIT_INVALID_SPEC)
    return EXIT_OK


def cmd_catalog(args: argparse.Namespace) -> int:
    from cli.catalog_cmd import cmd_catalog as run

    return run(args)


def cmd_gitops(args: argparse.Namespace) -> int:
    from cli import gitops_cmd

    run = {"lock": gitops_cmd.cmd_lock, "diff": gitops_cmd.cmd_diff, "reap": gitops_cmd.cmd_reap}[
        args.command
    ]
    return run(args)


def cmd_status(args: argparse.Namespace) -> int:
    from cli.status_cmd import cmd_status as run

    return run(args)


def cmd_up(args: argparse.Namespace) -> int:
    from cli.up_cmd import cmd_up as run

    return run(args)


def cmd_sweep(args: argparse.Namespace) -> int:
    from cli.sweep_cmd import cmd_sweep as run

    return run(args)


COMMANDS = {
    "plan": cmd_plan,
    "offers": cmd_offers,
    "schema": cmd_schema,
    "presets": cmd_presets,
    "stacks": cmd_stacks,
    "catalog": cmd_catalog,
    "lock": cmd_gitops,
    "diff": cmd_gitops,
    "reap": cmd_gitops,
    "sweep": cmd_sweep,
    "status": cmd_status,
    "up": cmd_up,
}


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    first = next((w for w in words if not w.startswith("-")), None)
    wants_help = any(w in ("-h", "--help") for w in words[:1])
    args = build_parser(first if first in COMMANDS and not wants_help else None).parse_args(words)
    from hub.client import fetch_model
    from selector.spec import use_hub

    # model.hf alone: sized from the Hub's config.json (cached; --refresh-model asks the Hub again)
    use_hub(partial(fetch_model, refresh=True) if getattr(args, "refresh_model", False) else fetch_model)
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `gpufit offers | head`
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
