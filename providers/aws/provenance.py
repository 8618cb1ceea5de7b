"""Whether gpufit made a machine or group the sweep found by its tags: what it was launched from.

Tags prove nothing on their own (anyone allowed ``ec2:CreateTags`` can mark any instance
``gpufit:managed``). gpufit tags the launch templates and instance profiles it makes with the
stack's and workload's tags, and EC2 marks an instance launched from a template with
``aws:ec2launchtemplate:id``, a tag no user can set or edit ("You can't edit or delete tag keys
or values with [the aws:] prefix",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html#tag-restrictions). So a
candidate is gpufit's when it carries ``gpufit:stack`` and ``gpufit:workload`` and its launch
template (a group's, or the one EC2 names on the instance) or its instance profile carries
``gpufit:managed=true`` with the same stack and workload. Forging that takes creating a launch
template or an IAM instance profile, not tagging a machine. Pure: the caller looks the
templates and profiles up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from deployment import TAG_MANAGED, TAG_STACK, TAG_WORKLOAD
from gitops.sweep import Candidate

TEMPLATE_TAG = "aws:ec2launchtemplate:id"
"""The tag EC2 puts on an instance launched from a launch template (reserved ``aws:`` prefix)."""

Origins = Mapping[str, tuple[str | None, str | None]]
"""candidate id -> (launch template id, instance profile name)."""


def prove(
    candidates: list[Candidate],
    origins: Origins,
    templates: Mapping[str, Mapping[str, str]],
    profile_tags: Callable[[str], Mapping[str, str] | None],
) -> tuple[list[Candidate], list[str]]:
    """The candidates gpufit made, each with its proof in ``provenance``, and a note for each
    one left alone saying why. ``templates``: the region's gpufit-tagged launch templates' tags
    by id; ``profile_tags``: an instance profile's tags (None when it is gone)."""
    kept: list[Candidate] = []
    notes: list[str] = []
    for c in candidates:
        what = f"{'group' if c.kind == 'group' else 'instance'} {c.instance_id}"
        if not (c.stack and c.workload):
            notes.append(f"{what} is tagged {TAG_MANAGED} without {TAG_STACK} and {TAG_WORKLOAD}: left alone")
            continue
        template, profile = origins.get(c.instance_id, (None, None))
        proof = None
        if template and same_workload(templates.get(template), c):
            proof = f"launched from gpufit's launch template {template} of {c.stack}/{c.workload}"
        elif profile and same_workload(profile_tags(profile), c):
            proof = f"runs with gpufit's instance profile {profile} of {c.stack}/{c.workload}"
        if proof is None:
            notes.append(
                f"{what} is tagged {TAG_MANAGED} but was not made by gpufit for {c.stack}/{c.workload}"
                " (no launch template or instance profile of it carries its tags): left alone"
            )
            continue
        kept.append(replace(c, provenance=proof))
    return kept, notes


def same_workload(tags: Mapping[str, str] | None, c: Candidate) -> bool:
    """A resource's tags say gpufit made it for the candidate's stack and workload."""
    return (
        tags is not None
        and tags.get(TAG_MANAGED) == "true"
        and tags.get(TAG_STACK) == c.stack
        and tags.get(TAG_WORKLOAD) == c.workload
    )


def instance_origin(instance: dict[str, Any]) -> tuple[str | None, str | None]:
    """(launch template id from EC2's own tag, instance profile name) of a DescribeInstances entry."""
    tags = {str(t.get("Key")): str(t.get("Value", "")) for t in instance.get("Tags") or []}
    arn = str((instance.get("IamInstanceProfile") or {}).get("Arn", ""))
    profile = arn.rsplit("/", 1)[-1] if ":instance-profile/" in arn else None
    return tags.get(TEMPLATE_TAG) or None, profile or None


def group_template(group: dict[str, Any]) -> str | None:
    """The launch template id an Auto Scaling group launches from (mixed-instances or plain)."""
    mixed = ((group.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get(
        "LaunchTemplateSpecification"
    ) or {}
    plain = group.get("LaunchTemplate") or {}
    return str(mixed.get("LaunchTemplateId") or plain.get("LaunchTemplateId") or "") or None
