"""A load-balanced endpoint's transport: the certificate fields of ``serving`` (AWS
``certificate_arn``; GCP ``domain`` for a Google-managed certificate, ``certificate`` for one of
your own) and the plain-HTTP opt-in ``allow_plain_http``."""

from __future__ import annotations

import re
from typing import Protocol

TLS_DOMAIN = re.compile(
    r"(?=.{4,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]"
)
"""``serving.domain``, matched whole: a lower-case DNS name of two labels or more (RFC 1035
label rules), the name a Certificate Manager DNS authorization takes
(https://cloud.google.com/certificate-manager/docs/dns-authorizations)."""
CM_CERTIFICATE = re.compile(
    r"projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/locations/[a-z]+-[a-z]+[0-9]+/certificates/[a-z][a-z0-9-]{0,62}"
)
"""``serving.certificate``, matched whole: a regional Certificate Manager certificate,
``projects/{project}/locations/{location}/certificates/{name}``, the form
``RegionTargetHttpsProxy.certificateManagerCertificates`` takes
(https://cloud.google.com/compute/docs/reference/rest/v1/regionTargetHttpsProxies)."""


class ServingTls(Protocol):
    @property
    def expose(self) -> str: ...
    @property
    def certificate_arn(self) -> str | None: ...
    @property
    def domain(self) -> str | None: ...
    @property
    def certificate(self) -> str | None: ...
    @property
    def allow_plain_http(self) -> bool: ...


def dns_name(value: str | None) -> str | None:
    if value is not None and not TLS_DOMAIN.fullmatch(value):
        raise ValueError(f"got {value!r}; expected a lower-case DNS name such as api.example.com")
    return value


def cm_certificate(value: str | None) -> str | None:
    if value is not None and not CM_CERTIFICATE.fullmatch(value):
        raise ValueError(
            f"got {value!r}; expected a Certificate Manager certificate such as "
            "projects/my-project/locations/us-central1/certificates/my-cert"
        )
    return value


def tls_problems(serving: ServingTls, clouds: list[str]) -> list[str]:
    """A load-balanced endpoint serves HTTPS with a certificate for each cloud it may run on
    (AWS: ``certificate_arn``; GCP: ``domain``, Google-managed, or ``domain`` + ``certificate``,
    your own certificate for that name), or plain HTTP only with ``allow_plain_http``; GCP fields
    only where GCP may serve; one line per problem."""
    if serving.expose != "load_balancer":
        given = [
            f for f in ("certificate_arn", "domain", "certificate", "allow_plain_http") if getattr(serving, f)
        ]
        return [f"serving.{f} is for serving.expose load_balancer" for f in given]
    problems = []
    if serving.certificate is not None and serving.domain is None:
        problems.append(
            "serving.certificate: give serving.domain too, the DNS name the certificate is for "
            "(clients verify it; https://<load balancer IP> would not match)"
        )
    if "gcp" not in clouds:
        problems += [
            f"serving.{f}: GCP only (Certificate Manager), but placement.clouds has no gcp; leave it out"
            for f in ("domain", "certificate")
            if getattr(serving, f) is not None
        ]
    if serving.allow_plain_http:
        if serving.certificate_arn or serving.domain or serving.certificate:
            problems.append("serving.allow_plain_http: the endpoint has a certificate; leave it out")
        return problems
    has = {"aws": serving.certificate_arn is not None, "gcp": bool(serving.domain or serving.certificate)}
    field_of = {"aws": "serving.certificate_arn", "gcp": "serving.domain (or serving.certificate)"}
    missing = [c for c in clouds if not has.get(c, False)]
    if missing and not any(has.values()):
        problems.append(
            "serving.allow_plain_http: a load-balanced endpoint needs a certificate "
            f"({' / '.join(field_of[c] for c in clouds)}) or allow_plain_http: true to serve plain HTTP"
        )
    else:
        problems += [
            f"{field_of[c]}: the endpoint may run on {c.upper()} (placement.clouds) without a certificate "
            "there; give it, restrict placement.clouds, or set serving.allow_plain_http"
            for c in missing
        ]
    return problems
