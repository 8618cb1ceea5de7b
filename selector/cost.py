"""Expected total cost of a workload on one offer: compute, storage and egress.

Compute is billed by the cloud's granularity; spot adds the expected rework of interruptions;
storage is the boot disks and the checkpoint bucket, prorated per GB-month; egress is priced
by the clouds' monthly tiers, including moving the dataset to where the GPUs are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from selector.catalog import InstanceType, Offer
from selector.obtainability import Obtainability, expected_wait_hours, failure_usd, launch_failure, wait_usd
from selector.rates import HOURS_PER_MONTH, CloudRates
from selector.setup_time import SetupTime, setup_time
from selector.sizing import Requirements, Shape
from selector.spec import TRAINING_TASKS, WorkloadSpec

DEFAULT_SERVING_HOURS = HOURS_PER_MONTH
"""A service with no declared duration is costed for one month (730 h)."""

OS_IMAGE_GB = 100.0
"""Boot disk room for the operating system, drivers, CUDA and frameworks: a gpufit default
(deep-learning images are tens of GB); override with ``storage.disk_gb``."""

CHECKPOINTS_KEPT = 2
"""Checkpoints held at once: the last complete one and the one being written."""

DISK_ROUND_GB = 10.0

INTERRUPTED_SHARE_PER_MONTH: dict[str, float] = {
    "<5%": 0.05,
    "5-10%": 0.10,
    "10-15%": 0.15,
    "15-20%": 0.20,
    ">20%": 0.30,
}
"""AWS Spot Instance Advisor buckets (share of instances interrupted in the past month),
taken at their upper bound to stay conservative; the open-ended '>20%' bucket is taken as
30%, a gpufit assumption."""

UNKNOWN_INTERRUPTION_BUCKET = ">20%"
"""Spot offers with no sourced interruption frequency (all of GCP, unlisted AWS types) are
costed as the worst bucket."""


def interruption_rate_per_hour(bucket: str | None) -> float:
    """Interruptions per instance-hour: −ln(1 − share) ÷ 730, the Poisson rate that
    interrupts ``share`` of instances within a month."""
    share = INTERRUPTED_SHARE_PER_MONTH[bucket or UNKNOWN_INTERRUPTION_BUCKET]
    return -math.log(1.0 - share) / HOURS_PER_MONTH


def spot_overhead_factor(rate_per_hour: float, checkpoint_interval_h: float, restart_h: float) -> float:
    """Expected run-time factor on spot: 1 + rate × (checkpoint interval ÷ 2 + restart overhead).

    Each interruption loses on average half a checkpoint interval of work plus the restart
    (the classic expected-rework model; stateless work loses only the restart)."""
    return 1.0 + rate_per_hour * (checkpoint_interval_h / 2.0 + restart_h)


@dataclass(frozen=True, slots=True)
class CostInputs:
    """Everything the cost model reads from the spec and requirements, computed once."""

    run_hours: float | None  # serving duration; None = from the job's own hours
    disk_gb: float
    bucket_gb: float
    keep_hours: float
    egress_gb: float
    egress_to: str
    dataset_gb: float
    data_cloud: str | None
    data_region: str | None
    checkpoint_interval_h: float
    restart_h: float
    budget_hourly: float | None
    budget_total: float | None
    # Job setup (selector.setup_time): what a job's machines fetch before its first step: the
    # checkpoint's real bytes (none for pretraining, which starts from scratch), the model
    # server when one runs, the dataset.
    setup_weights_bytes: float = 0.0
    setup_engine: bool = False
    setup_dataset_gb: float = 0.0


ENGINE_IMAGE_ALLOWANCE_GB = 30.0
"""Disk kept for a model server's container image: an allowance, not a measurement (the
engines' CUDA images are several GB compressed and larger unpacked)."""


def weights_cache_gb(spec: WorkloadSpec, req: Requirements) -> float:
    """A model server's weights, kept in the stack's bucket so that a replacement machine does
    not download them from the Hub again: the files it pulls, at their real dtypes
    (``Requirements.weights_file_bytes``: the Hub's safetensors counts, a preset's recorded
    checkpoint, or the published format; DeepSeek-R1's FP8 checkpoint is ~689 GB, not 2 B per
    parameter)."""
    return req.weights_file_bytes / 1e9 if spec.server_engine != "none" else 0.0


@dataclass(frozen=True, slots=True)
class DiskPart:
    """One thing the boot disk holds: a name, its GB and where the figure comes from."""

    name: str
    gb: float
    why: str


