"""Whether gpufit made a machine or group the sweep found by its tags: what it was launched from.

Tags prove nothing on their own (anyone allowed ``ec2:CreateTags`` can mark any instance
``gpufit:managed``). gpufit tags the launch templates and instance profiles it makes with the
stack's and workload's tags, and EC2 marks an instance launched from a template with
``aws:ec2launchtemplate:id``, a tag no user can set or edit ("You can't edit or delete tag keys
or values with [the aws:] prefix",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html#tag-restrictions). So a
candidate is gpufit's when it carries ``gpufit:stack`` and ``gpufit:workload`` and its launch
template (a group's, or the one EC2 names on the instance) or its instance profile carries
``gpufit:managed=true`` with the same stack and workload, and a launch template counts only
when gpufit's deploy identity created it. A template's tags are no proof on their own: anyone
allowed ``ec2:CreateTags`` can re-tag an existing template ("launch-template" is a taggable
resource, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplateTagSpecificationRequest.html).
Its ``CreatedBy`` ("The principal that created the launch template", botocore's ec2 model,
shape ``LaunchTemplate``) is set by EC2 and no API changes it; it must name the identity that
runs ``pulumi up`` (``deployers``). An instance profile's tags take ``iam:TagInstanceProfile``,
an IAM administrator's permission. Pure: the caller looks the templates and profiles up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from deployment import TAG_MANAGED, TAG_STACK, TAG_WORKLOAD
from gitops.sweep import Candidate

TEMPLATE_TAG = "aws:ec2launchtemplate:id"
"""The tag EC2 puts on an instance launched from a launch template (reserved ``aws:`` prefix)."""

Origins = Mapping[str, tuple[str | None, str | None]]
"""candidate id -> (launch template id, instance profile name)."""


@dataclass(frozen=True)
class Template:
    """A launch template as DescribeLaunchTemplates answers: its tags and ``CreatedBy``."""

    tags: Mapping[str, str]
    created_by: str


def principal(arn: str) -> str:
    """One spelling per principal: a role's ARN (``arn:aws:iam::A:role/PATH/R``) and the ARN of
    a session of it (``arn:aws:sts::A:assumed-role/R/SESSION``) both become
    ``A:role/R``; any other ARN stays itself. The role-session form is IAM's documented one
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-arns)."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn":
        return arn
    _, _, service, _, account, resource = parts
    if service == "sts" and resource.startswith("assumed-role/"):
        return f"{account}:role/{resource.split('/')[1]}"
    if service == "iam" and resource.startswith("role/"):
        return f"{account}:role/{resource.rsplit('/', 1)[-1]}"
    return arn


def prove(
    candidates: list[Candidate],
    origins: Origins,
    templates: Mapping[str, Template],
    profile_tags: Callable[[str], Mapping[str, str] | None],
    deployers: Callable[[], frozenset[str]],
) -> tuple[list[Candidate], list[str]]:
    """The candidates gpufit made, each with its proof in ``provenance``, and a note for each
    one left alone saying why. ``templates``: the region's gpufit-tagged launch templates by id;
    ``profile_tags``: an instance profile's tags (None when it is gone); ``deployers``: the ARNs
    of the identities that deploy gpufit's stacks (a template counts only when one of them
    created it), asked only when a gpufit-tagged template is found."""
    kept: list[Candidate] = []
    notes: list[str] = []
    for c in candidates:
        what = f"{'group' if c.kind == 'group' else 'instance'} {c.instance_id}"
        if not (c.stack and c.workload):
            notes.append(f"{what} is tagged {TAG_MANAGED} without {TAG_STACK} and {TAG_WORKLOAD}: left alone")
            continue
        template, profile = origins.get(c.instance_id, (None, None))
        proof = None
        found = templates.get(template) if template else None
        trusted = deployers() if found and same_workload(found.tags, c) else frozenset()
        if (
            found
            and same_workload(found.tags, c)
            and principal(found.created_by) not in {principal(d) for d in trusted}
        ):
            notes.append(
                f"{what}: its launch template {template} carries gpufit's tags but was created by"
                f" {found.created_by or 'an unknown principal'}, not by gpufit's deploy identity"
                f" ({', '.join(sorted(trusted))})"
            )
        elif found and same_workload(found.tags, c):
            proof = (
                f"launched from gpufit's launch template {template} of {c.stack}/{c.workload}"
                f" (created by {found.created_by})"
            )
        if proof is None and profile and same_workload(profile_tags(profile), c):
            proof = f"runs with gpufit's instance profile {profile} of {c.stack}/{c.workload}"
        if proof is None:
            notes.append(
                f"{what} is tagged {TAG_MANAGED} but was not made by gpufit for {c.stack}/{c.workload}"
                " (no launch template gpufit's deploy identity created, nor instance profile of it, carries"
                " its tags): left alone"
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
