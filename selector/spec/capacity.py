"""The spec's ``capacity`` section: committed and queued capacity a plan may use.

``blocks``: EC2 Capacity Blocks for ML (``no`` by default: a block is money paid up front);
``flex_start``: GCP Dynamic Workload Scheduler flex-start (queued, then guaranteed for the run);
``calendar``: a GCP future reservation in calendar mode from ``start_after`` (held and billed
for its whole window);
``start_after``/``start_before``: the window a block may start in; ``reservation``: capacity
the user already holds (an AWS On-Demand Capacity Reservation or resource group, a GCP
reservation), described in full because gpufit plans offline; ``overflow``: whether the catalog's
other offers stay feasible beside the reservation.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

from pydantic import Field, model_validator

from selector.spec.fields import Strict

Use = Literal["no", "allow", "prefer", "require"]

ODCR_ID = re.compile(r"cr-[0-9a-f]{17}|cr-[0-9a-f]{8}")
"""An EC2 Capacity Reservation id: ``cr-`` and 17 (or, for old ones, 8) hex digits
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html,
"CapacityReservationId ... cr-1234567890abcdef0")."""
AWS_AZ_ID = re.compile(r"[a-z]{2,5}[0-9]+-(?:[a-z]{3}[0-9]+-)?az[0-9]+")
"""An AZ ID (``use1-az2``; a Local Zone's ``usw2-lax1-az1``): the same physical zone in every
account, unlike an AZ name (https://docs.aws.amazon.com/ram/latest/userguide/working-with-az-ids.html);
``CapacityReservation.AvailabilityZoneId`` in botocore 1.44.8's ``ec2`` model."""
RESOURCE_GROUP_ARN = re.compile(
    r"arn:aws[a-z-]*:resource-groups:[a-z]{2}(?:-[a-z]+)+-[0-9]+:[0-9]{12}:group/[A-Za-z0-9_.-]{1,300}"
)
"""A resource group of Capacity Reservations (``arn:aws:resource-groups:REGION:ACCOUNT:group/NAME``,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-cr-group.html; group names take
letters, digits, ``_.-``, 1-300 characters per the Resource Groups API)."""
GCP_RESERVATION = re.compile(
    r"(?:projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
)
"""A GCP reservation name (RFC 1035, 1-63 characters), or ``projects/P/reservations/NAME`` for
a shared one (https://cloud.google.com/compute/docs/reference/rest/v1/ReservationAffinity:
"projects/different-project/reservations/some-reservation-name")."""


class ReservationSpec(Strict):
    id: str = Field(..., description="AWS: cr-… or a resource group ARN; GCP: the reservation's name")
    cloud: Literal["aws", "gcp"]
    instance_type: str = Field(..., description="the reserved machine type")
    count: int = Field(..., gt=0, le=4096, description="machines reserved")
    region: str
    zone: str | None = Field(
        None,
        description="the reservation's zone (GCP: required, its name; AWS: its AZ ID, e.g. use1-az2, "
        "which confines the fleet there)",
    )
    affinity: Literal["specific", "any"] = Field(
        "specific",
        description="GCP: consume this reservation by name (specific) or any matching one (any)",
    )

    @model_validator(mode="after")
    def _well_formed(self) -> ReservationSpec:
        if self.cloud == "aws":
            if not (ODCR_ID.fullmatch(self.id) or RESOURCE_GROUP_ARN.fullmatch(self.id)):
                raise ValueError(
                    f"id {self.id!r}: expected an AWS Capacity Reservation id (cr- and 17 hex digits) "
                    "or a resource group ARN (arn:aws:resource-groups:REGION:ACCOUNT:group/NAME)"
                )
            if self.affinity != "specific":
                raise ValueError("affinity any is GCP's; an AWS fleet targets the reservation it names")
            if self.zone is not None and not AWS_AZ_ID.fullmatch(self.zone):
                raise ValueError(
                    f"zone {self.zone!r}: expected the reservation's AZ ID (e.g. use1-az2: "
                    "AvailabilityZoneId in `aws ec2 describe-capacity-reservations`), not an AZ name"
                )
        else:
            if not GCP_RESERVATION.fullmatch(self.id):
                raise ValueError(
                    f"id {self.id!r}: expected a GCP reservation name (lowercase letters, digits, "
                    "hyphens, 1-63 characters) or projects/P/reservations/NAME"
                )
            if self.zone is None:
                raise ValueError("a GCP reservation is zonal: give its zone")
        return self

    @property
    def resource_group(self) -> bool:
        return self.id.startswith("arn:")


class CapacitySpec(Strict):
    blocks: Use = Field(
        "no",
        description="EC2 Capacity Blocks for ML: allow (ranked by cost), prefer (a block first "
        "when one fits), require (only blocks); paid up front, non-refundable",
    )
    flex_start: Use = Field(
        "no",
        description="GCP flex-start (Dynamic Workload Scheduler), jobs up to 7 days: queued until "
        "capacity, then guaranteed for the run",
    )
    calendar: Use = Field(
        "no",
        description="GCP future reservation in calendar mode, from capacity.start_after for whole days "
        "(1-90): held for the whole window and billed for it; allow (ranked by cost at an upper bound, "
        "the on-demand rate for the whole window, so it rarely wins), prefer (first when one runs the "
        "job), require (only calendar); its creation needs gpufit:createCalendarReservation: true",
    )
    start_after: date | None = Field(
        None, description="a block or calendar reservation starts on or after this date (UTC)"
    )
    start_before: date | None = Field(None, description="a block starts on or before this date (UTC)")
    reservation: ReservationSpec | None = Field(
        None, description="capacity already held: the plan runs on it (priced as paid)"
    )
    overflow: bool = Field(
        False,
        description="with a reservation: the catalog's other offers stay feasible, and a plan "
        "needing more machines than the reservation holds runs the rest on-demand beside it "
        "(AWS: the group prefers the reservation, capacity-reservations-first; GCP: one group, a "
        "reserved version and an on-demand version)",
    )

    @model_validator(mode="after")
    def _window(self) -> CapacitySpec:
        if self.start_after and self.start_before and self.start_before < self.start_after:
            raise ValueError(f"start_before {self.start_before} is before start_after {self.start_after}")
        if (self.start_after or self.start_before) and self.blocks == "no" and self.calendar == "no":
            raise ValueError(
                "start_after/start_before bound a Capacity Block or a calendar reservation: set blocks "
                "or calendar to allow, prefer or require"
            )
        if self.calendar != "no" and self.start_after is None:
            raise ValueError("calendar: a calendar-mode reservation starts on capacity.start_after: give it")
        if self.overflow and self.reservation is None:
            raise ValueError("overflow goes with a reservation")
        return self


def capacity_problems(capacity: CapacitySpec, clouds: list[str], task: str) -> list[str]:
    """What the capacity section asks that the rest of the spec rules out."""
    problems: list[str] = []
    if capacity.blocks == "require" and "aws" not in clouds:
        problems.append("capacity.blocks: require needs aws in placement.clouds (Capacity Blocks are EC2's)")
    if capacity.flex_start == "require" and "gcp" not in clouds:
        problems.append("capacity.flex_start: require needs gcp in placement.clouds (flex-start is GCP's)")
    if capacity.calendar == "require" and "gcp" not in clouds:
        problems.append("capacity.calendar: require needs gcp in placement.clouds (calendar mode is GCP's)")
    if [capacity.blocks, capacity.flex_start, capacity.calendar].count("require") > 1:
        problems.append("capacity: only one of blocks, flex_start and calendar can be require")
    if capacity.reservation is not None and capacity.reservation.cloud not in clouds:
        problems.append(
            f"capacity.reservation is {capacity.reservation.cloud}'s: placement.clouds must include it"
        )
    if task == "serve" and capacity.flex_start != "no":
        problems.append("capacity.flex_start is for jobs (flex-start VMs run at most 7 days)")
    return problems