def disk_parts(spec: WorkloadSpec, req: Requirements) -> tuple[DiskPart, ...]:
    """What the boot disk must hold, part by part: the image, the weights (the checkpoint's
    files at their real dtypes), the engine's container image, the dataset, and what the
    job writes under ``outputs/`` there (synced to the bucket, never deleted from the disk):
    ``CHECKPOINTS_KEPT`` training checkpoints for training, ``storage.outputs_gb`` otherwise."""
    storage = spec.storage
    parts = [
        DiskPart("image", OS_IMAGE_GB, "operating system, drivers, CUDA, frameworks (a gpufit allowance)"),
        DiskPart("weights", req.weights_file_bytes / 1e9, "the model's checkpoint files, downloaded"),
    ]
    if spec.decode_engine != "none":  # a served model's, or the engine a token batch starts
        parts.append(DiskPart("engine image", ENGINE_IMAGE_ALLOWANCE_GB, "the model server's container"))
    if storage.dataset_gb:
        parts.append(DiskPart("dataset", storage.dataset_gb, "storage.dataset_gb"))
    if spec.task in TRAINING_TASKS and req.checkpoint_bytes:
        parts.append(
            DiskPart(
                "checkpoints",
                CHECKPOINTS_KEPT * req.checkpoint_bytes / 1e9,
                f"{CHECKPOINTS_KEPT} × {req.checkpoint_bytes / 1e9:,.1f} GB under outputs/ (the last "
                "complete one and the one being written)",
            )
        )
    if storage.outputs_gb:
        parts.append(DiskPart("outputs", storage.outputs_gb, "storage.outputs_gb under outputs/"))
    return tuple(parts)


def outputs_note(spec: WorkloadSpec) -> str | None:
    """What the plan says when a job's outputs are not in the disk size (None when they are,
    or when nothing but a server runs)."""
    if spec.storage.disk_gb is not None:
        return "boot disk: storage.disk_gb as given (outputs/ must fit in it)"
    if spec.task in TRAINING_TASKS or spec.storage.outputs_gb or spec.job.command is None:
        return None
    return (
        "outputs/ is synced to the bucket but kept on disk, and its size is not counted: "
        "set storage.outputs_gb to what the job writes"
    )


def disk_size_gb(spec: WorkloadSpec, req: Requirements) -> float:
    """``storage.disk_gb`` when given, else the parts' sum rounded up to ``DISK_ROUND_GB``."""
    if spec.storage.disk_gb is not None:
        return spec.storage.disk_gb
    raw = sum(part.gb for part in disk_parts(spec, req))
    return math.ceil(raw / DISK_ROUND_GB) * DISK_ROUND_GB


def cost_inputs(spec: WorkloadSpec, req: Requirements) -> CostInputs:
    storage = spec.storage
    disk = disk_size_gb(spec, req)
    run_hours = None
    if spec.task == "serve" or (spec.task == "batch" and req.batch_tokens is None and spec.work is None):
        run_hours = spec.duration if spec.duration is not None else DEFAULT_SERVING_HOURS
    stateless = spec.fault_tolerance == "stateless"
    # a token batch starts an engine, gpufit's (spec.decode_engine) or job.command's own with
    # serving.engine none: its start is setup too (only gpufit's image is on the disk plan)
    generates_tokens = spec.task == "batch" and req.batch_tokens is not None
    return CostInputs(
        run_hours=run_hours,
        disk_gb=disk,
        bucket_gb=req.checkpoint_bytes * CHECKPOINTS_KEPT / 1e9 + weights_cache_gb(spec, req),
        keep_hours=storage.keep_days * 24.0,
        egress_gb=spec.egress.gb,
        egress_to=spec.egress.to,
        dataset_gb=storage.dataset_gb,
        data_cloud=spec.data.cloud if spec.data else None,
        data_region=spec.data.region if spec.data else None,
        checkpoint_interval_h=0.0 if stateless else spec.checkpoint_interval,
        restart_h=spec.restart_overhead,
        budget_hourly=spec.budget.max_hourly_usd,
        budget_total=spec.budget.max_total_usd,
        setup_weights_bytes=0.0 if spec.task == "pretrain" else req.weights_file_bytes,
        setup_engine=spec.server_engine != "none" or generates_tokens,
        setup_dataset_gb=storage.dataset_gb,
    )


# --- Job setup time (issue 24, defect 7) -------------------------------------------------


