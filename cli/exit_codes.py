"""The gpufit command's exit codes, one meaning each (the README lists them)."""

OK = 0
INVALID_SPEC = 2
INFEASIBLE = 3
OVER_BUDGET = 4
BAD_CATALOG = 5
REFRESH_FAILED = 6
AUTH = 7
LOCK_STALE = 8
REAP_FAILED = 9
SWEEP_INCOMPLETE = 10
USAGE = 64
