"""gpufit's guardrails as plain functions: no ``pulumi_policy`` import, so they run (and are unit
tested) anywhere.

Each resource validator takes ``(resource_type, props, config)`` and returns the violation
messages, none when the resource complies or is not of a type it checks. ``resource_type`` is a
Pulumi type token (``aws:ec2/instance:Instance``) and ``props`` the resource's camelCase inputs
as the policy engine passes them: any ``Mapping`` of ``Sequence``/``Mapping`` values (the engine
hands over read-only proxies, not ``dict``/``list``), so nothing here relies on concrete types.
``check_stack`` and ``check_stack_budget`` take the whole stack as ``(type, props)`` or
``(type, props, region)`` tuples.

The clock is never read here: ``PolicyConfig.now`` is the present, which ``policy/__main__.py``
fills with ``datetime.now(UTC)`` (or the ``now`` policy-config key) and tests fix.

The checks live here; what they read in ``policy/resources.py`` (type tokens, tag names,
``PolicyConfig``, property readers, expiry parsing) and the catalog prices in
``policy/pricing.py``. The pack imports both through the repository root (``policy/__main__.py``
puts it on ``sys.path``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from policy.budget import check_hourly_budget, check_stack_budget
from policy.coverage import check_backend_armor, check_bucket_access_blocks, check_known_compute
from policy.group_sizes import resizes_to_zero
from policy.ingress import (
    check_ingress_union,
    check_no_open_ingress,
    check_open_endpoint_structure,
    check_plain_http,
)
from policy.pricing import (
    group_hourly,
    instance_offer,
)
from policy.resources import (
    AWS_ACL_TYPES,
    AWS_EBS_VOLUME,
    AWS_GROUP,
    AWS_GROUP_SCHEDULE,
    AWS_INSTANCE,
    AWS_LAUNCH_TEMPLATE,
    AWS_PUBLIC_ACCESS_BLOCK,
    AWS_SCHEDULE,
    DEADLINE_LAYER_SCHEDULER,
    DEADLINE_SLACK,
    GCP_BUCKET,
    GCP_BUCKET_IAM_BINDING,
    GCP_BUCKET_IAM_MEMBER,
    GCP_GROUPS,
    GCP_INSTANCE,
    GCP_SCHEDULER_JOB,
    GCP_TEMPLATES,
    GPU_INSTANCES,
    LABEL_DEADLINE_LAYER,
    MACHINE_TEMPLATES,
    PUBLIC_ACCESS_BLOCK_FLAGS,
    PUBLIC_ACLS,
    PUBLIC_MEMBERS,
    TAG_EXPIRES_AT,
    TERMINATE_TARGET,
    PolicyConfig,
    as_count,
    as_map,
    as_seq,
    config_from,
    duration_seconds,
    fire_time,
    instance_expiry,
    is_open,
    is_time,
    parse_gcp_label_time,
    parse_iso,
    stack_items,
)
from policy.secrets_scan import secret_bearing_texts
from selector.reach import too_broad

__all__ = [
    "AWS_GROUP",
    "AWS_GROUP_SCHEDULE",
    "AWS_INSTANCE",
    "AWS_LAUNCH_TEMPLATE",
    "GCP_GROUPS",
    "GCP_INSTANCE",
    "GCP_SCHEDULER_JOB",
    "GCP_TEMPLATES",
    "PUBLIC_ACCESS_BLOCK_FLAGS",
    "RESOURCE_VALIDATORS",
    "STACK_VALIDATORS",
    "TAG_EXPIRES_AT",
    "TERMINATE_TARGET",
    "PolicyConfig",
    "check_backend_armor",
    "check_bucket_access_blocks",
    "check_disk_encryption",
    "check_endpoint_access",
    "check_expiry",
    "check_fleet_deadline",
    "check_hourly_budget",
    "check_imdsv2",
    "check_ingress_union",
    "check_known_compute",
    "check_no_open_ingress",
    "check_no_secrets_in_boot_data",
    "check_private_buckets",
    "check_stack",
    "check_stack_budget",
    "config_from",
    "group_hourly",
    "instance_offer",
    "parse_gcp_label_time",
    "parse_iso",
]


# -- 1. expiry and cloud-side deadline ---------------------------------------------------------


def check_expiry(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """Every GPU instance carries a valid, present-or-future expiry (AWS tag ``gpufit:expires-at``
    in ISO 8601; GCP label ``gpufit-expires-at`` in its label encoding). A GCP VM must also carry
    its own deadline: ``scheduling.maxRunDuration`` with ``instanceTerminationAction`` DELETE,
    ending no later than the label (plus ``DEADLINE_SLACK``). The AWS deadline lives in a
    separate EventBridge schedule: ``check_stack`` checks it."""
    if resource_type not in (*GPU_INSTANCES, *MACHINE_TEMPLATES):
        return []
    problems: list[str] = []
    expiry, why = instance_expiry(resource_type, props)
    if why:
        problems.append(why)
    elif expiry is not None and expiry < config.now:
        problems.append(
            f"expired at {expiry.isoformat()} (now {config.now.astimezone(UTC).isoformat()}): "
            "an expired instance must be destroyed, not deployed"
        )
    if resource_type in GCP_TEMPLATES:
        problems += _template_deadline(props, expiry, config)
    if resource_type == GCP_INSTANCE:
        scheduling = as_map(props.get("scheduling"))
        seconds = duration_seconds(as_map(scheduling.get("maxRunDuration")))
        if seconds is None:
            problems.append(
                "scheduling.maxRunDuration is not set: nothing deletes the VM at its deadline "
                "if nobody runs `pulumi destroy`"
            )
        action = scheduling.get("instanceTerminationAction")
        if action != "DELETE":
            problems.append(
                f"scheduling.instanceTerminationAction is {action!r}, not 'DELETE': at its deadline "
                "the VM must be deleted, not left stopped (and billed for its disk)"
            )
        if seconds is not None and expiry is not None and expiry >= config.now:
            ends = config.now + timedelta(seconds=seconds)
            if ends > expiry + DEADLINE_SLACK:
                problems.append(
                    f"scheduling.maxRunDuration ({seconds:.0f} s from now) runs until "
                    f"{ends.astimezone(UTC).isoformat()}, past the expiry label {expiry.isoformat()}"
                )
    return problems


VM_RUN_TIME_LIMIT = timedelta(days=120)
"""Compute Engine's longest VM run time, a termination time included."""


