"""Google Cloud: the ``gpufit:gcp:GpuInstance`` component and the ``GpuProvider`` around it."""

from providers.gcp.component import GcpGpuInstance, GcpProvider

__all__ = ["GcpGpuInstance", "GcpProvider"]