def job_setup(offer: Offer, inputs: CostInputs) -> SetupTime | None:
    """A job's setup on ``offer`` (``selector.setup_time``), billed before its first step; None
    for a service, whose duration is what it is billed for."""
    return instance_setup(offer.instance, inputs)


def instance_setup(it: InstanceType, inputs: CostInputs) -> SetupTime | None:
    """``job_setup`` on every offer of instance type ``it`` (it depends on the cloud and machine
    type, not on the region or market): what ``sizing.fit`` leaves out of the ttl for the work."""
    if inputs.run_hours is not None:
        return None
    return setup_time(
        it.cloud,
        inputs.setup_weights_bytes,
        inputs.setup_engine,
        inputs.setup_engine,
        inputs.setup_dataset_gb,
        inputs.disk_gb,
        it.machine_type,
    )


def instance_setup_hours(it: InstanceType, inputs: CostInputs) -> float:
    """Hours of ``instance_setup``; 0 for a service."""
    setup = instance_setup(it, inputs)
    return setup.hours if setup is not None else 0.0


@dataclass(frozen=True, slots=True)
class Cost:
    """The expected cost of running the workload on one offer, with its parts."""

    hours: float
    billed_hours: float
    hourly_usd: float
    compute_usd: float
    disk_usd: float
    bucket_usd: float
    egress_usd: float
    data_transfer_usd: float
    spot_factor: float
    interruption_rate_per_h: float
    unpriced: tuple[str, ...]
    on_demand_base: int = 0  # instances of a spot serving fleet kept on-demand
    setup_hours: float = 0.0  # a job's setup inside ``hours`` (selector.setup_time)
    obtainability: Obtainability | None = None
    wait_value_per_hour: float = 0.0
    wait_usd: float = 0.0
    wait_window_hours: float | None = None  # a job's hours to wait before its deadline; None: a service
    launch_failure: float = 0.0  # the chance of no capacity before the deadline (an estimate)
    failure_usd: float = 0.0  # what that adds to the expected cost (selector.obtainability)

    @property
    def storage_usd(self) -> float:
        return self.disk_usd + self.bucket_usd

    @property
    def other_usd(self) -> float:
        """Everything but compute: storage, egress and moving the dataset."""
        return self.disk_usd + self.bucket_usd + self.egress_usd + self.data_transfer_usd

    @property
    def total_usd(self) -> float:
        """What is billed: compute, storage, egress, dataset transfer."""
        return self.compute_usd + self.other_usd

    @property
    def interruptions(self) -> float:
        """Expected spot interruptions over the run (each asks for capacity anew)."""
        return self.interruption_rate_per_h * self.hours

    @property
    def wait_hours(self) -> float:
        """Expected hours waiting for capacity, at launch and after each interruption."""
        if self.obtainability is None:
            return 0.0
        return expected_wait_hours(self.obtainability, self.interruptions, self.wait_window_hours)

    @property
    def expected_usd(self) -> float:
        """What plans rank by: the billed total plus the expected wait's value and what a
        failure to launch adds (``selector.obtainability``)."""
        return self.total_usd + self.wait_usd + self.failure_usd


def with_wait(
    cost: Cost,
    obt: Obtainability,
    value_per_hour: float,
    deadline_hours: float | None = None,
    rerun_usd: float | None = None,
) -> Cost:
    """``cost`` with the offer's obtainability, the value of its expected wait (an hour of it
    at ``value_per_hour``) and of a failure to launch before ``deadline_hours`` (a job's TTL;
    None for a service), the job then re-run at ``rerun_usd`` (``selector.obtainability``)."""
    window = None if deadline_hours is None else max(deadline_hours - cost.hours, 0.0)
    waited = wait_usd(obt, cost.interruptions, value_per_hour, window)
    failed = failure_usd(obt, window, value_per_hour, cost.total_usd + waited, rerun_usd)
    return replace(
        cost,
        obtainability=obt,
        wait_value_per_hour=value_per_hour,
        wait_usd=waited,
        wait_window_hours=window,
        launch_failure=launch_failure(obt, window),
        failure_usd=failed,
    )


def _transfer_usd(rates_from: CloudRates, same_cloud: bool, gb: float, months: float) -> float | None:
    if gb <= 0:
        return 0.0
    if same_cloud:
        rate = rates_from.egress_inter_region_usd_per_gb
        return None if rate is None else gb * rate
    return rates_from.internet_egress_usd(gb, months)