def _template_deadline(props: Mapping[str, Any], expiry: datetime | None, config: PolicyConfig) -> list[str]:
    """A GCP instance template deletes its VMs at the deadline: an absolute ``terminationTime``
    no later than the expiry label (plus ``DEADLINE_SLACK``), or a ``maxRunDuration``; either
    with the DELETE action. A deadline more than 120 days away is beyond what Compute Engine
    takes (https://cloud.google.com/compute/docs/instances/limit-vm-runtime): the template
    then has neither, says so with the label ``gpufit-deadline-layer: scheduler`` (so the check
    holds on every later day, when the deadline has come within reach of a termination time
    the immutable template cannot gain), and the group's Cloud Scheduler job is its cloud-side
    deadline (``check_fleet_deadline`` requires one for every group)."""
    problems: list[str] = []
    scheduling = as_map(props.get("scheduling"))
    scheduler_only = as_map(props.get("labels")).get(LABEL_DEADLINE_LAYER) == DEADLINE_LAYER_SCHEDULER
    action = scheduling.get("instanceTerminationAction")
    at = scheduling.get("terminationTime")
    beyond_reach = scheduler_only or (expiry is not None and expiry - config.now > VM_RUN_TIME_LIMIT)
    limited = bool(at) or duration_seconds(as_map(scheduling.get("maxRunDuration"))) is not None
    # A STANDARD VM with no run-time limit is never terminated by Compute Engine, so it takes no
    # termination action (the action is a Spot VM's or a run-time limit's: contract rule
    # gcp.standard); past a termination time's reach its deadline is the group's Scheduler job.
    standard = str(scheduling.get("provisioningModel") or "STANDARD").upper() == "STANDARD"
    moot = standard and not scheduling.get("preemptible") and not limited and beyond_reach
    if action != "DELETE" and not (moot and action is None):
        problems.append(
            f"scheduling.instanceTerminationAction is {action!r}, not 'DELETE': at its deadline "
            "a VM must be deleted, not left stopped"
        )
    if not at and duration_seconds(as_map(scheduling.get("maxRunDuration"))) is None and not beyond_reach:
        problems.append("scheduling sets neither terminationTime nor maxRunDuration: no VM-side deadline")
    elif at:
        try:
            ends = parse_iso(str(at))
        except ValueError:
            return [*problems, f"scheduling.terminationTime {at!r} is not a timestamp"]
        if expiry is not None and ends > expiry + DEADLINE_SLACK:
            problems.append(
                f"scheduling.terminationTime {ends.isoformat()} is past the expiry label {expiry.isoformat()}"
            )
    return problems


