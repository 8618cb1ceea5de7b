"""Google Cloud: the Pulumi component (component.py for plain VMs, fleet.py for managed instance
groups, both built on common.py; endpoint.py) and the cloud's half of ``gpufit sweep`` (sweep.py).

Nothing is imported here, so that loading one does not load the other's heavy SDK."""
