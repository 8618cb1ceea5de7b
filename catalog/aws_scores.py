"""EC2 Spot placement scores (a refresh with credentials): how likely a spot request is to
succeed, 1-10 per availability zone (``ec2:GetSpotPlacementScores``).

AWS scores a request configuration, not a type: "We recommend that you specify at least three
instance types. If you specify one or two instance types, or specify variations of a single
instance type ... the returned placement score will always be low" (the API's
``InstanceTypes`` documentation), and a high score "assumes that your fleet request will be
configured to use all Availability Zones and the capacity-optimized allocation strategy". So
gpufit asks the question its fleets pose: one request per GPU-count class (1 GPU, 2-4, 8 or
more), listing every GPU type of the catalog in that class across families, for one instance
(``TargetCapacity`` 1, ``units``), per zone (``SingleAvailabilityZone``), in batches of at most
10 regions (``RegionNames``). Each answer row is stored with the types it was asked for; the
catalog loader gives a spot offer of a listed type in that zone the score
(``selector.catalog``). AWS returns the top-scored zones only (at most ``MaxResults``), so a zone
not in the answer has no score, not a low one. "A Spot placement score does not provide any
guarantees in terms of available capacity or risk of interruption"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cloudapi.aws import AwsApi
from cloudapi.calls import AuthError

OPERATION = "GetSpotPlacementScores"
SOURCE_KEY = "AWS_SPOT_PLACEMENT_SCORE"
MAX_REGIONS = 10
"""``RegionNames``: at most 10 per request (the API's model)."""
MAX_RESULTS = 1000
CLASSES: tuple[tuple[int, int], ...] = ((1, 1), (2, 4), (8, 10_000))
"""GPU-count classes a fleet diversifies within: one GPU, two to four, eight or more."""


def request_groups(types: Iterable[dict[str, Any]]) -> list[list[str]]:
    """The instance types of each GPU-count class (classes of fewer than one type dropped)."""
    groups: list[list[str]] = []
    for low, high in CLASSES:
        names = sorted(t["name"] for t in types if low <= int(t["gpu_count"]) <= high)
        if names:
            groups.append(names)
    return groups


def placement_scores(
    api: AwsApi, home: str, types: list[dict[str, Any]], regions: list[str], today: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """(score rows, notes). A refused permission is noted, never fatal: the scores are one
    signal among others (``selector.obtainability``)."""
    ec2 = api.client("ec2", home)
    rows: list[dict[str, Any]] = []
    for names in request_groups(types):
        for i in range(0, len(regions), MAX_REGIONS):
            batch = regions[i : i + MAX_REGIONS]
            try:
                pages = api.pages(
                    ec2,
                    "ec2",
                    OPERATION,
                    "get_spot_placement_scores",
                    InstanceTypes=names,
                    TargetCapacity=1,
                    TargetCapacityUnitType="units",
                    SingleAvailabilityZone=True,
                    RegionNames=batch,
                    MaxResults=MAX_RESULTS,
                )
                answers = [s for page in pages for s in page.get("SpotPlacementScores", [])]
            except AuthError as err:
                return rows, [f"spot placement scores skipped: {err}"]
            except Exception as err:  # one signal among others: the refresh goes on
                return rows, [f"spot placement scores failed ({type(err).__name__}: {err})"[:300]]
            for answer in answers:
                if answer.get("Region") and answer.get("Score") is not None:
                    rows.append(
                        {
                            "cloud": "aws",
                            "region": str(answer["Region"]),
                            "zone": answer.get("AvailabilityZoneId"),
                            "instance_types": names,
                            "score": int(answer["Score"]),
                            "target_capacity": 1,
                            "source": SOURCE_KEY,
                            "as_of": today,
                        }
                    )
    return rows, [f"{len(rows)} spot placement scores (per zone, per GPU-count class of types)"]


SOURCE = {
    "title": "EC2 GetSpotPlacementScores: 1-10 per availability zone for a one-instance spot request "
    "over every GPU type of a GPU-count class (a score is no guarantee of capacity)",
    "url": "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-placement-score.html",
}
