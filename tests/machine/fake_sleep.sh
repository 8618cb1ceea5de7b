#!/bin/bash
# The scenarios' sleep: advance the fake clock ($GPUFIT_FAKE/clock) by the seconds asked, then
# pause a 250th of them (10 to 100 ms) so that loops neither spin nor wait.
exec 9>>"$GPUFIT_FAKE/clock.lock"
flock 9
now=$(cat "$GPUFIT_FAKE/clock")
n=${1%%.*}
case $n in '' | *[!0-9]*) n=1 ;; esac
echo $((now + n)) > "$GPUFIT_FAKE/clock.new" && mv "$GPUFIT_FAKE/clock.new" "$GPUFIT_FAKE/clock"
flock -u 9
/bin/sleep "$(awk -v n="$n" 'BEGIN { p = n / 250; print (p < 0.01 ? 0.01 : (p > 0.1 ? 0.1 : p)) }')"
