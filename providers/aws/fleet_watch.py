"""AWS's half of ``gpufit up``'s watch: how many of the Auto Scaling group's capacity units
are in service, and what its failed scaling activities say.

``DescribeAutoScalingGroups`` gives the group's ``DesiredCapacity`` and its ``Instances``
(``LifecycleState`` ``InService``, ``WeightedCapacity`` as a string when the group weights its
types); ``DescribeScalingActivities`` gives each launch attempt's ``StatusCode`` and
``StatusMessage`` ("A friendly, more verbose description of the activity status"), which
carries EC2's own error text (botocore's autoscaling 2011-01-01 model; an ASG left at 0 for
lack of capacity, its activity carrying EC2's message: https://github.com/hashicorp/terraform/issues/9074).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from gitops.failover import FleetState

FAILED = ("Failed", "Cancelled")
ACTIVITY_PAGE = 100  # MaxRecords' ceiling in the model


def _client(region: str) -> Any:
    import boto3

    return boto3.client("autoscaling", region_name=region)


class AsgWatcher:
    """Reads an AWS stack's fleet from its ``group`` and ``region`` outputs."""

    def __init__(self, client_for: Callable[[str], Any] = _client) -> None:
        self._client_for = client_for

    def state(self, outputs: Mapping[str, Any], since: datetime) -> FleetState:
        client = self._client_for(str(outputs["region"]))
        group = str(outputs["group"])
        groups = client.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"]
        if not groups:
            desired = int(outputs.get("desired_capacity") or 1)
            return FleetState(desired, 0, (f"Auto Scaling group {group} not found",))
        found = groups[0]
        in_service = sum(
            int(i.get("WeightedCapacity") or 1)
            for i in found["Instances"]
            if i["LifecycleState"] == "InService"
        )
        activities = client.describe_scaling_activities(AutoScalingGroupName=group, MaxRecords=ACTIVITY_PAGE)
        cutoff = since if since.tzinfo else since.replace(tzinfo=UTC)
        messages = tuple(
            a.get("StatusMessage") or a.get("Description", "")
            for a in activities["Activities"]
            if a["StatusCode"] in FAILED and a["StartTime"] >= cutoff
        )
        return FleetState(int(found["DesiredCapacity"]), in_service, messages)