def check_stack(resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None) -> list[str]:
    """Stack-level deadline: when the stack holds an AWS instance, it must also hold an enabled
    ``aws:scheduler/schedule:Schedule`` whose target is ``TERMINATE_TARGET`` (EC2 has no
    run-time limit of its own). A one-time ``at(...)`` schedule must fire no later than the
    earliest instance expiry plus ``DEADLINE_SLACK``. ``resources``: ``(type, props)`` tuples
    (a third element, the region, is accepted and ignored). ``config`` is unused: accepted so
    every stack check has one signature."""
    del config
    items = stack_items(resources)
    instances = [props for typ, props, _ in items if typ == AWS_INSTANCE]
    if not instances:
        return []
    schedules = [
        props
        for typ, props, _ in items
        if typ == AWS_SCHEDULE and as_map(props.get("target")).get("arn") == TERMINATE_TARGET
    ]
    enabled = [s for s in schedules if str(s.get("state") or "ENABLED").upper() != "DISABLED"]
    if not enabled:
        state = " (the one there is DISABLED)" if schedules else ""
        return [
            f"{len(instances)} AWS instance(s) but no enabled {AWS_SCHEDULE} targeting "
            f"{TERMINATE_TARGET}{state}: nothing terminates them at their deadline if nobody runs "
            "`pulumi destroy`"
        ]
    fires = [fire_time(s) for s in enabled]
    if any(f is None for f in fires):
        return []  # a rate/cron schedule, or one whose time cannot be read: its existence suffices
    expiries = [e for e, _ in (instance_expiry(AWS_INSTANCE, p) for p in instances) if e is not None]
    if not expiries:
        return []  # check_expiry reports the missing or malformed tags
    first_fire = min(f for f in fires if f is not None)
    earliest_expiry = min(expiries)
    if first_fire > earliest_expiry + DEADLINE_SLACK:
        return [
            f"the terminate schedule fires at {first_fire.isoformat()}, more than "
            f"{DEADLINE_SLACK} after the earliest instance expiry {earliest_expiry.isoformat()}"
        ]
    return []


def check_fleet_deadline(
    resources: Iterable[tuple[Any, ...]], config: PolicyConfig | None = None
) -> list[str]:
    """Stack-level deadline of fleet groups: every AWS Auto Scaling group has a scheduled action
    that sets its min, max and desired capacity to 0 no later than the earliest launch-template
    expiry (plus ``DEADLINE_SLACK``); every GCP managed instance group has an unpaused Cloud
    Scheduler job that resizes it to 0 (``.../instanceGroupManagers/NAME/resize?size=0``).
    Without them the group would relaunch machines after their own deadline deleted them."""
    del config
    items = stack_items(resources)
    problems: list[str] = []
    expiries = [
        e
        for e, _ in (instance_expiry(AWS_LAUNCH_TEMPLATE, p) for t, p, _ in items if t == AWS_LAUNCH_TEMPLATE)
        if e is not None
    ]
    actions = [p for t, p, _ in items if t == AWS_GROUP_SCHEDULE]
    for typ, props, _ in items:
        if typ != AWS_GROUP:
            continue
        name = props.get("name")
        to_zero = [
            a
            for a in actions
            if a.get("autoscalingGroupName") == name
            and all(as_count(a.get(k)) == 0 for k in ("minSize", "maxSize", "desiredCapacity"))
        ]
        if not to_zero:
            problems.append(
                f"Auto Scaling group {name!r} has no {AWS_GROUP_SCHEDULE} setting min, max and desired "
                "capacity to 0: nothing stops it relaunching machines after their deadline"
            )
            continue
        starts = [parse_iso(str(a["startTime"])) for a in to_zero if is_time(a.get("startTime"))]
        if expiries and starts and min(starts) > min(expiries) + DEADLINE_SLACK:
            problems.append(
                f"group {name!r} is scaled to 0 at {min(starts).isoformat()}, more than {DEADLINE_SLACK} "
                f"after its machines' expiry {min(expiries).isoformat()}"
            )
    jobs = [p for t, p, _ in items if t == GCP_SCHEDULER_JOB and p.get("paused") is not True]
    for typ, props, _ in items:
        if typ not in GCP_GROUPS:
            continue
        name = props.get("name")
        if not any(resizes_to_zero(as_map(j.get("httpTarget")), typ, props) for j in jobs):
            problems.append(
                f"managed instance group {name!r} has no Cloud Scheduler job resizing it to 0: nothing "
                "stops it recreating VMs after their deadline"
            )
    return problems


