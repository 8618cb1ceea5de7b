"""The plan-to-deployment translation shared by both clouds: deadlines, fleets, expiry
encodings. (What the machine does with a deployment is proven by running its boot script:
tests/machine/.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from deployment import (
    deployment_from_plan,
    gcp_label_time,
    iso_utc,
    lifetime_hours,
    parse_gcp_label_time,
    parse_iso_utc,
)
from selector.catalog import load_catalog
from selector.select import plan
from selector.spec import load_spec
from tests.conftest import ROOT
from tests.machine.plans import MULTI_NODE, NOW, deployment

CATALOG = load_catalog()


def test_lifetime_follows_ttl_duration_or_job_hours() -> None:
    _, guanaco = deployment("guanaco-65b")
    assert lifetime_hours(guanaco) == 48  # teardown.ttl
    _, chat = deployment("llama70b-chat")
    assert lifetime_hours(chat) == 720  # duration
    spec = load_spec(ROOT / "examples" / "guanaco-65b.yaml").model_copy(update={"teardown": None})
    no_ttl = plan(spec, CATALOG)
    assert no_ttl.choice is not None
    assert lifetime_hours(no_ttl) == pytest.approx(no_ttl.choice.cost.hours * 1.5 + 1)


def test_deployment_carries_the_plan() -> None:
    d, result = deployment("llama8b-fp8")
    assert result.choice is not None
    assert (d.cloud, d.region, d.instance_type, d.market) == (
        result.choice.offer.cloud,
        result.choice.offer.region,
        result.choice.offer.instance.name,
        result.choice.offer.market,
    )
    assert d.nodes == result.choice.shape.instances and d.nodes_per_replica == 1
    assert d.tags()["gpufit:expires-at"] == iso_utc(d.expires_at)
    assert d.labels()["gpufit-expires-at"] == gcp_label_time(d.expires_at)
    assert [d.role(i) for i in range(3)] == [(0, 0), (0, 1), (0, 2)]


def test_expiry_encodings_round_trip() -> None:
    moment = datetime(2026, 12, 4, 13, 5, 9, tzinfo=UTC)
    assert parse_iso_utc(iso_utc(moment)) == moment
    assert gcp_label_time(moment) == "2026-12-04t13-05-09z"
    assert parse_gcp_label_time(gcp_label_time(moment)) == moment
    for bad in ("2026-12-04", "tomorrow"):
        with pytest.raises(ValueError):
            parse_iso_utc(bad)
    with pytest.raises(ValueError):
        parse_gcp_label_time("2026-12-04T13:05:09Z")


def test_deadline_must_follow_creation() -> None:
    _, result = deployment("sdxl-batch")
    with pytest.raises(ValueError, match="not after"):
        deployment_from_plan(
            result, stack="s", project="p", created_at=NOW, expires_at=NOW - timedelta(hours=1)
        )


def test_a_clock_deadline_is_kept_by_later_updates_and_a_pinned_one_moves() -> None:
    from providers.base import DEADLINE_PROPERTIES, deadline_ignore_changes

    d, result = deployment("guanaco-65b")
    assert not d.deadline_pinned and deadline_ignore_changes(d) == list(DEADLINE_PROPERTIES)
    assert {"tags", "labels", "userData", "metadata", "scheduleExpression"} <= set(DEADLINE_PROPERTIES)
    pinned = deployment_from_plan(
        result, stack="dev", project="gpufit", created_at=NOW, expires_at=NOW + timedelta(hours=5)
    )
    assert pinned.deadline_pinned and deadline_ignore_changes(pinned) == []


def test_deployment_carries_the_fleet_in_plan_order() -> None:
    d, result = deployment("sdxl-batch")
    assert d.grouped
    assert [m.instance_type for m in d.members] == [
        result.choice.offer.instance.name,  # type: ignore[union-attr]
        *(f.offer.instance.name for f in result.fallbacks),
    ]
    # a batch fleet of several sizes: each machine counts for the replicas it holds
    assert [m.weighted_capacity for m in d.members] == [
        result.choice.shape.replicas_per_instance,  # type: ignore[union-attr]
        *(f.weighted_capacity for f in result.fallbacks),
    ]
    assert {m.weighted_capacity for m in d.members} == {1, 4, 8}
    assert d.capacity_units == result.fleet_units
    multi, _ = deployment("llama70b-full-ft", **MULTI_NODE)
    assert multi.nodes_per_replica == 2 and not multi.grouped
    # the stack's own plan: two 8 × H200 spot nodes as instances (p6-b200 spot, unconfirmed, may
    # never launch: review of issue 25, finding 2)
    single, _ = deployment("llama70b-full-ft")
    assert single.nodes_per_replica == 2 and not single.grouped
