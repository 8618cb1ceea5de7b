"""Google Cloud: the Pulumi component (component.py) and the catalog refresh (catalog.py).

Nothing is imported here, so that loading one does not load the other's heavy SDK."""
