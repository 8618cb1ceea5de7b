"""``placement.attempt``: while ``gpufit up`` tries a fallback its first plan listed (a
multi-node replica's next type, ``selector.fallbacks.attempt_shape``), the plan may use only
that offer, so the Pulumi program deploys exactly the fallback the plan showed: its type,
region, zone and market, and so its nodes and price."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from selector.catalog import Catalog, Offer
from selector.sizing import Rejection
from selector.spec import AttemptSpec


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
        Rejection("placement", f"`gpufit up` is trying {pin.label} (placement.attempt)"),
        len(catalog.offers) - len(kept),
    )
    return replace(catalog, offers=kept)
