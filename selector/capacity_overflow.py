"""Machines beyond a reservation (``capacity.overflow``): when a plan needs more machines than
the reservation holds, whether the rest can run beside it, on-demand.

On AWS the fleet is split by EC2 itself: an Auto Scaling group whose Capacity Reservation
preference is ``capacity-reservations-first`` "will try to launch instances into a Capacity
Reservation or Capacity Reservation resource group first. If capacity isn't available,
instances will run in On-Demand capacity"
(https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CapacityReservationSpecification.html;
botocore 1.44.8 ``autoscaling`` ``CapacityReservationSpecification``), and a multi-node
replica's plain instances beyond the reservation's count launch with the preference ``none``
("The instance doesn't run in a Capacity Reservation even if one is available. The instance
runs as an On-Demand Instance", botocore ``ec2`` ``CapacityReservationSpecification``). A
targeted launch alone never falls back ("capacity-reservations-only ... If capacity isn't
available, the instance will fail to launch", same model), which is why the split must be
asked for. On GCP one regional MIG carries two versions
(``providers.gcp.capacity.group_versions``): ``reserved``, ``targetSize.fixed`` = the
reservation's count, on a template with the reservation's affinity, and ``overflow`` ("all
remaining instances", compute.v1 ``InstanceGroupManager.versions``) on a template with
``NO_RESERVATION``. The overflow is priced on-demand: its machines are launched on-demand, never
spot. A cloud not in ``OVERFLOW_SPLIT_CLOUDS`` refuses a plan beyond its reservation.
"""

from __future__ import annotations

from selector.sizing import Rejection, Shape
from selector.spec import WorkloadSpec

OVERFLOW_SPLIT_CLOUDS: frozenset[str] = frozenset({"aws", "gcp"})
"""Clouds whose fleets gpufit splits across a reservation and on-demand capacity."""
CAPACITY_FILTER = "capacity"


def overflow_refusal(
    spec: WorkloadSpec, instance_type: str, shape: Shape, on_demand_usd: float | None
) -> Rejection | None:
    """Why the reservation cannot run a plan of ``shape`` on ``instance_type`` (its reserved
    type), or None when it can: the machines fit in it, or the rest run on-demand beside it
    (``capacity.overflow`` on a cloud that splits, with an on-demand price to charge them at)."""
    held = spec.capacity.reservation
    assert held is not None
    if shape.instances <= held.count:
        return None
    need = f"needs {shape.instances} × {instance_type}; reservation {held.id} holds {held.count}"
    gap = shape.instances / held.count - 1.0
    if held.cloud not in OVERFLOW_SPLIT_CLOUDS:
        other = (
            "other offers run it (capacity.overflow)"
            if spec.capacity.overflow
            else ("capacity.overflow: true lets other offers run it")
        )
        why = f"{need} and machines beyond a {held.cloud} reservation are not provisioned beside it; {other}"
        return Rejection(CAPACITY_FILTER, why, gap=gap)
    if not spec.capacity.overflow:
        rest = shape.instances - held.count
        why = f"{need}; capacity.overflow: true runs the other {rest} on-demand beside it"
        return Rejection(CAPACITY_FILTER, why, gap=gap)
    if on_demand_usd is None:
        why = f"{need}; the catalog has no on-demand price of {instance_type} in {held.region} for the rest"
        return Rejection(CAPACITY_FILTER, why, gap=gap)
    return None
