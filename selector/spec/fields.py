"""The spec's vocabulary: its literal choices, the unit-typed fields (``SizeGB``, ``Hours``,
``Count``, parsed by ``selector.units``) and the strict base every section derives from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

from selector import units

Task = Literal["serve", "batch", "embed", "finetune-lora", "finetune-qlora", "finetune-full", "pretrain"]
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4"]
FaultTolerance = Literal["none", "checkpointed", "stateless"]
Cloud = Literal["aws", "gcp"]
Optimizer = Literal["adamw", "adamw-8bit", "adamw-bf16", "sgd"]
EgressTarget = Literal["internet", "other-region", "other-cloud"]

ALL_CLOUDS: tuple[Cloud, ...] = ("aws", "gcp")
TRAINING_TASKS: frozenset[str] = frozenset({"finetune-lora", "finetune-qlora", "finetune-full", "pretrain"})
SERVING_TASKS: frozenset[str] = frozenset({"serve", "batch"})


def _parser(fn: Any) -> BeforeValidator:
    def run(value: object) -> object:
        try:
            return fn(value)
        except ValueError as err:
            raise ValueError(str(err)) from None

    return BeforeValidator(run)


SizeGB = Annotated[
    float,
    _parser(units.parse_size_gb),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": units.SIZE_PATTERN},
            ],
            "description": "size: a number of GB, or e.g. 200GB, 1.5TiB",
        }
    ),
]
Hours = Annotated[
    float,
    _parser(units.parse_duration_hours),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": units.DURATION_PATTERN,
            "description": "duration with a unit: 90s, 30m, 12h, 7d, 2w",
        }
    ),
]
Count = Annotated[
    float,
    _parser(units.parse_count),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": units.COUNT_PATTERN},
            ],
            "description": "count: a number, or e.g. 5e7, 50M, 2B",
        }
    ),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
