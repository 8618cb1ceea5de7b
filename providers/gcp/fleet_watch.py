"""GCP's half of ``gpufit up``'s watch: how many of the regional MIG's VMs are running with
nothing left to do, and what the MIG's errors say.

``regionInstanceGroupManagers.get`` (``targetSize``), ``listManagedInstances`` (each VM's
``instanceStatus`` and ``currentAction``; ``NONE`` once it is created and running) and
``listErrors`` (``InstanceManagedByIgmError``: ``error.code``, ``error.message``,
``timestamp``), https://cloud.google.com/compute/docs/reference/rest/v1/regionInstanceGroupManagers,
through google-cloud-compute's REST clients; ``GPUFIT_GCP_COMPUTE_ENDPOINT`` (or ``endpoint``)
points them at a local server, as for sweep.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cloudapi.gcp import COMPUTE_ENDPOINT_ENV, CredentialSource, check_endpoint
from gitops.failover import FleetState


class MigWatcher:
    """Reads a GCP stack's fleet from its ``group`` and ``region`` outputs."""

    def __init__(self, project: str, endpoint: str | None = None) -> None:
        self._project = project
        self._endpoint, self._loopback = check_endpoint(
            endpoint if endpoint is not None else os.environ.get(COMPUTE_ENDPOINT_ENV), "compute"
        )
        self._client: Any = None

    def _migs(self) -> Any:
        if self._client is None:
            from google.api_core.client_options import ClientOptions
            from google.cloud import compute_v1

            options = ClientOptions(api_endpoint=self._endpoint) if self._endpoint else None
            self._client = compute_v1.RegionInstanceGroupManagersClient(
                credentials=CredentialSource().get(self._loopback), client_options=options
            )
        return self._client

    def state(self, outputs: Mapping[str, Any], since: datetime) -> FleetState:
        """The fleet's MIGs together (``group`` is one name, or a list with one MIG per
        machine size, and ``fallback_groups`` the MIGs of its own the rebalancer moves VMs to:
        the fleet is in service, or starved, across all of them)."""
        names = outputs["group"] if isinstance(outputs["group"], list) else [outputs["group"]]
        names = [*names, *(outputs.get("fallback_groups") or [])]
        cutoff = since if since.tzinfo else since.replace(tzinfo=UTC)
        client = self._migs()
        target, running, messages = 0, 0, []
        for name in names:
            where = {
                "project": self._project,
                "region": str(outputs["region"]),
                "instance_group_manager": str(name),
            }
            target += int(client.get(**where).target_size)
            running += sum(
                1
                for vm in client.list_managed_instances(**where)
                if vm.instance_status == "RUNNING" and vm.current_action == "NONE"
            )
            messages += [
                f"{e.error.code}: {e.error.message}"
                for e in client.list_errors(**where)
                if not e.timestamp or datetime.fromisoformat(e.timestamp) >= cutoff
            ]
        return FleetState(target, running, tuple(messages))
