"""Which markets a workload may buy in, and the on-demand base a spot serving fleet keeps."""

from __future__ import annotations

import math

from selector.catalog import Catalog, Offer
from selector.sizing import Rejection, Shape
from selector.spec import WorkloadSpec

ON_DEMAND_BASE_UNSUPPORTED = frozenset({"gcp"})
"""Clouds whose fleet cannot mix provisioning models: a GCP managed instance group's instance
template is either SPOT or STANDARD."""


def market_preference(spec: WorkloadSpec, market: str) -> int | None:
    """None = not allowed; lower ranks first. none → on-demand only; stateless and
    checkpointed → both, by expected cost (obtainability included: a spot price whose capacity
    cannot be had no longer wins by preference)."""
    if spec.fault_tolerance == "none":
        return 0 if market == "on-demand" else None
    return 0


def on_demand_base(
    spec: WorkloadSpec, offer: Offer, shape: Shape, catalog: Catalog
) -> tuple[int, float] | Rejection:
    """(instances kept on-demand, their $/h) of a spot serving fleet: ``serving.on_demand_base``
    replicas (by default one when the endpoint runs two or more: a single replica on spot is
    what ``fault_tolerance: stateless`` asked for), in whole instances, at the type's on-demand
    price in the region; a Rejection when the fleet cannot keep them (see the README's
    "serving.on_demand_base")."""
    given = spec.serving.on_demand_base if spec.serving is not None else 0
    wanted = given if given is not None else (1 if shape.replicas >= 2 else 0)
    if spec.task != "serve" or offer.market != "spot" or wanted == 0:
        return (0, 0.0)
    if shape.nodes_per_replica > 1:
        if given is None:
            return (0, 0.0)
        return Rejection(
            "market",
            f"serving.on_demand_base {wanted}: a replica spans {shape.nodes_per_replica} nodes, run as "
            "plain instances with no fleet to keep a base in (set serving.on_demand_base: 0 to serve "
            "from spot alone)",
        )
    it = offer.instance
    instances = math.ceil(min(wanted, shape.replicas) / shape.replicas_per_instance)
    if instances >= shape.instances:
        return Rejection(
            "market",
            f"serving.on_demand_base {wanted} keeps all {shape.replicas} replica(s) on-demand: "
            "the on-demand offer prices that fleet",
        )
    if it.cloud in ON_DEMAND_BASE_UNSUPPORTED:
        return Rejection(
            "market",
            f"serving.on_demand_base {wanted}: a {it.cloud} managed instance group runs one provisioning "
            "model, so spot replicas cannot keep an on-demand base (set serving.on_demand_base: 0 to "
            "serve from spot alone)",
        )
    price = catalog.on_demand_prices.get((it.cloud, it.name, offer.region))
    if price is None:
        return Rejection(
            "market",
            f"serving.on_demand_base {wanted}: {it.name} has no on-demand offer in {offer.region} "
            "to keep the base on",
        )
    return (instances, price)


NO_BASE: tuple[int, float] = (0, 0.0)
