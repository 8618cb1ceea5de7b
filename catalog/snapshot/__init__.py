"""Building the embedded price/instance snapshot ``selector/data/catalog.json``
(``scripts/build_snapshot.py`` runs it).

The snapshot is generated, never edited by hand: every figure lives in the human-readable
CSV tables under ``selector/data/snapshot_src/``, each row naming its source key (resolved in
``sources.csv``) and, for prices, the date the price was observed (``as_of``).

Tables
  meta.csv                     snapshot ``as_of`` and ``source`` (no clock is read)
  sources.csv                  source key -> title, url, retrieved
  aws_instance_types.csv       AWS instance specs
  aws_offers.csv               AWS prices: one row per instance type, region, zone (AZ ID, e.g.
                               ``use1-az2``) and market as a catalog lists them, or one
                               region-wide row (zone empty) where a source has no zone data
  gcp_machine_types.csv        GCP accelerator-optimized machine types (A2, A3, A4, G2)
                               and the catalog accelerator row that prices their GPUs
  gcp_n1_hosts.csv             N1 host shapes used with attached GPUs
  gcp_n1_limits.csv            max vCPUs / memory of an N1 host per attached T4/V100 count
  gcp_n1_combos.csv            the N1 + GPU combinations shipped (checked against the limits)
  gcp_host_prices.csv          GCP host-VM prices per region and market, with the zones listing them
  gcp_accelerator_prices.csv   GCP accelerator prices per region, market and GPU count, with zones
  spot_interruption.csv        AWS Spot Instance Advisor buckets

Offers and zones. An offer is one instance type, region, market and price. Where every zone a
source lists for a region and market carries the same price, the offer is region-level:
``"zone": null`` and ``"zones"`` the sorted zones listing it. Where the price differs by zone
(AWS spot), there is one offer per zone: ``"zone": "<zone>"``, ``"zones": ["<zone>"]``. A
region-wide row without zone data gives ``"zones": []`` (unknown) and may carry a ``lo``/``hi``
range across zones (``hourly_usd`` is the high end). AWS zones are AZ IDs, GCP zones names
(``us-central1-a``).

Rows marked ``superseded`` or ``suspect`` stay in the tables for the record and are
never priced; each must say why in notes. A GCP offer is host price + accelerator price, and
exists only where both rows exist for the region and market, both have status ``ok``, and at
least one zone lists both (the offer's zones are those). An on-demand accelerator row below
SUSPECT_RATIO x the highest on-demand price the table holds for the same accelerator and count
(about half price, the pattern gpu-cloud-facts.md flags for us-central1 H100 and A100-80GB) must
be marked ``suspect``. So must an AWS spot row at EC2's spot floor, 10 % of the region's
on-demand price (SPOT_FLOOR_RATIO).

The build fails loudly (exit status 1, every problem listed) when a table breaks a rule:
unknown source key, offer for an undeclared instance type, duplicate offer key (cloud, type,
region, zone, market), duplicate zone row or zone listed twice, malformed zone (an AWS AZ ID
whose prefix disagrees with its region's other AZs, a GCP zone not of its region), a type,
region and market priced both per zone and region-wide, non-positive price, GPU name outside the
canonical list, bad market/confidence/bucket/status, an unflagged about-half-price GPU row, N1
combination beyond GCP's vCPU/memory limits, malformed date.

The package's parts: ``tables`` (reading the tables, rows to entries), ``aws`` and ``gcp``
(each cloud's types and offers), ``build`` (the document, the rules across tables, rendering).
"""

from catalog.snapshot.aws import build_aws
from catalog.snapshot.build import build, build_interruptions, build_sources, render, summary, validate
from catalog.snapshot.gcp import build_gcp
from catalog.snapshot.tables import OUT, ROOT, SRC, BuildError, Problems, read_table

__all__ = [
    "OUT",
    "ROOT",
    "SRC",
    "BuildError",
    "Problems",
    "build",
    "build_aws",
    "build_gcp",
    "build_interruptions",
    "build_sources",
    "read_table",
    "render",
    "summary",
    "validate",
]
