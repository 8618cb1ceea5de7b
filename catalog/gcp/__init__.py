"""The GCP catalog fetcher: ``fetcher`` (orchestration, the module that says what a refresh
asks and how it fails), ``client`` (the retried Compute Engine and Cloud Billing calls),
``machine_types`` (listings and instance type entries) and ``prices`` (the SKU price rules).

Importing it loads neither the Google clients nor tenacity: they are imported when called."""

from catalog.gcp.fetcher import GcpCatalogFetcher

__all__ = ["GcpCatalogFetcher"]
