"""The GCP plain-VM component under Pulumi's mock engine: what it asks Google Cloud to create.

Every test builds a ``Deployment`` by hand (fixed times, no clock), runs the component under
``pulumi.runtime.set_mocks`` and inspects the recorded resource inputs (camelCase, numbers as
floats), the resource options the engine saw, and the resolved stack outputs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pytest
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs

from deployment import Deployment
from machine.lifecycle import RDZV_PORT
from providers.gcp.common import BUCKET_ROLE, CLOUD_PLATFORM_SCOPE, DLVM_IMAGE, service_account_id
from providers.gcp.component import IAP_SSH_RANGE, GcpGpuInstance, GcpProvider, first_up_zone, scheduling
from tests.contracts import Contracts, Stack
from tests.machine.unpack import file_named, settings

INSTANCE = "gcp:compute/instance:Instance"
FIREWALL = "gcp:compute/firewall:Firewall"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"
ACCOUNT = "gcp:serviceaccount/account:Account"
NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
ADDRESS = "gcp:compute/address:Address"
SERVICE = "gcp:projects/service:Service"
COMPONENT = "gpufit:gcp:GpuInstance"
GET_ZONES = "gcp:compute/getZones:getZones"
GET_SUBNETWORK = "gcp:compute/getSubnetwork:getSubnetwork"


def leader_ip(index: int) -> str:
    """The address the mock hands the reserved address of machine ``index``."""
    return f"10.64.1.{index + 10}"


MASTER_IP = leader_ip(0)
ZONES_UNSORTED = ["us-central1-f", "us-central1-c", "us-central1-a", "us-central1-b"]

CREATED = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)
EXPIRES = datetime(2026, 12, 4, 13, 0, tzinfo=UTC)
LIFETIME_S = 12 * 3600

A3_SPOT = Deployment(
    stack="dev",
    project="gpufit",
    workload="llama-ft",
    task="finetune-lora",
    cloud="gcp",
    region="us-central1",
    zone=None,
    instance_type="a3-highgpu-8g",
    machine_type="a3-highgpu-8g",
    attached_accelerator=None,
    gpu="H100",
    gpu_count=8,
    nodes=1,
    market="spot",
    fault_tolerance="checkpointed",
    disk_gb=500,
    bucket_keep_days=14,
    retain_bucket=False,
    ssh_cidrs=(),
    created_at=CREATED,
    expires_at=EXPIRES,
    hourly_usd=30.123456,
    estimated_total_usd=361.4815,
    needs_node_interconnect=False,
    command="python train.py",
    checkpoint_command="python save.py",
    workdir="/var/lib/gpufit",
)

N1_ON_DEMAND = dataclasses.replace(
    A3_SPOT,
    instance_type="n1-standard-8+t4x1",
    machine_type="n1-standard-8",
    attached_accelerator="nvidia-tesla-t4",
    gpu="T4",
    gpu_count=1,
    market="on-demand",
    fault_tolerance="none",
    zone="us-central1-b",
    disk_gb=120,
)


@dataclass
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]
    provider: str
    parent: str
    retain_on_delete: bool
    dependencies: list[str]


@dataclass
class Recorder(pulumi.runtime.Mocks):
    """Records every resource and invoke; fills in what Google Cloud would return."""

    zones: list[str] = field(default_factory=lambda: list(ZONES_UNSORTED))
    resources: list[Registered] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    requests: dict[tuple[str, str], Any] = field(default_factory=dict)
    urns: dict[tuple[str, str], str] = field(default_factory=dict)
    contracts: Contracts = field(default_factory=lambda: Contracts(Stack(now=CREATED)))

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        request = self.requests[(args.typ, args.name)]
        # What Google Cloud would refuse, the mock refuses (tests/contracts).
        key = (args.typ, args.name)
        inputs = dict(args.inputs)
        self.contracts.register(args.typ, args.name, inputs, f"{args.name}-id", request, self.urns[key])
        self.resources.append(
            Registered(
                typ=args.typ,
                name=args.name,
                inputs=dict(args.inputs),
                provider=args.provider or "",
                parent=request.parent,
                retain_on_delete=bool(request.retainOnDelete),
                dependencies=list(request.dependencies),
            )
        )
        state = dict(args.inputs)
        state.setdefault("name", f"{args.name}-1a2b3c4")
        state["selfLink"] = f"https://compute.googleapis.com/mock/{args.typ}/{args.name}"
        if args.typ == INSTANCE:
            nics = [dict(nic) for nic in state["networkInterfaces"]]
            nics[0].setdefault("networkIp", "10.64.0.17")
            state["networkInterfaces"] = nics
        elif args.typ == ADDRESS:
            leader = int(args.name.removesuffix("-ip").rsplit("-node", 1)[1])
            state.setdefault("address", leader_ip(leader))
        elif args.typ == ACCOUNT:
            email = f"{args.inputs['accountId']}@proj.iam.gserviceaccount.com"
            state.update(email=email, member=f"serviceAccount:{email}")
        return f"{args.name}-id", state

    def call(self, args: MockCallArgs) -> dict[str, Any]:
        self.calls.append((args.token, dict(args.args)))
        if args.token == GET_ZONES:
            return {"id": "zones", "names": self.zones}
        if args.token == GET_SUBNETWORK:
            return {
                "selfLink": "projects/p/regions/us-central1/subnetworks/shared",
                "network": "projects/p/global/networks/shared-vpc",
            }
        raise NotImplementedError(args.token)

    def of(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str) -> Registered:
        found = self.of(typ)
        assert len(found) == 1, f"expected one {typ}, got {[r.name for r in found]}"
        return found[0]


class RecordingMonitor(MockMonitor):
    """The mock engine, also keeping each registration request (options are not in the mock args)."""

    def __init__(self, mocks: Recorder) -> None:
        super().__init__(mocks)
        self.recorder = mocks

    def RegisterResource(self, request: Any) -> Any:
        self.recorder.requests[(request.type, request.name)] = request
        urn = self.make_urn(request.parent, request.type, request.name)
        self.recorder.urns[(request.type, request.name)] = urn
        return super().RegisterResource(request)


@dataclass
class Run:
    recorder: Recorder
    outputs: dict[str, Any]

    def instances(self) -> list[Registered]:
        return sorted(self.recorder.of(INSTANCE), key=lambda r: r.name)


def provision(deployment: Deployment, *, with_provider: bool = False) -> Run:
    recorder = Recorder()
    pulumi.runtime.set_mocks(
        recorder, project="gpufit", stack="test", preview=False, monitor=RecordingMonitor(recorder)
    )
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def build() -> pulumi.Output[None]:
        provider = gcp.Provider("explicit", project="my-project") if with_provider else None
        # The plain-VM component (replicas that span nodes); single-node replicas go to the
        # fleet (tests/test_gcp_fleet.py), but the component serves any deployment.
        component = GcpGpuInstance(deployment.name, deployment, pulumi.ResourceOptions(provider=provider))
        outputs = component.outputs
        return pulumi.Output.all(**outputs).apply(resolved.update)

    try:
        build()
    except Exception as err:
        recorder.contracts.reraise(err)
    recorder.contracts.finish()
    return Run(recorder, resolved)


@pytest.fixture(scope="module")
def a3() -> Run:
    return provision(A3_SPOT)


@pytest.fixture(scope="module")
def n1() -> Run:
    return provision(N1_ON_DEMAND)


@pytest.fixture(scope="module")
def cluster() -> Run:
    return provision(
        dataclasses.replace(
            A3_SPOT,
            nodes=2,
            nodes_per_replica=2,
            needs_node_interconnect=True,
            ssh_cidrs=("198.51.100.7/32",),
        )
    )


@pytest.mark.parametrize(
    ("market", "fault_tolerance", "spot"),
    [("spot", "checkpointed", True), ("spot", "none", True), ("on-demand", "none", False)],
)
def test_scheduling_follows_market_and_the_deadline_always_deletes(
    market: str, fault_tolerance: str, spot: bool
) -> None:
    run = provision(dataclasses.replace(A3_SPOT, market=market, fault_tolerance=fault_tolerance))
    sched = run.instances()[0].inputs["scheduling"]
    assert sched["provisioningModel"] == ("SPOT" if spot else "STANDARD")
    assert sched["preemptible"] is spot
    assert sched["automaticRestart"] is (not spot)
    assert sched["onHostMaintenance"] == "TERMINATE"
    # One action serves preemption and deadline; the deadline must delete, so DELETE for all.
    assert sched["instanceTerminationAction"] == "DELETE"
    assert sched["maxRunDuration"] == {"seconds": LIFETIME_S}
    assert "terminationTime" not in sched


def test_lifetime_beyond_compute_engines_limit_is_refused() -> None:
    too_long = dataclasses.replace(A3_SPOT, expires_at=datetime(2027, 6, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="120-day"):
        scheduling(too_long)
    with pytest.raises(ValueError, match="120-day"):
        GcpGpuInstance(too_long.name, too_long)
    assert scheduling(dataclasses.replace(too_long, expires_at=datetime(2027, 4, 3, 1, tzinfo=UTC)))


def test_a3_carries_its_gpus_and_n1_attaches_them(a3: Run, n1: Run) -> None:
    a3_vm = a3.instances()[0].inputs
    assert a3_vm["machineType"] == "a3-highgpu-8g"
    assert "guestAccelerators" not in a3_vm
    n1_vm = n1.instances()[0].inputs
    assert n1_vm["machineType"] == "n1-standard-8"
    assert n1_vm["guestAccelerators"] == [{"type": "nvidia-tesla-t4", "count": 1}]


def test_boot_disk_and_nic(a3: Run, n1: Run) -> None:
    disk = a3.instances()[0].inputs["bootDisk"]
    assert disk["autoDelete"] is True
    assert disk["initializeParams"]["size"] == 500
    assert disk["initializeParams"]["type"] == "pd-balanced"
    assert disk["initializeParams"]["image"] == DLVM_IMAGE
    assert a3.instances()[0].inputs["networkInterfaces"][0]["nicType"] == "GVNIC"
    assert n1.instances()[0].inputs["bootDisk"]["initializeParams"]["size"] == 120


def test_hyperdisk_only_series_and_custom_image() -> None:
    run = provision(
        dataclasses.replace(
            A3_SPOT,
            instance_type="a4-highgpu-8g",
            machine_type="a4-highgpu-8g",
            image="projects/acme/global/images/trainer-7",
        )
    )
    params = run.instances()[0].inputs["bootDisk"]["initializeParams"]
    assert params["type"] == "hyperdisk-balanced"
    assert params["image"] == "projects/acme/global/images/trainer-7"
    custom_n1 = provision(dataclasses.replace(N1_ON_DEMAND, image="projects/acme/global/images/trainer-7"))
    assert "nicType" not in custom_n1.instances()[0].inputs["networkInterfaces"][0]


def test_labels_carry_the_deadline_everywhere(a3: Run) -> None:
    expected = A3_SPOT.labels()
    assert expected["gpufit-expires-at"] == "2026-12-04t13-00-00z"
    vm = a3.instances()[0].inputs
    assert vm["labels"] == expected
    assert vm["bootDisk"]["initializeParams"]["labels"] == expected
    assert a3.recorder.one(BUCKET).inputs["labels"] == expected


def test_shielded_vm_os_login_and_service_account(a3: Run) -> None:
    vm = a3.instances()[0].inputs
    assert vm["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableVtpm": True,
        "enableIntegrityMonitoring": True,
    }
    assert vm["metadata"]["enable-oslogin"] == "TRUE"
    assert vm["metadata"]["block-project-ssh-keys"] == "TRUE"
    assert "ssh-keys" not in vm["metadata"]
    assert vm["allowStoppingForUpdate"] is True
    account_id = a3.recorder.one(ACCOUNT).inputs["accountId"]
    assert vm["serviceAccount"] == {
        "email": f"{account_id}@proj.iam.gserviceaccount.com",
        "scopes": [CLOUD_PLATFORM_SCOPE],
    }


def test_startup_script_is_the_rendered_boot_script(a3: Run) -> None:
    metadata = a3.instances()[0].inputs["metadata"]
    script = metadata["startup-script"]
    assert script.startswith("#!/bin/bash\n# gpufit bootstrap")
    found = settings(script)
    assert found["BUCKET"] == a3.outputs["bucket"] and found["NNODES"] == "1" and found["SPOT"] == "1"
    assert file_named(script, "/job.sh").endswith("python train.py\n")
    assert metadata["shutdown-script"] == "#!/bin/bash\nexec /usr/local/sbin/gpufit-machine shutdown\n"


def test_own_network_and_no_ingress_without_ssh_cidrs(a3: Run) -> None:
    assert a3.recorder.of(FIREWALL) == []
    network = a3.recorder.one(NETWORK)
    assert network.inputs["autoCreateSubnetworks"] is False
    subnet = a3.recorder.one(SUBNETWORK)
    assert subnet.inputs["privateIpGoogleAccess"] is True
    assert subnet.inputs["region"] == "us-central1"
    assert subnet.inputs["network"].endswith(f"/{NETWORK}/{network.name}")
    nic = a3.instances()[0].inputs["networkInterfaces"][0]
    assert nic["subnetwork"].endswith(f"/{SUBNETWORK}/{subnet.name}")
    assert "network" not in nic
    assert nic["accessConfigs"] == [{}]
    assert "networkIp" not in nic
    assert "mtu" not in network.inputs


def test_ssh_only_from_the_listed_cidrs() -> None:
    cidrs = ("203.0.113.0/24", IAP_SSH_RANGE, "2001:db8::/32")
    run = provision(dataclasses.replace(A3_SPOT, ssh_cidrs=cidrs))
    rules = run.recorder.of(FIREWALL)
    assert len(rules) == 2
    tag = run.instances()[0].inputs["tags"]
    assert len(tag) == 1
    by_ranges = {tuple(r.inputs["sourceRanges"]): r.inputs for r in rules}
    assert set(by_ranges) == {("203.0.113.0/24", IAP_SSH_RANGE), ("2001:db8::/32",)}
    for rule in by_ranges.values():
        assert rule["direction"] == "INGRESS"
        assert rule["allows"] == [{"protocol": "tcp", "ports": ["22"]}]
        assert rule["targetTags"] == tag
        assert rule["network"].endswith(f"/{NETWORK}/{run.recorder.one(NETWORK).name}")
    for r in run.recorder.of(FIREWALL):
        assert not {"0.0.0.0/0", "::/0"} & set(r.inputs.get("sourceRanges", []))


def test_bucket_is_private_expiring_and_deleted_with_the_stack(a3: Run) -> None:
    bucket = a3.recorder.one(BUCKET)
    assert bucket.inputs["uniformBucketLevelAccess"] is True
    assert bucket.inputs["publicAccessPrevention"] == "enforced"
    assert bucket.inputs["location"] == "US-CENTRAL1"
    assert bucket.inputs["lifecycleRules"] == [{"action": {"type": "Delete"}, "condition": {"age": 14}}]
    assert bucket.inputs["forceDestroy"] is True
    assert bucket.retain_on_delete is False
    assert "encryption" not in bucket.inputs


def test_retained_bucket_survives_destroy() -> None:
    run = provision(dataclasses.replace(A3_SPOT, retain_bucket=True, bucket_keep_days=30))
    bucket = run.recorder.one(BUCKET)
    assert bucket.retain_on_delete is True
    assert bucket.inputs["forceDestroy"] is False
    assert bucket.inputs["lifecycleRules"][0]["condition"]["age"] == 30


def test_service_account_may_touch_its_bucket_only(a3: Run) -> None:
    grant = a3.recorder.one(BUCKET_IAM)
    assert grant.inputs["bucket"] == a3.outputs["bucket"]
    assert grant.inputs["role"] == BUCKET_ROLE == "roles/storage.objectUser"
    account_id = a3.recorder.one(ACCOUNT).inputs["accountId"]
    assert grant.inputs["member"] == f"serviceAccount:{account_id}@proj.iam.gserviceaccount.com"
    iam_types = {r.typ for r in a3.recorder.resources if "iam" in r.typ.lower()}
    assert iam_types == {BUCKET_IAM}
    vm = a3.instances()[0]
    assert any(dep.endswith(f"::{grant.name}") for dep in vm.dependencies), vm.dependencies


def test_service_account_id_is_valid_and_distinct() -> None:
    pattern = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")
    short = dataclasses.replace(A3_SPOT, workload="ab", stack="x")
    long_a = dataclasses.replace(A3_SPOT, workload="a-very-long-workload-name-for-tests", stack="stage")
    long_b = dataclasses.replace(A3_SPOT, workload="a-very-long-workload-name-for-tests", stack="prod")
    odd_stack = dataclasses.replace(A3_SPOT, stack="Team_A.Prod")
    ids = [service_account_id(d) for d in (A3_SPOT, short, long_a, long_b, odd_stack)]
    for account_id in ids:
        assert pattern.fullmatch(account_id), account_id
    assert service_account_id(long_a) != service_account_id(long_b)
    assert service_account_id(A3_SPOT) == service_account_id(A3_SPOT)


def test_multi_node_compact_placement_and_master_address(cluster: Run) -> None:
    policy = cluster.recorder.one(POLICY)
    assert policy.inputs["groupPlacementPolicy"] == {"collocation": "COLLOCATED", "vmCount": 2}
    assert policy.inputs["region"] == "us-central1"
    node0, node1 = cluster.instances()
    policy_link = f"https://compute.googleapis.com/mock/{POLICY}/{policy.name}"
    assert node0.inputs["resourcePolicies"] == policy_link
    assert node1.inputs["resourcePolicies"] == policy_link

    address = cluster.recorder.one(ADDRESS)
    assert address.inputs["addressType"] == "INTERNAL"
    assert node0.inputs["networkInterfaces"][0]["networkIp"] == MASTER_IP
    assert "networkIp" not in node1.inputs["networkInterfaces"][0]
    script1 = node1.inputs["metadata"]["startup-script"]
    job1 = file_named(script1, "/job.sh")
    assert '--rdzv-endpoint="$GPUFIT_MASTER_ADDR:$GPUFIT_MASTER_PORT"' in job1
    assert "--nnodes=2" in job1 and "is_host=0" in job1
    found = settings(script1)
    assert (found["RDZV_PORT"], found["MASTER_ADDR"], found["NODE_RANK"]) == (str(RDZV_PORT), MASTER_IP, "1")
    assert found["NODE_PREFIX"] == "machine-1"
    script0 = node0.inputs["metadata"]["startup-script"]
    assert "is_host=1" in file_named(script0, "/job.sh")
    assert settings(script0)["NODE_PREFIX"] == "machine-0"
    assert settings(script0)["MASTER_ADDR"] == ""

    for vm in (node0, node1):
        assert vm.inputs["scheduling"]["maxRunDuration"] == {"seconds": LIFETIME_S}
        assert vm.inputs["labels"]["gpufit-expires-at"] == "2026-12-04t13-00-00z"
    assert cluster.recorder.one(NETWORK).inputs["mtu"] == 8896


def test_multi_node_firewall_is_between_the_nodes_only(cluster: Run) -> None:
    tag = cluster.instances()[0].inputs["tags"]
    rules = cluster.recorder.of(FIREWALL)
    intra = [r.inputs for r in rules if "sourceTags" in r.inputs]
    assert len(intra) == 1
    assert intra[0]["sourceTags"] == tag == intra[0]["targetTags"]
    assert {a["protocol"] for a in intra[0]["allows"]} == {"tcp", "udp"}
    assert "sourceRanges" not in intra[0]
    ssh = [r.inputs for r in rules if "sourceRanges" in r.inputs]
    assert [s["sourceRanges"] for s in ssh] == [["198.51.100.7/32"]]
    for vm in cluster.instances():
        assert vm.inputs["tags"] == tag


def test_replicas_rendezvous_with_their_own_leader() -> None:
    run = provision(dataclasses.replace(A3_SPOT, nodes=4, nodes_per_replica=2, needs_node_interconnect=True))
    vms = sorted(run.instances(), key=lambda r: int(r.name.rsplit("node", 1)[1]))
    assert [vm.inputs["networkInterfaces"][0].get("networkIp") for vm in vms] == [
        leader_ip(0),
        None,
        leader_ip(2),
        None,
    ]
    found = [settings(vm.inputs["metadata"]["startup-script"]) for vm in vms]
    assert found[1]["MASTER_ADDR"] == leader_ip(0) and found[3]["MASTER_ADDR"] == leader_ip(2)
    assert (found[2]["NODE_RANK"], found[2]["NNODES"]) == ("0", "2")
    assert [f["NODE_PREFIX"] for f in found] == [f"machine-{i}" for i in range(4)]
    assert len(run.recorder.of(ADDRESS)) == 2
    assert run.recorder.one(POLICY).inputs["groupPlacementPolicy"]["vmCount"] == 4


def test_single_node_replicas_stay_apart() -> None:
    run = provision(dataclasses.replace(A3_SPOT, task="serve", nodes=3, nodes_per_replica=1))
    assert len(run.instances()) == 3
    assert run.recorder.of(POLICY) == [] and run.recorder.of(ADDRESS) == []
    assert run.recorder.of(FIREWALL) == []
    assert "mtu" not in run.recorder.one(NETWORK).inputs
    for vm in run.instances():
        assert "resourcePolicies" not in vm.inputs
        assert settings(vm.inputs["metadata"]["startup-script"])["NNODES"] == "1"


def test_uneven_groups_are_refused() -> None:
    uneven = dataclasses.replace(A3_SPOT, nodes=3, nodes_per_replica=2)
    with pytest.raises(ValueError, match="do not form groups of 2"):
        GcpGpuInstance(uneven.name, uneven)


def test_n1_cluster_skips_compact_placement() -> None:
    run = provision(
        dataclasses.replace(N1_ON_DEMAND, nodes=2, nodes_per_replica=2, needs_node_interconnect=True)
    )
    assert run.recorder.of(POLICY) == []
    assert all("resourcePolicies" not in vm.inputs for vm in run.instances())
    assert len(run.instances()) == 2


def test_zone_is_looked_up_when_the_plan_has_none(a3: Run) -> None:
    zone_calls = [args for token, args in a3.recorder.calls if token == GET_ZONES]
    assert zone_calls == [{"region": "us-central1", "status": "UP"}]
    assert a3.instances()[0].inputs["zone"] == "us-central1-a"
    assert a3.outputs["zone"] == "us-central1-a"


def test_given_zone_is_used_without_lookup(n1: Run) -> None:
    assert not [token for token, _ in n1.recorder.calls if token == GET_ZONES]
    assert n1.instances()[0].inputs["zone"] == "us-central1-b"


def test_a_region_level_plan_takes_the_first_up_zone_among_its_known_zones() -> None:
    run = provision(dataclasses.replace(A3_SPOT, zones=("us-central1-f", "us-central1-c", "us-central1-x")))
    assert run.instances()[0].inputs["zone"] == "us-central1-c"  # not -a: the offer is not known there
    assert run.outputs["zone"] == "us-central1-c"
    assert first_up_zone("us-central1", ZONES_UNSORTED, ("us-central1-f",)) == "us-central1-f"
    message = r"no zone of us-central1 among us-central1-x \(the plan's zones\) is UP"
    with pytest.raises(ValueError, match=message):
        first_up_zone("us-central1", ZONES_UNSORTED, ("us-central1-x",))


def test_first_up_zone() -> None:
    assert first_up_zone("us-central1", ZONES_UNSORTED) == "us-central1-a"
    for nothing in ([], None):
        with pytest.raises(ValueError, match="no zone of us-central1 is UP"):
            first_up_zone("us-central1", nothing)


def test_existing_subnet_is_used_instead_of_a_new_network() -> None:
    link = "projects/p/regions/us-central1/subnetworks/shared"
    run = provision(dataclasses.replace(A3_SPOT, subnet_id=link, ssh_cidrs=(IAP_SSH_RANGE,)))
    assert run.recorder.of(NETWORK) == [] and run.recorder.of(SUBNETWORK) == []
    assert [args for token, args in run.recorder.calls if token == GET_SUBNETWORK] == [{"selfLink": link}]
    assert run.instances()[0].inputs["networkInterfaces"][0]["subnetwork"] == link
    assert run.recorder.one(FIREWALL).inputs["network"] == "projects/p/global/networks/shared-vpc"


def test_outputs(a3: Run) -> None:
    out = a3.outputs
    assert set(out) == {
        "instance_id",
        "instance_ids",
        "instance_type",
        "cloud",
        "region",
        "zone",
        "market",
        "nodes",
        "hourly_usd",
        "estimated_total_usd",
        "expires_at",
        "bucket",
        "status",
        "connect",
    }
    assert out["status"] == f"gpufit status --bucket gs://{out['bucket']}"
    vm_name = f"{a3.instances()[0].name}-1a2b3c4"
    assert out["instance_id"] == vm_name
    assert out["instance_ids"] == [vm_name]
    assert (out["instance_type"], out["cloud"], out["region"], out["market"]) == (
        "a3-highgpu-8g",
        "gcp",
        "us-central1",
        "spot",
    )
    assert out["nodes"] == 1
    assert out["hourly_usd"] == 30.1235
    assert out["estimated_total_usd"] == 361.48
    assert out["expires_at"] == "2026-12-04T13:00:00Z"
    assert out["bucket"] == f"{a3.recorder.one(BUCKET).name}-1a2b3c4"
    assert out["connect"].startswith(
        f"gcloud compute ssh {vm_name} --zone us-central1-a --tunnel-through-iap"
    )
    assert IAP_SSH_RANGE in out["connect"]


def test_cluster_outputs_list_every_node(cluster: Run) -> None:
    names = [f"{vm.name}-1a2b3c4" for vm in cluster.instances()]
    assert cluster.outputs["instance_ids"] == names
    assert cluster.outputs["instance_id"] == names[0]
    assert cluster.outputs["nodes"] == 2


def test_children_hang_off_the_component_and_use_its_provider() -> None:
    run = provision(A3_SPOT, with_provider=True)
    component = run.recorder.one(COMPONENT)
    assert component.name == A3_SPOT.name
    children = [r for r in run.recorder.resources if r.typ.startswith("gcp:")]
    assert {r.typ for r in children} == {NETWORK, SUBNETWORK, BUCKET, ACCOUNT, BUCKET_IAM, INSTANCE, SERVICE}
    for child in children:
        assert child.parent.endswith(f"{COMPONENT}::{A3_SPOT.name}"), (child.name, child.parent)
        assert "pulumi:providers:gcp::explicit" in child.provider, (child.name, child.provider)
    zone_calls = [token for token, _ in run.recorder.calls if token == GET_ZONES]
    assert zone_calls == [GET_ZONES]


def test_provider_contract() -> None:
    provider = GcpProvider()
    assert provider.cloud == "gcp"
    with pytest.raises(ValueError, match="aws deployment"):
        provider.provision(dataclasses.replace(A3_SPOT, cloud="aws"))


def test_a_second_up_of_plain_vms_three_hours_later_changes_nothing() -> None:
    """The deadline from the clock moves with each run; what carries it (labels, description,
    startup script, the boot disk's labels, whose change replaces the VM) keeps its first
    value, so a second `pulumi up` with nothing changed plans no change."""
    from datetime import timedelta

    from tests.contracts.runs import changes

    cluster = dataclasses.replace(A3_SPOT, nodes=2, nodes_per_replica=2, needs_node_interconnect=True)
    later = dataclasses.replace(
        cluster, created_at=CREATED + timedelta(hours=3), expires_at=EXPIRES + timedelta(hours=3)
    )
    first, second = provision(cluster), provision(later)
    assert list(changes(first.recorder, second.recorder)) == []  # type: ignore[arg-type]
    vm = first.instances()[0].inputs
    assert vm["labels"] != second.instances()[0].inputs["labels"]  # the deadline did move
