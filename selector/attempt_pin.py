"""``placement.attempt``: while ``gpufit up`` tries a fallback its first plan listed (a
multi-node replica's next type, ``selector.fallbacks.attempt_shape``), the plan may use only
that offer, so the Pulumi program deploys exactly the fallback the plan showed: its type,
region, zone and market, and so its nodes and price. The pin stays in the stack's config after
that attempt came into service, so a plain ``pulumi up`` keeps its nodes; the next ``gpufit up``
clears it and starts from the spec's own plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from selector.catalog import Catalog, Offer
from selector.sizing import Rejection
from selector.spec import AttemptSpec

CLEAR_PIN = "pulumi config rm --path gpufit:workload.placement.attempt"
"""How a user clears the pin by hand (the key ``gitops.automation.ATTEMPT_KEY`` writes)."""


def pin_note(pin: AttemptSpec | None) -> str | None:
    """What a plan of a pinned spec says: whose pin it is, what it holds, how it goes."""
    if pin is None:
        return None
    return (
        f"placement.attempt pins this stack to {pin.label}, the listed fallback `gpufit up` "
        "deployed: this plan (and `pulumi up`) uses only that offer, without fallbacks, so the "
        "running attempt's nodes stay; the next `gpufit up` clears the pin and starts from the "
        f"full plan and its listed fallbacks; to clear it by hand: `{CLEAR_PIN}`"
    )


def held(pin: AttemptSpec | None, offers: tuple[Offer, ...]) -> tuple[Offer, ...]:
    """``offers`` less those the pin does not name (all of them when there is no pin)."""
    if pin is None:
        return offers
    return tuple(o for o in offers if pin.holds(o.cloud, o.region, o.zone, o.instance.name, o.market))


def pinned_catalog(
    catalog: Catalog, pin: AttemptSpec | None, reject: Callable[[Rejection, int], None]
) -> Catalog:
    """``catalog`` with only the pinned offer; the others counted as placement rejections."""
    kept = held(pin, catalog.offers)
    if pin is None or len(kept) == len(catalog.offers):
        return catalog
    reject(
        Rejection("placement", f"pinned by `gpufit up` to {pin.label} (placement.attempt)"),
        len(catalog.offers) - len(kept),
    )
    return replace(catalog, offers=kept)
