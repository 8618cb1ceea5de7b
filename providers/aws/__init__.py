"""AWS: the Pulumi component (component.py) and the catalog refresh (catalog.py)."""