# -- 3. IMDSv2 -----------------------------------------------------------------------------------


def check_imdsv2(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """An AWS instance requires IMDSv2 session tokens (``metadataOptions.httpTokens`` = required):
    IMDSv1 hands the instance role's credentials to any SSRF."""
    del config
    if resource_type not in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
        return []
    tokens = as_map(props.get("metadataOptions")).get("httpTokens")
    if tokens != "required":
        shown = "unset (defaults to optional)" if tokens is None else repr(tokens)
        return [f"metadataOptions.httpTokens is {shown}: IMDSv2 must be required"]
    return []


# -- 4. encrypted disks --------------------------------------------------------------------------


def check_disk_encryption(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """AWS disks are encrypted: an instance's ``rootBlockDevice`` and every ``ebsBlockDevices``
    entry, and every ``aws:ebs/volume:Volume``, set ``encrypted`` true (an absent root block
    device means the AMI's default, unencrypted unless the account defaults otherwise)."""
    del config
    if resource_type == AWS_EBS_VOLUME:
        if props.get("encrypted") is True:
            return []
        return ["EBS volume is not encrypted (encrypted must be true)"]
    if resource_type == AWS_LAUNCH_TEMPLATE:
        mappings = [as_map(m) for m in as_seq(props.get("blockDeviceMappings"))]
        if not mappings:
            return ["blockDeviceMappings is empty: the root volume takes the AMI's default encryption"]
        return [
            f"blockDeviceMappings[{i}] ({m.get('deviceName')}) is not encrypted (ebs.encrypted must be true)"
            for i, m in enumerate(mappings)
            if str(as_map(m.get("ebs")).get("encrypted")).lower() != "true"
        ]
    if resource_type != AWS_INSTANCE:
        return []
    problems: list[str] = []
    if as_map(props.get("rootBlockDevice")).get("encrypted") is not True:
        problems.append("rootBlockDevice is not encrypted (rootBlockDevice.encrypted must be true)")
    for index, entry in enumerate(as_seq(props.get("ebsBlockDevices"))):
        device = as_map(entry)
        if device.get("encrypted") is not True:
            name = device.get("deviceName") or f"#{index}"
            problems.append(f"ebsBlockDevices[{index}] ({name}) is not encrypted (encrypted must be true)")
    return problems


# -- 5. no ingress from anywhere: policy/ingress.py ------------------------------------------------------


# -- 6. private buckets ----------------------------------------------------------------------------------


def check_private_buckets(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """Buckets stay private: an S3 public access block sets all four flags; no S3 bucket or
    bucket ACL grants a canned public ACL; a GCS bucket enforces public access prevention and
    uniform bucket-level access; no GCS bucket IAM grant names allUsers/allAuthenticatedUsers."""
    del config
    if resource_type == AWS_PUBLIC_ACCESS_BLOCK:
        off = [flag for flag in PUBLIC_ACCESS_BLOCK_FLAGS if props.get(flag) is not True]
        return [f"public access block leaves {flag} off (all four flags must be true)" for flag in off]
    if resource_type in AWS_ACL_TYPES:
        acl = props.get("acl")
        return [f"acl {acl!r} makes the bucket public"] if acl in PUBLIC_ACLS else []
    if resource_type == GCP_BUCKET:
        problems: list[str] = []
        prevention = props.get("publicAccessPrevention")
        if prevention != "enforced":
            problems.append(f"publicAccessPrevention is {prevention!r}, not 'enforced'")
        if props.get("uniformBucketLevelAccess") is not True:
            problems.append("uniformBucketLevelAccess is not true: object ACLs could make objects public")
        return problems
    if resource_type == GCP_BUCKET_IAM_MEMBER:
        member = props.get("member")
        return [f"grants {props.get('role')} to {member}"] if member in PUBLIC_MEMBERS else []
    if resource_type == GCP_BUCKET_IAM_BINDING:
        public = [m for m in as_seq(props.get("members")) if m in PUBLIC_MEMBERS]
        return [f"grants {props.get('role')} to {m}" for m in public]
    return []


# -- 7. endpoints and secrets -------------------------------------------------------------------

SECRET_PATTERNS = (
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "a Hugging Face token"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"(?:VLLM_API_KEY|HF_TOKEN|GPUFIT_API_KEY)=(?!%s|\$)\S+"), "a secret assigned in plain text"),
    (re.compile(r"--api-key[ =](?![\"']?\$)\S+"), "an API key on a command line"),
    (re.compile(r"api-key:\s*['\"]*(?=[^'\"\s])(?!%s)"), "an API key written into a config file"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
)
"""What a secret looks like in a boot script: a value, where gpufit writes only references (a
secret's ARN or name) and shell variables filled on the machine."""


def check_no_secrets_in_boot_data(
    resource_type: str, props: Mapping[str, Any], config: PolicyConfig
) -> list[str]:
    """No secret value in user data or a startup script: anyone who may describe the instance
    (or read the stack's state) could read it. Secrets go to Secrets Manager / Secret Manager
    and the boot script names them."""
    del config
    texts = secret_bearing_texts(resource_type, props)
    return [
        f"the boot script, metadata or tags hold {what}: move it to the secret store"
        for rx, what in SECRET_PATTERNS
        if any(rx.search(text) for text in texts)
    ]


ALB = "aws:lb/loadBalancer:LoadBalancer"
GCP_SECURITY_POLICY = "gcp:compute/regionSecurityPolicy:RegionSecurityPolicy"
OPEN_BY_CHOICE = "access.allow_api_from_anywhere"


def check_endpoint_access(resource_type: str, props: Mapping[str, Any], config: PolicyConfig) -> list[str]:
    """An internet-facing endpoint admits named CIDRs only, unless the spec opted in: an AWS
    load balancer must have security groups (an ALB without one admits everyone), and a Cloud
    Armor policy may allow everyone (``*``, 0.0.0.0/0, ::/0) only when its description carries
    ``access.allow_api_from_anywhere``."""
    del config
    if resource_type == ALB and props.get("internal") is not True and not as_seq(props.get("securityGroups")):
        return ["an internet-facing load balancer without a security group admits everyone"]
    if resource_type == GCP_SECURITY_POLICY and OPEN_BY_CHOICE not in str(props.get("description") or ""):
        problems = []
        allowed: list[Any] = []
        for rule in as_seq(props.get("rules")):
            r = as_map(rule)
            ranges = as_seq(as_map(as_map(r.get("match")).get("config")).get("srcIpRanges"))
            if not str(r.get("action", "")).startswith("allow"):
                continue
            allowed += ranges
            if any(is_open(v) for v in ranges):
                problems.append(f"rule {r.get('priority')} allows every address: name access.api_cidrs")
        if not problems:
            problems += [
                f"the allow rules together admit the internet ({b}): name access.api_cidrs"
                for b in too_broad(allowed)
            ]
        return problems
    return []


RESOURCE_VALIDATORS = (
    check_expiry,
    check_hourly_budget,
    check_imdsv2,
    check_disk_encryption,
    check_no_open_ingress,
    check_private_buckets,
    check_no_secrets_in_boot_data,
    check_endpoint_access,
    check_backend_armor,
    check_known_compute,
    check_plain_http,
)
"""Every per-resource validator, each callable as ``check(resource_type, props, config)``."""

STACK_VALIDATORS = (
    check_stack,
    check_fleet_deadline,
    check_stack_budget,
    check_ingress_union,
    check_bucket_access_blocks,
    check_open_endpoint_structure,
)
"""Every stack validator, each callable as ``check(resources, config)``."""
