"""A fake ``gcloud`` for shell outputs that list a MIG's instances: it logs every call and
answers ``compute instance-groups managed list-instances GROUP`` from compute.v1
``ManagedInstance`` records the way gcloud does (``--filter`` before ``--limit``; a ``value()``
projection prints fields TAB-separated, a field the record lacks as empty). Only the filter
and projection forms gpufit's outputs may use are understood; any other form fails loudly
rather than being answered leniently.

gcloud semantics: https://cloud.google.com/sdk/gcloud/reference/topic/filters (``--filter`` is
applied before ``--limit``), https://cloud.google.com/sdk/gcloud/reference/topic/formats
(``value()``: "CSV with no heading and <TAB> separator"), ``basename()``/``scope()``/
``segment()`` as in googlecloudsdk/core/resource/resource_transform.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

SCRIPT = """#!{python}
import sys
sys.path.insert(0, {root!r})
from tests.fake_gcloud import main
sys.exit(main(sys.argv[1:], {records!r}, {log!r}))
"""


def install(where: Path, records: dict[str, list[dict[str, Any]]]) -> Path:
    """Write ``gcloud`` into ``where`` answering from ``records`` (group name -> its managed
    instances); returns the call log's path."""
    log = where / "gcloud-calls"
    data = where / "gcloud-records.json"
    data.write_text(json.dumps(records))
    fake = where / "gcloud"
    root = str(Path(__file__).resolve().parents[1])
    fake.write_text(SCRIPT.format(python=sys.executable, root=root, records=str(data), log=str(log)))
    fake.chmod(0o755)
    return log


def _project(record: dict[str, Any], field: str) -> str:
    match = re.fullmatch(r"([a-zA-Z.]+?)((?:\.(?:basename|scope|segment)\(\d*\))*)", field)
    if match is None:
        raise SystemExit(f"fake gcloud: projection {field!r} not understood")
    value: Any = record
    for key in match.group(1).split("."):
        value = value.get(key) if isinstance(value, dict) else None
    for name, arg in re.findall(r"\.(basename|scope|segment)\((\d*)\)", match.group(2)):
        if not value:
            return ""
        text = str(value)
        if name == "basename":
            value = text.rstrip("/").split("/")[-1]
        elif name == "scope":
            scoped = [text.split(f"/{s}/")[-1] for s in ("regions", "zones") if f"/{s}/" in text]
            value = scoped[0] if scoped else text.split("/")[-1]
        else:
            value = text.split("/")[int(arg or -1)]
    return "" if value is None else str(value)


def main(argv: list[str], records_path: str, log_path: str) -> int:
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(" ".join(argv) + "\n")
    if argv[:4] != ["compute", "instance-groups", "managed", "list-instances"]:
        return 0
    records = json.loads(Path(records_path).read_text())
    found = list(records.get(argv[4], []))
    options = dict(a.split("=", 1) if "=" in a else (a, "") for a in argv[5:] if a.startswith("--"))
    rest = argv[5:]
    for flag in ("--region", "--limit"):
        if flag in rest:
            options[flag] = rest[rest.index(flag) + 1]
    if "--filter" in options:
        term = re.fullmatch(r"(\w+)=(\w+)", options["--filter"])
        if term is None:
            raise SystemExit(f"fake gcloud: filter {options['--filter']!r} not understood")
        found = [r for r in found if str(r.get(term.group(1), "")) == term.group(2)]
    if "--limit" in options:
        found = found[: int(options["--limit"])]
    form = re.fullmatch(r"value\((.*)\)", options.get("--format", ""))
    if form is None:
        raise SystemExit(f"fake gcloud: format {options.get('--format')!r} not understood")
    for record in found:
        print("\t".join(_project(record, f) for f in form.group(1).split(",")))
    return 0
