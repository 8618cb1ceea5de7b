"""How a multi-node instance's EFA interfaces are laid out: one per EFA-capable network card.

AWS, "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): "For the primary
network interface (network card index 0, device index 0), create an EFA (EFA with ENA)
interface. You can't use an EFA-only network interface as the primary network interface. For
each additional network interface, use the next unused network card index, device index 1,
and either an EFA (EFA with ENA) or EFA-only network interface"; for P5, EFA-only on cards 1-31
keeps one IP address per instance ("EFA configuration for P5 instances", use case 1). The
counts per type come from ``efa_cards.yaml`` (EC2 DescribeInstanceTypes ``NetworkInfo``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

EFA_CARDS_FILE = Path(__file__).parent / "efa_cards.yaml"


@dataclass(frozen=True)
class EfaInterface:
    network_card: int
    device_index: int
    interface_type: str  # "efa" (EFA with ENA, the primary) or "efa-only"

    @property
    def primary(self) -> bool:
        return (self.network_card, self.device_index) == (0, 0)


@dataclass(frozen=True)
class EfaCards:
    network_cards: int
    efa_interfaces: int


@lru_cache(maxsize=1)
def efa_cards() -> dict[str, EfaCards]:
    doc: dict[str, Any] = yaml.safe_load(EFA_CARDS_FILE.read_text(encoding="utf-8"))
    if doc.get("schema_version") != 1:
        raise ValueError(f"{EFA_CARDS_FILE}: schema_version {doc.get('schema_version')!r}, expected 1")
    return {
        str(name): EfaCards(int(entry["network_cards"]), int(entry["efa_interfaces"]))
        for name, entry in doc["types"].items()
    }


def efa_layout(machine_type: str) -> tuple[EfaInterface, ...]:
    """The EFA interfaces one instance of ``machine_type`` gets: the primary EFA on card 0,
    then an EFA-only interface on every other card. A type whose cards do not all take EFA
    (or that the data does not list) gets the primary EFA alone: which of its cards carry EFA
    is not in the data, and a wrong guess fails the launch."""
    cards = efa_cards().get(machine_type)
    primary = EfaInterface(0, 0, "efa")
    if cards is None or cards.efa_interfaces != cards.network_cards:
        return (primary,)
    return (primary, *(EfaInterface(card, 1, "efa-only") for card in range(1, cards.network_cards)))
