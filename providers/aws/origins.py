"""What the sweep's proof of origin (``providers.aws.provenance``) reads from AWS: the region's
gpufit-tagged launch templates with their creator (``ec2:DescribeLaunchTemplates``), instance
profiles' tags (``iam:GetInstanceProfile``, once per profile per sweep) and the deploy identity
(given, else the caller's own from ``sts:GetCallerIdentity``, which needs no permission:
https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from typing import Any

from cloudapi.aws import PRICING_REGION, AwsApi
from cloudapi.calls import AuthError
from deployment import TAG_MANAGED
from providers.aws.provenance import Template


def _error_code(error: BaseException) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


class OriginLookups:
    """The lookups, cached for one sweeper; safe to share between the region threads."""

    def __init__(self, api: AwsApi, deployers: Iterable[str] | None) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._profiles: dict[str, dict[str, str] | None] = {}
        self._deployers = frozenset(deployers) if deployers else None

    def deployers(self) -> frozenset[str]:
        """The identities whose launch templates are gpufit's: those given, else the caller's
        own (the identity that deploys when one identity both deploys and sweeps)."""
        with self._lock:
            if self._deployers is None:
                sts = self._api.client("sts", PRICING_REGION)
                answer = self._api.call("sts", "GetCallerIdentity", sts.get_caller_identity)
                self._deployers = frozenset({str(answer["Arn"])})
            return self._deployers

    def templates(self, region: str) -> dict[str, Template]:
        """The region's launch templates tagged ``gpufit:managed=true``: id -> tags and creator."""
        ec2 = self._api.client("ec2", region)
        found: dict[str, Template] = {}
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Filters": [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]}
            if token:
                args["NextToken"] = token
            page = self._api.call(
                "ec2", "DescribeLaunchTemplates", functools.partial(ec2.describe_launch_templates, **args)
            )
            for t in page.get("LaunchTemplates", []):
                found[str(t["LaunchTemplateId"])] = Template(
                    tags={str(x.get("Key")): str(x.get("Value", "")) for x in t.get("Tags") or []},
                    created_by=str(t.get("CreatedBy") or ""),
                )
            token = page.get("NextToken")
            if not token:
                return found

    def profile_tags(self, name: str) -> dict[str, str] | None:
        """An instance profile's tags (IAM is global: asked once per sweep); None when it is gone."""
        with self._lock:
            if name in self._profiles:
                return self._profiles[name]
        iam = self._api.client("iam", PRICING_REGION)
        try:
            answer = self._api.call(
                "iam",
                "GetInstanceProfile",
                functools.partial(iam.get_instance_profile, InstanceProfileName=name),
            )
            tags: dict[str, str] | None = {
                str(t.get("Key")): str(t.get("Value", ""))
                for t in answer["InstanceProfile"].get("Tags") or []
            }
        except AuthError:
            raise
        except Exception as error:
            if _error_code(error) != "NoSuchEntity":
                raise
            tags = None
        with self._lock:
            self._profiles[name] = tags
        return tags
