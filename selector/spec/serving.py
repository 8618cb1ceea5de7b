"""The ``serving`` section of a spec: context, concurrency and speed per stream, the model
server, and how the endpoint is exposed (its port, TLS certificate, on-demand base)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from selector.spec.fields import Count, Strict
from selector.spec.tls import cm_certificate, dns_name

ACM_CERTIFICATE_ARN = re.compile(
    r"arn:aws[a-z-]*:acm:[a-z]{2}(?:-[a-z]+)+-[0-9]+:[0-9]{12}:"
    r"certificate/[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}"
)
r"""``serving.certificate_arn``, matched whole:
``arn:${Partition}:acm:${Region}:${Account}:certificate/${CertificateId}``, the id a UUID
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_awscertificatemanager.html);
within ACM's own ``Arn`` shape (botocore acm 2015-12-08:
``arn:[\w+=/,.@-]+:acm:[\w+=/,.@-]*:[0-9]+:[\w+=,.@-]+(/[\w+=,.@-]+)*``)."""


class RopeScalingSpec(Strict):
    """Opt into a longer context than the model's config allows, by the YaRN recipe its card
    documents (presets carry it; otherwise give both values as the card states them)."""

    type: Literal["yarn"] = Field("yarn", description="yarn: the only RoPE scaling gpufit launches")
    factor: float | None = Field(None, gt=1, le=64, description="default: the preset's documented factor")
    original_max_position_embeddings: int | None = Field(
        None, gt=0, description="the context the model was trained at; default: the preset's"
    )


class ServingSpec(Strict):
    context_tokens: int = Field(4096, gt=0, description="tokens of context per sequence")
    concurrency: int = Field(1, gt=0, description="sequences resident at once per replica")
    tokens_per_s_per_stream: float | None = Field(None, gt=0)
    tokens_per_s_total: float | None = Field(None, gt=0, description="replicas follow from it")
    kv_cache_precision: Literal["fp32", "bf16", "fp16", "fp8", "int8"] | None = Field(
        None, description="default: bf16 (fp32 for fp32 models)"
    )
    tokens: Count | None = Field(None, description="batch: tokens to generate in all")
    prompt_tokens: int | None = Field(
        None,
        gt=0,
        description="expected prompt tokens per request (the rest of context_tokens is output): decode "
        "reads the KV cache at the mean context and pays for arriving prompts; default: unknown, sized "
        "at the full context (safe)",
    )
    engine: Literal["vllm", "sglang", "none"] | None = Field(
        None,
        description="model server gpufit starts: serve, default vllm for transformer models "
        "without a job.command; a token batch, default vllm on 127.0.0.1 for job.command",
    )
    own_server: Literal["transformers", "transformers-legacy", "chunked"] = Field(
        "transformers",
        description="engine none: how your server holds memory. transformers (default: a Hugging Face "
        "generate from 4.45, one unchunked prefill of every prompt, the most a current server holds); "
        "transformers-legacy (before 4.45: also every prompt position's logits in fp32 and, before 4.42, "
        "the KV cache twice); chunked (a server that prefills in chunks, as vLLM, SGLang and TGI do)",
    )
    images_per_request: int = Field(
        0, ge=0, le=64, description="multimodal models: images in each sequence's context"
    )
    image_tokens: int | None = Field(
        None, gt=0, description="context tokens one image takes; default: from the model's config"
    )
    expose: Literal["private", "load_balancer"] = Field(
        "private", description="private: no inbound route (port-forward); load_balancer: an LB for api_cidrs"
    )
    port: int = Field(8000, ge=1024, le=65000, description="the server's port on the machine (first replica)")
    certificate_arn: str | None = Field(
        None,
        pattern=f"^{ACM_CERTIFICATE_ARN.pattern}$",  # for editors; _acm_arn matches it whole
        description="AWS: ACM certificate for an HTTPS listener (its ARN)",
    )
    domain: str | None = Field(
        None,
        max_length=253,
        description="GCP: HTTPS with a Google-managed certificate for this domain (Certificate Manager, DNS "
        "authorization: add the DNS record the stack outputs, then point the domain at the endpoint)",
    )
    certificate: str | None = Field(
        None,
        max_length=200,
        description="GCP: HTTPS with a Certificate Manager certificate of your own in the plan's region, "
        "projects/P/locations/REGION/certificates/NAME",
    )
    allow_plain_http: bool = Field(
        False,
        description="serve a load-balanced endpoint over plain HTTP (no certificate): the API key and every "
        "prompt cross the internet unencrypted",
    )
    on_demand_base: int | None = Field(
        None,
        ge=0,
        le=1000,
        description="serve on spot: replicas always kept on-demand, so the endpoint survives a spot "
        "drought; default 1 when the endpoint runs two replicas or more, else 0",
    )
    rope_scaling: RopeScalingSpec | None = Field(
        None, description="YaRN opt-in for a context above the model's maximum, where the model documents it"
    )
    engine_args: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(
        default_factory=list,
        max_length=64,
        description="more flags for the engine (tool-call and reasoning parsers, speculative decoding ...), "
        "checked against the pinned engine release's own flags; not those gpufit sets",
    )

    @field_validator("certificate_arn")
    @classmethod
    def _acm_arn(cls, value: str | None) -> str | None:
        if value is not None and not ACM_CERTIFICATE_ARN.fullmatch(value):
            raise ValueError(
                f"got {value!r}; expected an ACM certificate ARN such as "
                "arn:aws:acm:us-east-1:123456789012:certificate/12345678-1234-1234-1234-123456789012"
            )
        return value

    @field_validator("domain")
    @classmethod
    def _dns_name(cls, value: str | None) -> str | None:
        return dns_name(value)

    @field_validator("certificate")
    @classmethod
    def _cm_certificate(cls, value: str | None) -> str | None:
        return cm_certificate(value)
