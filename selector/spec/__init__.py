"""The workload spec: what a user declares, validated into an immutable ``WorkloadSpec``.

A spec is a YAML file, or the ``gpufit:workload`` object of a Pulumi stack file. Quantities
take units (see ``selector.units``). Every problem becomes one ``SpecProblem`` line naming
the field, what was wrong and what was expected; loading never raises anything else.

The package's parts: ``fields`` (literals, unit-typed fields), ``model`` (the ``model``
section and its resolution to a ``ModelArch``), ``serving`` (the ``serving`` section),
``workload`` (the other sections and ``WorkloadSpec``), ``loading`` (problems, parsing, loading, schemas).
"""

from selector.spec.exclusion import AttemptSpec, ExcludeSpec
from selector.spec.fields import (
    ALL_CLOUDS,
    SERVING_TASKS,
    TRAINING_TASKS,
    Cloud,
    Count,
    EgressTarget,
    FaultTolerance,
    Hours,
    Optimizer,
    Precision,
    SizeGB,
    Task,
)
from selector.spec.loading import (
    STACK_KEY,
    SpecError,
    SpecProblem,
    json_schema,
    load_spec,
    load_spec_text,
    one_line,
    parse_spec,
    stack_json_schema,
)
from selector.spec.model import (
    SAFETENSORS_DTYPE_BYTES,
    HubFetcher,
    HubModel,
    ModelSpec,
    config_arch,
    hub_arch,
    pin_commit,
    use_hub,
)
from selector.spec.secrets import SecretSource, secret_sources
from selector.spec.serving import ServingSpec
from selector.spec.workload import (
    AccessSpec,
    BudgetSpec,
    DataSpec,
    EgressSpec,
    JobSpec,
    PlacementSpec,
    StorageSpec,
    TeardownSpec,
    TrainingSpec,
    TuningSpec,
    WorkloadSpec,
    WorkSpec,
)

__all__ = [
    "ALL_CLOUDS",
    "SAFETENSORS_DTYPE_BYTES",
    "SERVING_TASKS",
    "STACK_KEY",
    "TRAINING_TASKS",
    "AccessSpec",
    "AttemptSpec",
    "BudgetSpec",
    "Cloud",
    "Count",
    "DataSpec",
    "EgressSpec",
    "EgressTarget",
    "ExcludeSpec",
    "FaultTolerance",
    "Hours",
    "HubFetcher",
    "HubModel",
    "JobSpec",
    "ModelSpec",
    "Optimizer",
    "PlacementSpec",
    "Precision",
    "SecretSource",
    "ServingSpec",
    "SizeGB",
    "SpecError",
    "SpecProblem",
    "StorageSpec",
    "Task",
    "TeardownSpec",
    "TrainingSpec",
    "TuningSpec",
    "WorkSpec",
    "WorkloadSpec",
    "config_arch",
    "hub_arch",
    "json_schema",
    "load_spec",
    "load_spec_text",
    "one_line",
    "parse_spec",
    "pin_commit",
    "secret_sources",
    "stack_json_schema",
    "use_hub",
]
