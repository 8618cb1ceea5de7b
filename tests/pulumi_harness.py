"""Run the Pulumi program and components under ``pulumi.runtime.set_mocks``, recording every
resource registered, with fixed clocks: no CLI, no cloud, no network."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pulumi
import yaml

from tests.contracts import Contracts
from tests.contracts.model import autoname

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Registered:
    typ: str
    name: str
    inputs: dict[str, Any]
    provider: str | None


OFFERED_ZONES = (1, 2, 3, 4, 5, 6)
"""AZ ID numbers where the mock EC2 offers every instance type (``use1-az1`` … ``use1-az6``):
every zone the catalog names lies among them (no region has more than six AZ IDs there), so a
plan keeps to the zones the catalog lists for its offer, and a test withholds a type from a
zone with ``WITHHELD`` to see a group's subnets kept to the zones that offer its types."""

BARREN_ZONE = 7
"""An AZ ID number that has a default subnet but offers no instance type (``use2-az7``): for a
plan that names a zone EC2 does not offer its types in."""

_DIRECTIONS = {"northeast": "ne", "southeast": "se", "northwest": "nw", "southwest": "sw"}


def az_id(region: str, number: int) -> str:
    """The AZ ID of zone ``number`` of ``region``, spelt as AWS spells them: ``us-east-2`` →
    ``use2-az1``, ``ap-northeast-1`` → ``apne1-az1``, ``eu-central-1`` → ``euc1-az1``."""
    parts = region.split("-")
    middle = "".join(_DIRECTIONS.get(p, p[0]) for p in parts[1:-1])
    return f"{parts[0]}{middle}{parts[-1]}-az{number}"


def az_name(region: str, number: int) -> str:
    """The mock's AZ name for AZ ID ``number``: ``us-east-2`` zone 1 → ``us-east-2a``."""
    return f"{region}{'abcdefg'[number - 1]}"


NOT_OFFERED: set[str] = set()
"""Instance types the mock EC2 offers nowhere (tests add to it and clear it)."""

WITHHELD: set[tuple[str, str]] = set()
"""(instance type, AZ ID) pairs the mock EC2 does not offer, though the zone is among
``OFFERED_ZONES`` (tests add to it and clear it)."""


