"""Cancel a stack's persistent Spot Instance requests before its nodes are replaced or destroyed.

A multi-node checkpointed spot node is an ``aws.ec2.Instance`` whose ``instance_market_options``
open a ``persistent`` request (interruption ``stop``, ``ValidUntil`` the deadline). Deleting the
instance does not cancel that request (hashicorp/terraform-provider-aws#38142, which pulumi-aws
bridges), and "If you terminate a running Spot Instance that was launched by a persistent Spot
Instance request, the Spot Instance request transitions to the open state so that a new Spot
Instance can be launched" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-requests.html).
So ``gpufit up`` cancels them first; "Canceling a Spot Instance request does not terminate running
Spot Instances associated with the request" (the CancelSpotInstanceRequests API reference), so the
instances stay in the stack for Pulumi to delete.

The requests are found two ways, in the stack's region:
- ``DescribeInstances`` filtered on the stack's tags (``gpufit:managed=true``, ``gpufit:stack``)
  and ``instance-lifecycle=spot``: each instance's ``SpotInstanceRequestId``;
- ``DescribeSpotInstanceRequests`` filtered on the same tags: the launch template of an EFA node
  tags its request (``spot-instances-request``), which finds a request whose instance is gone.
Only ``persistent`` requests in ``open``, ``active`` or ``disabled`` are cancelled (a one-time
request closes with its instance; an Auto Scaling group's are one-time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from deployment import TAG_MANAGED, TAG_STACK

LIVE_INSTANCE_STATES = ("pending", "running", "stopping", "stopped")
LIVE_REQUEST_STATES = ("open", "active", "disabled")
"""``SpotInstanceState`` values a request can still launch from (``disabled``: its instance is
stopped, and it relaunches when the instance is started or replaced)."""
PAGE_SIZE = 1000
"""``MaxResults`` of DescribeInstances and DescribeSpotInstanceRequests (both take 5 to 1000)."""
IDS_PER_CALL = 100
"""Request ids per CancelSpotInstanceRequests/DescribeSpotInstanceRequests call: the model sets no
maximum on ``SpotInstanceRequestIdList``; 100 keeps each query string short."""


def _client(region: str) -> Any:
    import boto3

    return boto3.client("ec2", region_name=region)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def stack_filters(stack: str | None) -> list[dict[str, Any]]:
    """gpufit's resources (of ``stack`` when given) by their tags."""
    managed = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]
    return managed if stack is None else [*managed, {"Name": f"tag:{TAG_STACK}", "Values": [stack]}]


class SpotRequestCanceller:
    """``gpufit up``'s AWS half of releasing an attempt: cancel the persistent Spot requests of
    the stack's nodes in a region. Raises what the API raises (a caller stops rather than let
    Pulumi delete instances whose requests would relaunch them)."""

    def __init__(self, client_for: Callable[[str], Any] | None = None) -> None:
        self._client_for = client_for or _client

    def release(self, stack: str, region: str) -> list[str]:
        """Cancel them; one note per call that changed something."""
        ec2 = self._client_for(region)
        ids = sorted(self._of_instances(ec2, stack) | self._tagged(ec2, stack))
        live: list[str] = []
        for batch in _chunks(ids, IDS_PER_CALL):
            answer = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=batch)
            live += [
                str(r["SpotInstanceRequestId"])
                for r in answer.get("SpotInstanceRequests", [])
                if r.get("Type") == "persistent" and r.get("State") in LIVE_REQUEST_STATES
            ]
        notes = []
        for batch in _chunks(sorted(set(live)), IDS_PER_CALL):
            answer = ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=batch)
            done = [
                str(r.get("SpotInstanceRequestId")) for r in answer.get("CancelledSpotInstanceRequests", [])
            ]
            notes.append(f"cancelled the persistent spot requests of {stack} in {region}: {', '.join(done)}")
        return notes

    @staticmethod
    def _of_instances(ec2: Any, stack: str) -> set[str]:
        filters = [
            *stack_filters(stack),
            {"Name": "instance-lifecycle", "Values": ["spot"]},
            {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)},
        ]
        found: set[str] = set()
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Filters": filters, "MaxResults": PAGE_SIZE}
            if token:
                args["NextToken"] = token
            page = ec2.describe_instances(**args)
            for reservation in page.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags") or []}
                    if tags.get(TAG_STACK) == stack and instance.get("SpotInstanceRequestId"):
                        found.add(str(instance["SpotInstanceRequestId"]))
            token = page.get("NextToken")
            if not token:
                return found

    @staticmethod
    def _tagged(ec2: Any, stack: str) -> set[str]:
        filters = [*stack_filters(stack), {"Name": "state", "Values": list(LIVE_REQUEST_STATES)}]
        found: set[str] = set()
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Filters": filters, "MaxResults": PAGE_SIZE}
            if token:
                args["NextToken"] = token
            page = ec2.describe_spot_instance_requests(**args)
            for request in page.get("SpotInstanceRequests", []):
                tags = {t.get("Key"): t.get("Value") for t in request.get("Tags") or []}
                if tags.get(TAG_STACK) == stack:
                    found.add(str(request["SpotInstanceRequestId"]))
            token = page.get("NextToken")
            if not token:
                return found


def request_launched(
    describe_requests: Callable[..., Any], describe_instances: Callable[..., Any], known: set[str]
) -> list[tuple[dict[str, Any], str]]:
    """For ``gpufit sweep``: the live instances that gpufit-tagged Spot requests (any state: one
    past its ``ValidUntil`` is closed, and its instance keeps running) launched and that are not
    in ``known``, each with its request id, its tags those of its request under its own. A
    persistent request relaunching after Pulumi deleted its instance makes such an instance, and
    "the instances and volumes that are launched by the Spot Instance request are not
    automatically tagged" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/concepts-spot-instances-request-tags.html):
    the request's tags are what name its stack and deadline. ``describe_*`` take the API's
    keyword arguments (retried by the caller)."""
    requests: dict[str, dict[str, Any]] = {}
    token: str | None = None
    while True:
        args: dict[str, Any] = {"Filters": stack_filters(None), "MaxResults": PAGE_SIZE}
        if token:
            args["NextToken"] = token
        page = describe_requests(**args)
        for request in page.get("SpotInstanceRequests", []):
            instance_id = request.get("InstanceId")
            if instance_id and str(instance_id) not in known:
                requests[str(instance_id)] = request
        token = page.get("NextToken")
        if not token:
            break
    found = []
    for batch in _chunks(sorted(requests), IDS_PER_CALL):
        filters = [
            {"Name": "instance-id", "Values": batch},
            {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)},
        ]
        page = describe_instances(Filters=filters, MaxResults=PAGE_SIZE)
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                request = requests[str(instance["InstanceId"])]
                tags = {t["Key"]: t.get("Value", "") for t in request.get("Tags") or []}
                tags.update({t["Key"]: t.get("Value", "") for t in instance.get("Tags") or []})
                merged = {**instance, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                found.append((merged, str(request["SpotInstanceRequestId"])))
    return found
