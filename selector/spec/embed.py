"""``task: embed``: documents encoded in one forward pass each (embeddings, and scoring or
classification, whose cross-encoder or classifier head reads the same pass): prefill only, no
token is decoded."""

from __future__ import annotations

from pydantic import Field, model_validator

from selector.spec.fields import Count, Strict


class EmbedSpec(Strict):
    """The documents a ``task: embed`` job encodes."""

    documents: Count = Field(description="documents (or query-document pairs) to encode in all, e.g. 1e8")
    tokens_per_document: int = Field(512, gt=0, le=1_048_576, description="mean tokens per document")
    max_tokens: int | None = Field(
        None,
        gt=0,
        le=1_048_576,
        description="the longest document's tokens (sizes memory); default: the mean",
    )

    @model_validator(mode="after")
    def _positive(self) -> EmbedSpec:
        if self.documents <= 0:
            raise ValueError("embed.documents must be above 0")
        if self.max_tokens is not None and self.max_tokens < self.tokens_per_document:
            raise ValueError("embed.max_tokens must be at least embed.tokens_per_document")
        return self

    @property
    def longest(self) -> int:
        return self.max_tokens or self.tokens_per_document
