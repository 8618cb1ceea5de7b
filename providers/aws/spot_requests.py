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

The requests are found two ways, in the stack's region, and only with proof of origin: every
identifying tag the program sets on a node (``gpufit:managed=true``, ``gpufit:project``,
``gpufit:stack``, ``gpufit:workload``; a stack's name alone is unique only inside its Pulumi
project) and the type of the nodes being replaced:
- ``DescribeInstances`` filtered on those tags and ``instance-lifecycle=spot``: each instance of
  that type, its ``SpotInstanceRequestId``;
- ``DescribeSpotInstanceRequests`` filtered on those tags: the launch template of an EFA node
  tags its request (``spot-instances-request``), which finds a request whose instance is gone;
  its ``LaunchSpecification.InstanceType``, where the answer gives it, must be that type.
Only ``persistent`` requests in ``open``, ``active`` or ``disabled`` are cancelled (a one-time
request closes with its instance; an Auto Scaling group's are one-time). The ``state`` filter of
DescribeSpotInstanceRequests documents only "open | active | closed | cancelled | failed"
(botocore's ec2 model, and
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotInstanceRequests.html),
not ``disabled`` (a request whose instance is stopped), so the states are read from the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from deployment import TAG_MANAGED, TAG_PROJECT, TAG_STACK, TAG_WORKLOAD

LIVE_INSTANCE_STATES = ("pending", "running", "stopping", "stopped")
LIVE_REQUEST_STATES = ("open", "active", "disabled")
"""``SpotInstanceState`` values a request can still launch from (``disabled``: its instance is
stopped, and it relaunches when the instance is started or replaced)."""
PAGE_SIZE = 1000
"""``MaxResults`` of DescribeInstances and DescribeSpotInstanceRequests: the model gives no range;
the API reference gives 5 to 1000 for both
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotInstanceRequests.html)."""
IDS_PER_CALL = 100
"""Request (or instance) ids per CancelSpotInstanceRequests/DescribeSpotInstanceRequests (or
DescribeInstances ``instance-id`` filter) call. ESTIMATE, not a documented limit: neither the
model (``SpotInstanceRequestIdList``) nor the API reference sets a maximum; 100 keeps each query
string short."""


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


def owner_tags(project: str, stack: str, workload: str) -> dict[str, str]:
    """The tags a multi-node job's node and its Spot request carry (``Deployment.tags`` and
    ``TAG_PROJECT``) that together name one stack of one project."""
    return {TAG_MANAGED: "true", TAG_PROJECT: project, TAG_STACK: stack, TAG_WORKLOAD: workload}


def _tag_filters(owner: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{key}", "Values": [value]} for key, value in sorted(owner.items())]


def _owned(row: Mapping[str, Any], owner: Mapping[str, str]) -> bool:
    tags = {t.get("Key"): t.get("Value") for t in row.get("Tags") or []}
    return all(tags.get(key) == value for key, value in owner.items())


def _pages(call: Callable[..., Any], filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        args: dict[str, Any] = {"Filters": filters, "MaxResults": PAGE_SIZE}
        if token:
            args["NextToken"] = token
        page: dict[str, Any] = call(**args)
        yield page
        token = page.get("NextToken")
        if not token:
            return


class SpotRequestCanceller:
    """``gpufit up``'s AWS half of releasing an attempt: cancel the persistent Spot requests of
    the stack's nodes of one type in a region. Raises what the API raises (a caller stops rather
    than let Pulumi delete instances whose requests would relaunch them)."""

    def __init__(self, client_for: Callable[[str], Any] | None = None) -> None:
        self._client_for = client_for or _client

    def release(
        self, owner: Mapping[str, str], region: str, instance_type: str, instance_ids: Sequence[str] = ()
    ) -> list[str]:
        """Cancel them (``owner``: ``owner_tags``; ``instance_ids``: only those nodes' requests,
        when a shrink deletes some nodes and keeps the others); one note per call that changed
        something."""
        ec2 = self._client_for(region)
        only = set(instance_ids)
        ids = sorted(
            self._of_instances(ec2, owner, instance_type, only)
            | self._tagged(ec2, owner, instance_type, only)
        )
        live: list[str] = []
        for batch in _chunks(ids, IDS_PER_CALL):
            answer = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=batch)
            live += [
                str(r["SpotInstanceRequestId"])
                for r in answer.get("SpotInstanceRequests", [])
                if r.get("Type") == "persistent" and r.get("State") in LIVE_REQUEST_STATES
            ]
        notes = []
        stack = owner.get(TAG_STACK)
        for batch in _chunks(sorted(set(live)), IDS_PER_CALL):
            answer = ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=batch)
            done = [
                str(r.get("SpotInstanceRequestId")) for r in answer.get("CancelledSpotInstanceRequests", [])
            ]
            notes.append(f"cancelled the persistent spot requests of {stack} in {region}: {', '.join(done)}")
        return notes

    @staticmethod
    def _of_instances(ec2: Any, owner: Mapping[str, str], instance_type: str, only: set[str]) -> set[str]:
        filters = [
            *_tag_filters(owner),
            {"Name": "instance-type", "Values": [instance_type]},
            {"Name": "instance-lifecycle", "Values": ["spot"]},
            {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)},
        ]
        batches = [
            [*filters, {"Name": "instance-id", "Values": b}] for b in _chunks(sorted(only), IDS_PER_CALL)
        ]
        return {
            str(instance["SpotInstanceRequestId"])
            for query in batches or [filters]
            for page in _pages(ec2.describe_instances, query)
            for reservation in page.get("Reservations", [])
            for instance in reservation.get("Instances", [])
            if _owned(instance, owner)
            and instance.get("InstanceType") == instance_type
            and (not only or instance.get("InstanceId") in only)
            and instance.get("SpotInstanceRequestId")
        }

    @staticmethod
    def _tagged(ec2: Any, owner: Mapping[str, str], instance_type: str, only: set[str]) -> set[str]:
        return {
            str(request["SpotInstanceRequestId"])
            for page in _pages(ec2.describe_spot_instance_requests, _tag_filters(owner))
            for request in page.get("SpotInstanceRequests", [])
            if _owned(request, owner)
            and request.get("State") in LIVE_REQUEST_STATES
            and (request.get("LaunchSpecification") or {}).get("InstanceType") in (None, instance_type)
            and (not only or request.get("InstanceId") in only)
        }


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
    for page in _pages(describe_requests, stack_filters(None)):
        for request in page.get("SpotInstanceRequests", []):
            instance_id = request.get("InstanceId")
            if instance_id and str(instance_id) not in known:
                requests[str(instance_id)] = request
    found = []
    for batch in _chunks(sorted(requests), IDS_PER_CALL):
        filters = [
            {"Name": "instance-id", "Values": batch},
            {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)},
        ]
        for page in _pages(describe_instances, filters):
            for reservation in page.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    request = requests[str(instance["InstanceId"])]
                    tags = {t["Key"]: t.get("Value", "") for t in request.get("Tags") or []}
                    tags.update({t["Key"]: t.get("Value", "") for t in instance.get("Tags") or []})
                    merged = {**instance, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                    found.append((merged, str(request["SpotInstanceRequestId"])))
    return found