IMAGE_ROOT_GB = 75
"""The root snapshot size the mock AMI lookup reports. AWS does not publish the Deep Learning
AMIs' snapshot sizes in their release notes; the real lookup returns the real one and the
program checks a disk against whatever it returns (``volume_size`` below it fails with
``InvalidBlockDeviceMapping``)."""


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    """Records each resource; answers the invokes the components make with fixed values.
    Every registration first passes the clouds' contracts (``tests.contracts``): the mock
    refuses, with the rule and its source, what the cloud would refuse."""

    resources: list[Registered] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    invokes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    region: str = "us-east-1"
    requests: dict[tuple[str, str], Any] = field(default_factory=dict)  # registrations, with options
    urns: dict[tuple[str, str], str] = field(default_factory=dict)
    contracts: Contracts = field(default_factory=Contracts)
    ami_id: str = "ami-0dlami"  # the newest image of the line, as getAmi answers today
    block_fee_factor: float = 1.0  # a Capacity Block offering's fee ÷ the reference rate's (issue 26)
    odcrs: dict[str, dict[str, Any]] | None = None
    offered: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)  # offering id: its block
    bought: dict[str, str] = field(default_factory=dict)  # offering id: the Capacity Block bought with it
    """DescribeCapacityReservations' inventory by id (issue 26); None: any id is a reservation
    in the region's zone ``a`` whose type is not stated (tests that do not look at the read)."""

    def read(self, args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
        """An existing resource as EC2 describes it; a Capacity Reservation the test did not
        set is refused as EC2 refuses an unknown id."""
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider))
        if args.typ == "aws:ec2/capacityReservation:CapacityReservation":
            if self.odcrs is None:
                return {"id": args.resource_id, "availabilityZone": f"{self.region}a"}
            held = self.odcrs.get(str(args.resource_id))
            if held is None:
                raise Exception(f"InvalidCapacityReservationId.NotFound: {args.resource_id}")
            return {"id": args.resource_id, **held}
        return dict(args.inputs)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.resource_id:  # a read of an existing resource (``Resource.get``): nothing is created
            return args.resource_id, self.read(args)
        found = re.search(r"::(?:aws|gcp)-([a-z0-9-]+)::", args.provider or "")
        if found:
            self.region = found.group(1)
        self.contracts.stack.region = self.region
        key = (args.typ, args.name)
        request = self.requests.get(key)
        resource_id = f"{args.name}-id"
        self.contracts.register(
            args.typ, args.name, dict(args.inputs), resource_id, request, self.urns.get(key)
        )
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider))
        state = dict(args.inputs)
        if args.typ.startswith("aws:"):
            service = args.typ.split(":")[1].split("/")[0]
            state.setdefault("arn", f"arn:aws:{service}:{self.region}:123456789012:{args.name}")
        if args.typ.startswith("gcp:"):
            name = state.get("name") or autoname(args.name)
            state.setdefault("name", name)
            state.setdefault(
                "selfLink", f"https://www.googleapis.com/compute/v1/projects/test-project/{name}"
            )
        n = len(self.resources)
        if args.typ == "aws:ec2/instance:Instance":
            state.update(
                privateIp=f"10.0.0.{n}",
                availabilityZone=state.get("availabilityZone") or "us-east-1a",
                spotInstanceRequestId="sir-1" if state.get("instanceMarketOptions") else "",
                primaryNetworkInterfaceId=f"eni-{n:017x}",
            )
        elif args.typ == "aws:ec2/capacityBlockReservation:CapacityBlockReservation":
            # PurchaseCapacityBlock's answer: the block's AZ (the invoke's offering is in zone a)
            start, end = self.offered.get(str(state.get("capacityBlockOfferingId")), (None, None))
            state.update(
                availabilityZone=f"{self.region}a",
                startDate=start.strftime("%Y-%m-%dT%H:%M:%SZ") if start else None,
                endDate=end.strftime("%Y-%m-%dT%H:%M:%SZ") if end else None,
            )
        elif args.typ == "aws:s3/bucket:Bucket":
            bucket = f"{state.get('bucketPrefix', 'b')}abc123"
            state.update(bucket=bucket, arn=f"arn:aws:s3:::{bucket}")
        elif args.typ == "aws:iam/role:Role":
            state.update(arn=f"arn:aws:iam::123456789012:role/{args.name}", name=args.name)
        elif args.typ in ("aws:iam/instanceProfile:InstanceProfile", "aws:ec2/placementGroup:PlacementGroup"):
            state.update(name=args.name, arn=f"arn:aws:iam::123456789012:instance-profile/{args.name}")
        elif args.typ == "random:index/randomPassword:RandomPassword":
            state.update(result="generated-api-key-0123456789")
        elif args.typ == "aws:secretsmanager/secret:Secret":
            state.update(arn=f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{args.name}-AbCdEf")
        elif args.typ == "aws:lb/loadBalancer:LoadBalancer":
            state.update(
                dnsName=f"{args.name}-1234.elb.amazonaws.com",
                arn=f"arn:aws:elasticloadbalancing:::{args.name}",
            )
        elif args.typ == "aws:lb/targetGroup:TargetGroup":
            state.update(arn=f"arn:aws:elasticloadbalancing:::targetgroup/{args.name}")
        elif args.typ == "gcp:compute/address:Address":
            state.update(address=state.get("address") or "198.51.100.20")
        elif args.typ == "gcp:secretmanager/secret:Secret":
            state.update(name=f"projects/test-project/secrets/{state['secretId']}")
        elif args.typ == "aws:autoscaling/group:Group":
            state.update(name=state.get("name") or args.name, arn=f"arn:aws:autoscaling:::{args.name}")
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state.update(latestVersion=1, arn=f"arn:aws:ec2:::launch-template/{args.name}")
        elif args.typ == "aws:ec2/networkInterface:NetworkInterface":
            state.update(privateIp=f"10.0.1.{n}")
        elif args.typ == "gcp:compute/instance:Instance":
            nics = state.get("networkInterfaces") or [{}]
            nics[0] = {**nics[0], "networkIp": f"10.42.0.{n}"}
            state.update(networkInterfaces=nics, selfLink=f"projects/p/zones/z/instances/{args.name}")
        elif args.typ == "gcp:serviceaccount/account:Account":
            email = f"{state['accountId']}@test-project.iam.gserviceaccount.com"
            state.update(email=email, member=f"serviceAccount:{email}")
        elif args.typ == "gcp:projects/iAMCustomRole:IAMCustomRole":
            state.update(name=f"projects/{state['project']}/roles/{state['roleId']}")
        elif args.typ == "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate":
            state.update(selfLink=f"projects/test-project/regions/r/instanceTemplates/{args.name}")
        elif args.typ == "gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager":
            # a new group, still creating its VMs (or failing to: its errors say why); its
            # instance group's URL, fully qualified as a backend service's ``group`` requires
            region = state.get("region", "r")
            group_url = f"https://www.googleapis.com/compute/v1/projects/test-project/regions/{region}"
            state.update(
                instanceGroup=f"{group_url}/instanceGroups/{state.get('name', args.name)}",
                statuses=[
                    {
                        "isStable": False,
                        "allInstancesConfigs": [],
                        "statefuls": [],
                        "versionTargets": [{"isReached": False}],
                    }
                ],
            )
        elif args.typ == "gcp:storage/bucket:Bucket":
            state.update(name=state.get("name") or f"{args.name}-abc", url=f"gs://{args.name}")
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        self.calls.append(args.token)
        self.invokes.append((args.token, dict(args.args)))
        found = re.search(r"::(?:aws|gcp)-([a-z0-9-]+)::", args.provider or "")
        if found:
            self.region = found.group(1)
        filters = {f.get("name"): list(f.get("values") or []) for f in args.args.get("filters") or []}
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            types = [t for t in filters.get("instance-type", []) if t not in NOT_OFFERED]
            kind = str(args.args.get("locationType") or "availability-zone")
            name = az_id if kind == "availability-zone-id" else az_name
            rows = [
                (t, name(self.region, z))
                for t in types
                for z in OFFERED_ZONES
                if (t, az_id(self.region, z)) not in WITHHELD
            ]
            return {
                "id": self.region,
                "instanceTypes": [t for t, _ in rows],
                "locations": [z for _, z in rows],
                "locationTypes": [kind] * len(rows),
            }
        if args.token == "aws:ec2/getCapacityBlockOffering:getCapacityBlockOffering":
            from selector.capacity import reference_quote
            from tests.fakes.ec2_capacity import first_block, invoke_answer

            quote = reference_quote(str(args.args["instanceType"]), self.region)
            rate = quote.rate_usd if quote is not None else 40.0
            hours, count = int(args.args["capacityDurationHours"]), int(args.args["instanceCount"])
            answer = invoke_answer(
                dict(args.args),
                self.region,
                rate * hours * count * self.block_fee_factor,
                self.contracts.stack.now,
            )
            earliest = datetime.fromisoformat(str(args.args["startDateRange"]).replace("Z", "+00:00"))
            self.offered[answer["capacityBlockOfferingId"]] = first_block(earliest, hours)
            return answer
        if args.token == "aws:index/getAvailabilityZone:getAvailabilityZone":
            name = str(args.args.get("name") or f"{self.region}a")
            return {"id": name, "name": name, "zoneId": az_id(self.region, "abcdefg".index(name[-1]) + 1)}
        if args.token == "aws:resourcegroupstaggingapi/getResources:getResources":
            # GetResources by tag: the Capacity Blocks bought with the offering named
            asked = {t.get("key"): list(t.get("values") or []) for t in args.args.get("tagFilters") or []}
            held = [
                self.bought[o] for o in asked.get("gpufit:capacity-block-offering", []) if o in self.bought
            ]
            arn = f"arn:aws:ec2:{self.region}:123456789012:capacity-reservation/"
            return {"id": self.region, "resourceTagMappingLists": [{"resourceArn": arn + h} for h in held]}
        if args.token == "aws:ec2/getSubnets:getSubnets":
            zones = filters.get("availability-zone-id", filters.get("availability-zone"))
            if zones is not None:
                return {"id": "subnets", "ids": [f"subnet-{z}" for z in zones]}
        if args.token == "gcp:compute/getMachineTypes:getMachineTypes":
            zone = str(args.args.get("zone", ""))
            wanted = str(args.args.get("filter", ""))
            names = [n for n in wanted.split('"')[1].strip("()").split("|")] if '"' in wanted else []
            # zone -b of a region offers no GPU machine type in this mock
            offered = [] if zone.endswith("-b") else names
            return {
                "id": zone,
                "zone": zone,
                "project": "test-project",
                "filter": wanted,
                "machineTypes": [_machine_type(n, zone) for n in offered],
            }
        answers: dict[str, dict[str, Any]] = {
            "aws:ec2/getVpc:getVpc": {"id": "vpc-0default", "cidrBlock": "172.31.0.0/16"},
            "aws:ec2/getSubnets:getSubnets": {"ids": ["subnet-0b", "subnet-0a"]},
            "aws:ec2/getSubnet:getSubnet": {
                "id": "subnet-0given",
                "vpcId": "vpc-0given",
                "availabilityZone": az_name(self.region, 1),
                "availabilityZoneId": az_id(self.region, 1),
            },
            "aws:ec2/getAmi:getAmi": {
                "id": self.ami_id,
                "name": "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.12 (Ubuntu 24.04) 20261120",
                "architecture": (filters.get("architecture") or ["x86_64"])[0],
                "rootDeviceName": "/dev/sda1",
                "blockDeviceMappings": [
                    {
                        "deviceName": "/dev/sda1",
                        "ebs": {
                            "volume_size": str(IMAGE_ROOT_GB),
                            "volume_type": "gp3",
                            "snapshot_id": "snap-0dlami",
                        },
                        "noDevice": "",
                        "virtualName": "",
                    }
                ],
            },
            "aws:index/getCallerIdentity:getCallerIdentity": {
                "accountId": "123456789012",
                "arn": "arn",
                "userId": "u",
            },
            "gcp:compute/getZones:getZones": {
                "names": [f"{self.region}-c", f"{self.region}-a", f"{self.region}-b"]
            },
            "gcp:organizations/getClientConfig:getClientConfig": {"project": "test-project", "id": "cc"},
        }
        if args.token == "aws:ec2/getAmi:getAmi":
            self.contracts.stack.image_root_gb = IMAGE_ROOT_GB
            self.contracts.stack.image_root_device = "/dev/sda1"
        return answers.get(args.token, {})

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str) -> Registered:
        found = self.of_type(typ)
        assert len(found) == 1, f"expected one {typ}, found {len(found)}"
        return found[0]


