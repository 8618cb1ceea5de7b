"""How many VMs a GCP managed instance group will hold, read from everything in the stack that
sizes it, so the budget counts a group at the VMs it will bring and not at its initial target:

- its own ``targetSize``;
- plus the ``resizeBy`` of every MIG resize request naming it (flex-start,
  https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagerResizeRequests);
- or more: the ``size`` of every Cloud Scheduler job calling the Compute API's ``resize`` on it
  (``regionInstanceGroupManagers.resize`` / ``instanceGroupManagers.resize``, query parameter
  ``size``, https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize),
  a job the pack cannot read the size of being refused;
- or more: the ``specificSkuProperties.totalCount`` of any future reservation in the stack (a
  calendar-mode request, https://cloud.google.com/compute/docs/reference/rest/v1/futureReservations):
  the VMs it delivers are the VMs the group is brought to. Every group counts it, whichever
  template targets it: a reservation's VMs are paid for whether or not they are used.

A group counted too high is the safe side of a budget: every job and reservation in the stack
that can size a group is counted against it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from policy.resources import GCP_GROUPS, GCP_SCHEDULER_JOB, as_count, as_map

Items = Iterable[tuple[str, Mapping[str, Any], str | None]]

RESIZE_PATH = re.compile(
    r"/compute/v1/projects/(?P<project>[^/]+)/(?P<kind>regions|zones)/(?P<where>[^/]+)"
    r"/instanceGroupManagers/(?P<group>[^/]+)/resize"
)
"""``regionInstanceGroupManagers.resize`` / ``instanceGroupManagers.resize``, Compute API v1
(https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers/resize)."""

GCP_RESIZE_REQUESTS = (
    "gcp:compute/regionResizeRequest:RegionResizeRequest",
    "gcp:compute/resizeRequest:ResizeRequest",
)
"""A MIG resize request (flex-start) adds ``resizeBy`` VMs to the group it names: the group's
cost counts them (its own target size stays 0)."""

GCP_FUTURE_RESERVATION = "gcp:compute/futureReservation:FutureReservation"


def resizes_to_zero(target: Mapping[str, Any], group_type: str, group: Mapping[str, Any]) -> bool:
    """A scheduler job's HTTP target is the Compute API's resize of exactly this group to 0: a
    POST to ``https://compute.googleapis.com`` (nothing else: no user info, no port), the whole
    path naming the group (regional groups under ``regions/<its region>``, zonal under
    ``zones/<its zone>``) and the query ``size=0`` alone. A URL merely ending like one (another
    host, a path that only ends in the group) is not."""
    url = urlsplit(str(target.get("uri") or ""))
    if url.scheme != "https" or url.netloc != "compute.googleapis.com" or url.fragment:
        return False
    if str(target.get("httpMethod") or "POST").upper() != "POST":
        return False
    path = RESIZE_PATH.fullmatch(url.path)
    if path is None or path["group"] != group.get("name"):
        return False
    regional = group_type == GCP_GROUPS[0]
    if path["kind"] != ("regions" if regional else "zones"):
        return False
    where = group.get("region") if regional else group.get("zone")
    if where and path["where"] != where:
        return False
    if group.get("project") and path["project"] != group.get("project"):
        return False
    return parse_qs(url.query, keep_blank_values=True, strict_parsing=False) == {"size": ["0"]}


def _scheduled_size(job: Mapping[str, Any], group: str) -> tuple[int, bool] | None:
    """A Scheduler job's resize of the group named ``group``: (size, readable), None when the job
    is no resize of it. Any host and any location count: a budget reads wide."""
    url = urlsplit(str(as_map(job.get("httpTarget")).get("uri") or ""))
    path = RESIZE_PATH.fullmatch(url.path)
    if path is None or path["group"] != group:
        return None
    sizes = parse_qs(url.query, keep_blank_values=True).get("size", [])
    size = as_count(sizes[0]) if len(sizes) == 1 and sizes[0].isdigit() else None
    return (size, True) if size is not None else (0, False)


def group_sizes(resources: Items) -> tuple[dict[str, int], list[str]]:
    """VMs per group name (only groups whose size something beyond ``targetSize`` raises) and
    the problems: a Scheduler resize whose size cannot be read."""
    items = list(resources)
    added: dict[str, int] = {}
    for typ, props, _ in items:
        if typ in GCP_RESIZE_REQUESTS:
            group = str(props.get("instanceGroupManager")).rsplit("/", 1)[-1]
            added[group] = added.get(group, 0) + (as_count(props.get("resizeBy")) or 0)
    reserved = max(
        (
            as_count(as_map(p.get("specificSkuProperties")).get("totalCount")) or 0
            for t, p, _ in items
            if t == GCP_FUTURE_RESERVATION
        ),
        default=0,
    )
    sizes: dict[str, int] = {}
    problems: list[str] = []
    jobs = [p for t, p, _ in items if t == GCP_SCHEDULER_JOB]
    for typ, props, _ in items:
        if typ not in GCP_GROUPS:
            continue
        name = str(props.get("name"))
        own = (as_count(props.get("targetSize")) or 0) + added.get(name, 0)
        scheduled = [s for s in (_scheduled_size(j, name) for j in jobs) if s is not None]
        if any(not readable for _, readable in scheduled):
            problems.append(
                f"a Cloud Scheduler job resizes the group {name!r} to a size the pack cannot read "
                "(expected one ?size=N): cannot show the group is within the budget"
            )
        size = max([own, reserved, *(s for s, _ in scheduled)])
        if size != (as_count(props.get("targetSize")) or 0):
            sizes[name] = size
    return sizes, problems
