"""When a set of CIDRs means "from anywhere": the one rule the spec check, the providers and the
policy pack share (issue 22, item 3).

Testing each CIDR for ``/0`` is evaded by splitting the internet: ``0.0.0.0/1`` plus
``128.0.0.0/1`` is every address in two rules. So the rule counts the union of all the CIDRs
of a rule set, per address family, and only the addresses that can reach a public endpoint
(globally routable unicast), and calls the set "from anywhere" when that count is above a limit:

- IPv4: more than 2^24 public addresses, a /8. No organisation's own egress range is that large
  (a /8 was the largest block ever assigned to one holder), so an allowlist that big is not a
  list of callers; Trivy's "more than one public address"
  (https://github.com/aquasecurity/trivy-checks, ``no_public_ingress``) would refuse every
  office range, checkov's literal ``0.0.0.0/0`` test is the split-range evasion itself.
- IPv6: more than 2^96 public addresses, a /32: the size of a regional registry's standard
  allocation to an ISP (RIPE-738 "minimum allocation size … /32",
  https://www.ripe.net/publications/docs/ripe-738), so anything larger spans providers.

Public means: inside what IANA lists as globally reachable. IPv4: every address except the
special-purpose blocks marked not globally reachable
(https://www.iana.org/assignments/iana-ipv4-special-registry) and multicast (224.0.0.0/4, not a
connection's source). IPv6: the global unicast space 2000::/3
(https://www.iana.org/assignments/ipv6-unicast-address-assignments) less the documentation
blocks 2001:db8::/32 (RFC 3849) and 3fff::/20 (RFC 9637).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PUBLIC_LIMIT_PREFIX = {4: 8, 6: 32}
"""Per IP version, the prefix length of the largest public block an allowlist may cover."""

_NOT_PUBLIC_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
_PUBLIC_V6 = ("2000::/3",)
_NOT_PUBLIC_V6 = ("2001:db8::/32", "3fff::/20")


def _collapse(nets: list[IPNetwork]) -> list[IPNetwork]:
    """``ipaddress.collapse_addresses`` of networks of one IP version."""
    collapse: Any = ipaddress.collapse_addresses
    return list(collapse(nets))


def _subtract(universe: Iterable[IPNetwork], holes: Iterable[str]) -> tuple[IPNetwork, ...]:
    blocks = list(universe)
    for hole in (ipaddress.ip_network(h) for h in holes):
        kept: list[IPNetwork] = []
        for block in blocks:
            if block.version != hole.version or not block.overlaps(hole):
                kept.append(block)
            elif hole.subnet_of(block):  # type: ignore[arg-type]
                kept.extend(block.address_exclude(hole))  # type: ignore[arg-type]
            # else the hole covers the block: drop it
        blocks = kept
    return tuple(_collapse(blocks))


@functools.cache
def public_blocks(version: int) -> tuple[IPNetwork, ...]:
    """The public address space of IP ``version`` as disjoint blocks."""
    if version == 4:
        return _subtract([ipaddress.ip_network("0.0.0.0/0")], _NOT_PUBLIC_V4)
    return _subtract([ipaddress.ip_network(c) for c in _PUBLIC_V6], _NOT_PUBLIC_V6)


def parse_cidrs(cidrs: Iterable[object]) -> list[IPNetwork]:
    """The CIDRs that parse (host bits cleared); ``*`` (Cloud Armor's "any") is both /0s.
    What does not parse is the caller's to report."""
    nets: list[IPNetwork] = []
    for cidr in cidrs:
        text = str(cidr).strip()
        if text == "*":
            nets += [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
            continue
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return nets


def public_addresses(cidrs: Iterable[object], version: int) -> int:
    """How many public addresses of IP ``version`` the union of ``cidrs`` covers."""
    union = _collapse([n for n in parse_cidrs(cidrs) if n.version == version])
    total = 0
    for net in union:
        for block in public_blocks(version):
            if not net.overlaps(block):
                continue
            total += net.num_addresses if net.subnet_of(block) else block.num_addresses  # type: ignore[arg-type]
    return total


@dataclass(frozen=True)
class Breadth:
    version: int
    addresses: int

    def __str__(self) -> str:
        limit = PUBLIC_LIMIT_PREFIX[self.version]
        bits = self.addresses.bit_length() - 1
        size = f"2^{bits}" if self.addresses == 1 << bits else f"about 2^{bits}"
        return f"{size} public IPv{self.version} addresses, more than a /{limit}"


def too_broad(cidrs: Iterable[object]) -> list[Breadth]:
    """Per IP version whose union of ``cidrs`` covers more public addresses than the limit,
    how many: empty when the set is a list of callers, not "from anywhere"."""
    listed = list(cidrs)
    found = []
    for version, prefix in PUBLIC_LIMIT_PREFIX.items():
        count = public_addresses(listed, version)
        if count > 1 << ((32 if version == 4 else 128) - prefix):
            found.append(Breadth(version, count))
    return found


def from_anywhere(cidrs: Iterable[object]) -> bool:
    """True when ``cidrs`` together admit the internet at large (see the module's rule)."""
    return bool(too_broad(cidrs))