def run_hours(
    offer: Offer, shape: Shape, inputs: CostInputs, on_demand_instances: int = 0
) -> tuple[float, float, float]:
    """Expected hours the instances run (a job's setup included, ``job_setup``), the spot
    factor and the interruption rate (of the spot instances: those of an on-demand base are
    not interrupted)."""
    setup = job_setup(offer, inputs)
    base = inputs.run_hours if inputs.run_hours is not None else (shape.job_hours or 0.0)
    base += setup.hours if setup is not None else 0.0
    if offer.market != "spot":
        return base, 1.0, 0.0
    rate = interruption_rate_per_hour(offer.interruption_bucket) * (shape.instances - on_demand_instances)
    factor = spot_overhead_factor(rate, inputs.checkpoint_interval_h, inputs.restart_h)
    return base * factor, factor, rate


def cost_key(offer: Offer, inputs: CostInputs, base: tuple[int, float] = (0, 0.0)) -> tuple[object, ...]:
    """What, besides the hourly price, ``offer_cost`` depends on for a given instance type:
    offers that share this key share billed hours and every non-compute cost, so a caller
    may compute ``offer_cost`` once per key (``select.plan`` does, for speed)."""
    return (
        offer.market,
        offer.interruption_bucket,
        offer.region == inputs.data_region,
        base,
        capacity_billed_hours(offer),
    )


def offer_cost(
    offer: Offer,
    shape: Shape,
    inputs: CostInputs,
    rates: dict[str, CloudRates],
    on_demand_base: tuple[int, float] = (0, 0.0),
) -> Cost:
    """Expected total cost of the workload on ``offer`` run as ``shape``. ``on_demand_base``:
    (instances of a spot serving fleet kept on-demand, their on-demand $/h each)."""
    cloud_rates = rates[offer.cloud]
    base_instances, base_price = on_demand_base
    hours, factor, rate = run_hours(offer, shape, inputs, base_instances)
    block = capacity_billed_hours(offer)
    billed = block if block is not None else cloud_rates.billed_hours(hours)
    hourly = offer.hourly_usd * (shape.instances - base_instances) + base_price * base_instances
    months = max(hours / HOURS_PER_MONTH, 1.0)
    unpriced: list[str] = []
    disk = cloud_rates.block_usd_per_gb_month * inputs.disk_gb * shape.instances * billed / HOURS_PER_MONTH
    bucket = (
        cloud_rates.object_usd_per_gb_month * inputs.bucket_gb * (hours + inputs.keep_hours) / HOURS_PER_MONTH
    )
    if inputs.egress_to == "other-region":
        egress = _transfer_usd(cloud_rates, True, inputs.egress_gb, months)
    else:
        egress = cloud_rates.internet_egress_usd(inputs.egress_gb, months)
    if egress is None:
        unpriced.append(f"egress to another region on {offer.cloud} (no sourced price)")
        egress = 0.0
    transfer: float | None = 0.0
    if inputs.data_cloud is not None and inputs.dataset_gb > 0:
        same_cloud = inputs.data_cloud == offer.cloud
        if not (same_cloud and inputs.data_region == offer.region):
            # Every machine of the job pulls the dataset.
            gb = inputs.dataset_gb * shape.instances
            transfer = _transfer_usd(rates[inputs.data_cloud], same_cloud, gb, 1.0)
            if transfer is None:
                unpriced.append(f"moving the dataset between {inputs.data_cloud} regions (no sourced price)")
                transfer = 0.0
    return Cost(
        hours=hours,
        billed_hours=billed,
        hourly_usd=hourly,
        compute_usd=hourly * billed,
        disk_usd=disk,
        bucket_usd=bucket,
        egress_usd=egress,
        data_transfer_usd=transfer or 0.0,
        spot_factor=factor,
        interruption_rate_per_h=rate,
        unpriced=tuple(unpriced),
        on_demand_base=base_instances,
        setup_hours=setup.hours if (setup := job_setup(offer, inputs)) is not None else 0.0,
    )


# --- Capacity options (issue 26): a Capacity Block is paid for its whole duration -----------


def capacity_billed_hours(offer: Offer) -> float | None:
    """The hours a capacity offer bills whatever the run (a Capacity Block's whole duration,
    the idle tail included: "The reservation fee is charged up front",
    https://aws.amazon.com/ec2/capacityblocks/pricing/); None for the others, billed as run."""
    if offer.market not in ("capacity-block", "calendar-reservation"):  # a calendar window is held too
        return None
    from selector.capacity import block_billed_hours

    return block_billed_hours(offer)
