"""The price catalog: where catalogs live and which one a command uses (``store``), the refresh
from the clouds' APIs (``refresh``, ``aws``, ``gcp``) and the embedded snapshot's builder
(``snapshot``)."""
