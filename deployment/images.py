"""The machine images a deployment boots unless ``Deployment.image`` (``gpufit:image``) names
another, as ``selector/data/machine_images.yaml`` lists them with the NVIDIA driver each ships:
the driver decides which engine builds a plan may launch (``selector.machine_images``), so an
image and its driver change together."""

from __future__ import annotations

from selector.machine_images import machine_image

DLAMI_NAME_PATTERN = str(machine_image("aws", "*").name_pattern)
"""AWS Deep Learning AMI (NVIDIA driver, CUDA, PyTorch), owner ``amazon``: the newest AMI whose
name matches boots."""

DLVM_IMAGE = str(machine_image("gcp", "*").image)
"""Deep Learning VM image family with the NVIDIA driver the pinned engines need
(common-cu129-ubuntu-2204-nvidia-580, driver 580, which a CUDA 13 container requires)."""
