"""AWS: the Pulumi component (component.py, with fleet, endpoint, placement and resources) and
the cloud's half of ``gpufit sweep`` (sweep.py)."""
