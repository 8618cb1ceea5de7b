#!/bin/bash
# The scenarios' date: the fake clock ($GPUFIT_FAKE/clock), in any format date knows.
if [ "$*" = +%s ]; then cat "$GPUFIT_FAKE/clock"; else exec /bin/date -d "@$(cat "$GPUFIT_FAKE/clock")" "$@"; fi