def _machine_type(name: str, zone: str) -> dict[str, Any]:
    """A machine type as the getMachineTypes invoke answers it (every field its result type requires)."""
    return {
        "name": name,
        "accelerators": [],
        "architecture": "X86_64",
        "bundledLocalSsds": [],
        "deprecateds": [],
        "description": name,
        "guestCpus": 8,
        "isSharedCpus": False,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": 263168,
        "memoryMb": 32768,
        "selfLink": f"projects/test-project/zones/{zone}/machineTypes/{name}",
    }


class RecordingMonitor(pulumi.runtime.mocks.MockMonitor):
    """The mock engine, also keeping each registration request (resource options such as
    ``ignoreChanges`` are not in the mock's arguments)."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recorder = mocks

    def RegisterResource(self, request: Any) -> Any:
        key = (request.type, request.name)
        self.recorder.requests[key] = request
        self.recorder.urns[key] = self.make_urn(request.parent, request.type, request.name)
        return super().RegisterResource(request)


def links(mocks: RecordingMocks, r: Registered) -> tuple[str | None, dict[str, list[str]]]:
    """A resource's URN and the URNs each of its properties depends on, from the registration
    the engine received: what a stack policy reads as ``urn`` and ``property_dependencies``."""
    request = mocks.requests.get((r.typ, r.name))
    deps = {k: list(v.urns) for k, v in request.propertyDependencies.items()} if request is not None else {}
    return mocks.urns.get((r.typ, r.name)), deps


TEST_HF_TOKEN = "hf_" + "x" * 34
"""A made-up Hugging Face token the program runs get unless a test sets its own (or None)."""

SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
"""The key and value Pulumi marks a secret with on the wire (pulumi.runtime.rpc)."""


def is_secret_input(request: Any, key: str) -> bool:
    """Whether the registration ``request`` sent property ``key`` marked secret."""
    if key not in request.object.fields:
        return False
    value = request.object.fields[key]
    if not value.HasField("struct_value"):
        return False
    fields = value.struct_value.fields
    return SECRET_SIG[0] in fields and fields[SECRET_SIG[0]].string_value == SECRET_SIG[1]


def stack_config(stack_file: Path) -> dict[str, Any]:
    doc = yaml.safe_load(stack_file.read_text())
    return dict(doc.get("config") or {})


def load_program() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpufit_program", ROOT / "__main__.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines main(); __name__ is not "__main__", so it does not run
    return module


def run_program(
    config: dict[str, Any], now: datetime, stack: str = "test", mocks: RecordingMocks | None = None
) -> tuple[RecordingMocks, dict[str, Any]]:
    """Run ``__main__.main`` with this stack config; return the recorded resources and the
    resolved outputs. Exceptions from the program propagate (pass ``mocks`` to inspect them)."""
    mocks = mocks if mocks is not None else RecordingMocks()
    mocks.contracts.stack.now = now
    # Gated models need a token; a test that checks the refusal passes "gpufit:hfToken": None.
    config = {"gpufit:hfToken": TEST_HF_TOKEN, **config}
    config = {k: v for k, v in config.items() if v is not None}
    pulumi.runtime.set_mocks(
        mocks, project="gpufit", stack=stack, preview=False, monitor=RecordingMonitor(mocks)
    )
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}, []
    )
    program = load_program()
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def body() -> Any:
        outputs = program.main(now=lambda: now)
        return pulumi.Output.all(**outputs).apply(resolved.update)

    try:
        body()
    except Exception as err:
        mocks.contracts.reraise(err)
    mocks.contracts.finish()
    return mocks, resolved


def run_component(
    build: Callable[[], dict[str, Any]], mocks: RecordingMocks | None = None
) -> tuple[RecordingMocks, dict[str, Any]]:
    """Build a component under fresh mocks (or ``mocks``) and resolve its outputs."""
    mocks = mocks if mocks is not None else RecordingMocks()
    pulumi.runtime.set_mocks(
        mocks, project="gpufit", stack="test", preview=False, monitor=RecordingMonitor(mocks)
    )
    pulumi.runtime.set_all_config({}, [])
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def body() -> Any:
        return pulumi.Output.all(**build()).apply(resolved.update)

    try:
        body()
    except Exception as err:
        mocks.contracts.reraise(err)
    mocks.contracts.finish()
    return mocks, resolved
