# --- gpufit machine supervisor (machine/scripts/gpufit-machine.sh) ---------------------------
# The settings above are rendered by machine/boot.py, every value quoted; nothing below comes
# from the spec. Commands:
#   boot             run at every boot (gpufit-boot.service): deadline, watchers, the work
#   stop REASON      a planned stop (the deadline timer): checkpoint hook, job stopped, final
#                    sync, status, then leave the group / power off
#   shutdown         the OS is going down (ExecStop of gpufit-final-sync.service, GCP's
#                    shutdown-script): the same stop within the cloud's shutdown budget
# Every cloud call and every state change is logged to the journal (tag gpufit) and written
# as the status object status/machines/<machine>.json in the bucket.
set -uo pipefail
umask 022
export AWS_RETRY_MODE=standard AWS_MAX_ATTEMPTS=8

log() { printf 'gpufit: %s\n' "$*" >&2; }
now() { date +%s; }

# --- the cloud's metadata ----------------------------------------------------------------
imds_token() {
  curl -sf -m 5 -X PUT "$IMDS/latest/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 300'
}
imds() {  # PATH under meta-data/ [TOKEN]: prints the value; fails on 404 (not present)
  local token=${2:-}
  [ -n "$token" ] || token=$(imds_token) || return 1
  curl -sf -m 5 -H "X-aws-ec2-metadata-token: $token" "$IMDS/latest/meta-data/$1"
}
gce() {  # PATH under computeMetadata/v1/ [curl max seconds]
  curl -sf -m "${2:-10}" -H 'Metadata-Flavor: Google' "$GCE/computeMetadata/v1/$1"
}
machine_id() {  # the instance id (AWS) or VM name (GCP), asked once
  if [ -s "$RUN/machine-id" ]; then cat "$RUN/machine-id"; return 0; fi
  local id="" tries=0
  while [ -z "$id" ] && [ "$tries" -lt 10 ]; do
    if [ "$CLOUD" = aws ]; then id=$(imds instance-id); else id=$(gce instance/name); fi
    tries=$((tries + 1))
    [ -n "$id" ] || sleep 3
  done
  [ -n "$id" ] || id="unknown-$(hostname)"
  printf '%s' "$id" > "$RUN/machine-id"
  printf '%s' "$id"
}

# --- the bucket --------------------------------------------------------------------------
put_object() {  # LOCAL-FILE KEY
  if [ "$CLOUD" = aws ]; then aws s3 cp --only-show-errors "$1" "s3://$BUCKET/$2"
  else gcloud storage cp --quiet "$1" "gs://$BUCKET/$2"; fi
}
read_object() {  # KEY: prints it
  if [ "$CLOUD" = aws ]; then aws s3 cp --only-show-errors "s3://$BUCKET/$1" -
  else gcloud storage cat "gs://$BUCKET/$1"; fi
}
object_exists() {  # KEY
  if [ "$CLOUD" = aws ]; then aws s3 ls "s3://$BUCKET/$1" >/dev/null 2>&1
  else gcloud storage ls "gs://$BUCKET/$1" >/dev/null 2>&1; fi
}
count_objects() {  # PREFIX/: how many objects under it
  local listing
  if [ "$CLOUD" = aws ]; then listing=$(aws s3 ls "s3://$BUCKET/$1" 2>/dev/null)
  else listing=$(gcloud storage ls "gs://$BUCKET/$1" 2>/dev/null); fi
  if [ -z "$listing" ]; then echo 0; else printf '%s\n' "$listing" | grep -c .; fi
}
sync_outputs() {  # [BOUND seconds]: outputs/ to the bucket
  local bound=${1:-$T_FINAL_SYNC} code
  mkdir -p "$WORKDIR/outputs"
  if [ "$CLOUD" = aws ]; then
    timeout "$bound" aws s3 sync --only-show-errors "$WORKDIR/outputs" "s3://$BUCKET/$NODE_PREFIX/outputs"
  else
    timeout "$bound" gcloud storage rsync --recursive "$WORKDIR/outputs" "gs://$BUCKET/$NODE_PREFIX/outputs"
  fi
  code=$?
  if [ "$code" -eq 0 ]; then now > "$RUN/last-sync"; return 0; fi
  log "output sync failed (exit $code$([ "$code" -eq 124 ] && echo ": over its $bound s bound"))"
  return "$code"
}
restore_outputs() {  # a replacement machine starts from the last synced outputs
  mkdir -p "$WORKDIR/outputs"
  if [ "$CLOUD" = aws ]; then
    aws s3 sync --only-show-errors "s3://$BUCKET/$NODE_PREFIX/outputs" "$WORKDIR/outputs"
  else
    gcloud storage rsync --recursive "gs://$BUCKET/$NODE_PREFIX/outputs" "$WORKDIR/outputs"
  fi || log "nothing to restore from the bucket"
}

# --- the status object -------------------------------------------------------------------
clean() { local s=${1//[^A-Za-z0-9 ._:\/()=+,@%\'-]/}; printf '%s' "$s"; }
number() { case $1 in '' | *[!0-9]*) printf 'null' ;; *) printf '%s' "$1" ;; esac; }
FINAL_STATES=" succeeded failed gave-up replacing expired stopped "
status() {  # STATE REASON [EXIT-CODE]: a final state stays: a later "stopped" (the group's
  # terminating hook, the OS shutdown) does not overwrite succeeded, gave-up or replacing
  local file="$RUN/status.json" started attempt
  if [ "$1" = stopped ] && [ -s "$RUN/final" ]; then
    log "status stays $(cat "$RUN/final") ($1: $2)"
    return 0
  fi
  case $FINAL_STATES in *" $1 "*) printf '%s' "$1" > "$RUN/final" ;; esac
  started=$(cat "$RUN/started-at" 2>/dev/null)
  attempt=$(cat "$RUN/attempt" 2>/dev/null)
  printf '{"schema":1,"workload":"%s","stack":"%s","cloud":"%s","machine":"%s","group":"%s","node_rank":%s,"nodes":%s,"state":"%s","reason":"%s","exit_code":%s,"attempt":%s,"attempts_allowed":%s,"replacements_allowed":%s,"deployment":"%s","started_at":%s,"updated_at":%s,"expires_at":%s}\n' \
    "$(clean "$WORKLOAD")" "$(clean "$STACK")" "$CLOUD" "$(clean "$(machine_id)")" "$(clean "$GROUP")" \
    "$(number "$NODE_RANK")" "$(number "$NNODES")" "$(clean "$1")" "$(clean "$2")" "$(number "${3:-}")" \
    "$(number "$attempt")" "$((RETRIES + 1))" "$(number "$MAX_REPLACEMENTS")" "$(clean "$DEPLOYMENT")" "$(number "$started")" \
    "$(number "$(now)")" "$(number "$EXPIRES_AT")" > "$file.tmp" && mv "$file.tmp" "$file"
  log "status $1: $2"
  put_object "$file" "status/machines/$(machine_id).json" || log "could not write the status object"
}

# --- leaving: the group, or the machine --------------------------------------------------
in_my_group() {  # AWS: the group DescribeAutoScalingInstances names is this deployment's
  local found
  found=$(aws autoscaling describe-auto-scaling-instances --region "$REGION" --instance-ids "$(machine_id)" \
    --query 'AutoScalingInstances[0].AutoScalingGroupName' --output text) || return 1
  if [ "$found" != "$GROUP" ]; then log "$(machine_id) is not in group $GROUP (found '$found')"; return 1; fi
}
leave_group() {  # out of the group for good: its desired capacity / target size goes down by one
  if [ "$CLOUD" = aws ]; then
    in_my_group && aws autoscaling terminate-instance-in-auto-scaling-group --region "$REGION" \
      --instance-id "$(machine_id)" --should-decrement-desired-capacity
  else
    gcloud compute instance-groups managed delete-instances "$GROUP" --region "$REGION" \
      --project "$PROJECT" --instances "$(machine_id)" --quiet
  fi
}
replace_me() {  # out of the group, which launches another machine in its place
  if [ "$CLOUD" = aws ]; then
    in_my_group && aws autoscaling set-instance-health --region "$REGION" --instance-id "$(machine_id)" \
      --health-status Unhealthy --no-should-respect-grace-period
  else
    gcloud compute instance-groups managed recreate-instances "$GROUP" --region "$REGION" \
      --project "$PROJECT" --instances "$(machine_id)" --quiet
  fi
}
power_off() {  # the end of this process in every case: a power-off returns while the OS stops
  log "powering off"
  poweroff || shutdown -h now
  exit 0
}
complete_lifecycle() {  # the terminating hook held this machine: let the group go on
  aws autoscaling complete-lifecycle-action --region "$REGION" --auto-scaling-group-name "$GROUP" \
    --lifecycle-hook-name "$LIFECYCLE_HOOK" --instance-id "$(machine_id)" --lifecycle-action-result CONTINUE \
    || log "could not complete the lifecycle action: the group continues after $T_HEARTBEAT s"
}
await_removal() {  # after leaving: AWS with a terminating hook, the group holds the machine in
  # Terminating:Wait (its target lifecycle state becomes Terminated): complete the hook at once;
  # else wait for the group to remove the machine
  local waited=0
  if [ "$CLOUD" = aws ] && [ -n "$LIFECYCLE_HOOK" ]; then
    while [ "$waited" -lt "$T_LEAVE_WAIT" ]; do
      if [ "$(imds autoscaling/target-lifecycle-state)" = Terminated ]; then complete_lifecycle; return 0; fi
      sleep "$T_POLL"
      waited=$((waited + T_POLL))
    done
    log "the group did not start terminating this machine within $T_LEAVE_WAIT s"
  else
    sleep "$T_LEAVE_WAIT"
  fi
}
finish() {  # leave | replace | poweroff: the machine's last act
  case $1 in
    leave)
      if [ -n "$GROUP" ]; then
        if leave_group; then log "left group $GROUP"; await_removal; else log "could not leave group $GROUP"; fi
      fi ;;
    replace)
      if replace_me; then log "asked group $GROUP for a replacement"; await_removal
      else log "could not ask group $GROUP for a replacement"; fi ;;
  esac
  power_off
}
finish_planned() { if [ -n "$GROUP" ]; then finish leave; else finish poweroff; fi; }

# --- the job ------------------------------------------------------------------------------
job_running() { local pid; pid=$(cat "$RUN/job.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null; }
machine_type() {  # this machine's instance type (AWS) or machine type (GCP)
  local found
  if [ "$CLOUD" = aws ]; then found=$(imds instance-type) || return 1
  else found=$(gce instance/machine-type) || return 1; fi
  printf '%s' "${found##*/}"
}
replica_environment() {  # GPUFIT_TP (this type's in the plan), GPUFIT_GPUS, GPUFIT_REPLICAS = GPUs / TP, GPUFIT_MAX_NUM_SEQS
  local type shape name tp gpus seqs planned_gpus=$GPU_COUNT max_seqs=$SEQS_DEFAULT
  type=$(machine_type) || type=""
  GPUFIT_TP=$TP_DEFAULT
  for shape in "${TP_BY_TYPE[@]}"; do
    IFS=: read -r name tp gpus seqs <<< "$shape"
    if [ "$name" = "$type" ]; then GPUFIT_TP=$tp; planned_gpus=$gpus; max_seqs=${seqs:-0}; fi
  done
  if [ "${max_seqs:-0}" -gt 0 ] 2>/dev/null; then export GPUFIT_MAX_NUM_SEQS=$max_seqs; fi
  GPUFIT_GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ "${GPUFIT_GPUS:-0}" -ge 1 ] 2>/dev/null || GPUFIT_GPUS=$planned_gpus
  GPUFIT_REPLICAS=$(( GPUFIT_GPUS / GPUFIT_TP ))
  [ "$GPUFIT_REPLICAS" -ge 1 ] || GPUFIT_REPLICAS=1
  export GPUFIT_TP GPUFIT_GPUS GPUFIT_REPLICAS
}
job_environment() {  # the image's own environment, the secrets, gpufit's variables
  local env_script
  for env_script in "${IMAGE_ENVS[@]}"; do
    if [ -f "$env_script" ]; then
      set +u
      # shellcheck disable=SC1090  # the image's activate script (DLAMI /opt/pytorch, conda)
      . "$env_script"
      set -u
      log "job environment: $env_script"
      break
    fi
  done
  if [ -f "$RUN/job.env" ]; then
    set -a
    # shellcheck disable=SC1091
    . "$RUN/job.env"
    set +a
  fi
  export GPUFIT_NODE_RANK="$NODE_RANK" GPUFIT_NNODES="$NNODES" GPUFIT_MASTER_ADDR="$MASTER_ADDR"
  export GPUFIT_MASTER_PORT="$RDZV_PORT" GPUFIT_EXPIRES_AT="$EXPIRES_AT" GPUFIT_BUCKET="$BUCKET"
  export GPUFIT_OUTPUTS="$WORKDIR/outputs" GPUFIT_ATTEMPT
  replica_environment
  if [ "$BATCH_PORT" -gt 0 ]; then  # the batch engine gpufit started: replica r on BATCH_PORT + r
    local r urls=()
    for ((r = 0; r < GPUFIT_REPLICAS; r++)); do urls+=("http://127.0.0.1:$((BATCH_PORT + r))/v1"); done
    export GPUFIT_ENGINE_URL="${urls[0]}" GPUFIT_ENGINE_URLS="${urls[*]}"
  fi
  GPUFIT_ATTEMPT=$(cat "$RUN/attempt" 2>/dev/null || echo 1)
}
run_checkpoint_hook() {  # BOUND
  [ "$HAS_CHECKPOINT" = 1 ] && [ "$1" -gt 0 ] || return 0
  if ! job_running; then log "no job running: no checkpoint hook"; return 0; fi
  log "checkpoint hook (at most $1 s)"
  local code
  (job_environment; cd "$WORKDIR" && exec timeout "$1" bash "$ETC/checkpoint.sh")
  code=$?
  if [ "$code" -eq 124 ]; then log "the checkpoint hook ran past its $1 s: stopped"
  elif [ "$code" -ne 0 ]; then log "the checkpoint hook failed (exit $code)"; fi
}
stop_job() {  # GRACE: TERM the job's process group, KILL it GRACE seconds later
  local pid waited=0
  pid=$(cat "$RUN/job.pid" 2>/dev/null) || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  log "stopping the job (TERM; KILL after $1 s)"
  : > "$RUN/job-stopped"
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$1" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; fi
}
planned_stop() {  # REASON HOOK-BOUND JOB-STOP-BOUND SYNC-BOUND: once per boot, whoever asks first
  exec 8>"$RUN/stop.lock"
  flock -w "$(($2 + $3 + $4 + 60))" 8 || log "another stop holds the lock: going on"
  if [ -e "$RUN/stopped" ]; then log "already stopped ($(cat "$RUN/stopped")): no second sync"; flock -u 8; return 0; fi
  printf '%s' "$1" > "$RUN/stopping"
  if [ -f "$RUN/sync.pid" ]; then kill "$(cat "$RUN/sync.pid")" 2>/dev/null; fi
  if [ "$KIND" != serve ]; then
    run_checkpoint_hook "$2"
    stop_job "$3"
    stop_batch_engine
    sync_outputs "$4"
  fi
  printf '%s' "$1" > "$RUN/stopped"
  flock -u 8
}
checkpoint_now() {  # REASON HOOK-BOUND SYNC-BOUND: checkpoint and sync; the job goes on
  [ "$KIND" = job ] || [ "$KIND" = service ] || return 0
  exec 7>"$RUN/checkpoint.lock"
  flock -n 7 || { log "a checkpoint is under way"; return 0; }
  log "$1: checkpoint and sync"
  run_checkpoint_hook "$2"
  sync_outputs "$3"
  flock -u 7
}

# --- replacement bound and multi-node abort ----------------------------------------------
machine_failure() {  # REASON [EXIT-CODE] [final: no replacement would do better]
  local used
  readiness failed
  if [ -z "$GROUP" ]; then
    status failed "$1" "${2:-}"
    if [ "$NNODES" -gt 1 ]; then abort_peers "$1"; fi
    finish poweroff
  fi
  if [ "${3:-}" = final ]; then
    status gave-up "$1: leaving the group for good" "${2:-}"
    readiness leaving
    finish leave
  fi
  used=$(count_objects "$MARKERS/replacements/")
  if [ "$used" -lt "$MAX_REPLACEMENTS" ]; then
    printf '{"machine":"%s","reason":"%s","at":%s}\n' "$(clean "$(machine_id)")" "$(clean "$1")" "$(now)" \
      > "$RUN/replacement.json"
    put_object "$RUN/replacement.json" "$MARKERS/replacements/$(machine_id).json" || log "could not count the replacement"
    status replacing "$1; the group replaces this machine (replacement $((used + 1)) of $MAX_REPLACEMENTS)" "${2:-}"
    finish replace
  fi
  status gave-up "$1; all $MAX_REPLACEMENTS replacements used: leaving the group for good" "${2:-}"
  readiness leaving
  finish leave
}
abort_peers() {  # REASON: tell every node of the job to stop
  printf '{"machine":"%s","node_rank":%s,"attempt":"%s","reason":"%s","at":%s}\n' "$(clean "$(machine_id)")" \
    "$NODE_RANK" "$(clean "$ATTEMPT")" "$(clean "$1")" "$(now)" > "$RUN/abort.json"
  put_object "$RUN/abort.json" status/abort.json || log "could not tell the other nodes to stop"
}

# --- watchers -----------------------------------------------------------------------------
on_interruption_notice() {  # WHAT
  checkpoint_now "$1" "$T_NOTICE_HOOK" "$T_NOTICE_SYNC"
  status interrupted "$1: checkpointed and synced; the cloud stops this machine"
}
on_scale_in() {  # the group is terminating this machine (scale-in, scale to 0, rebalancing)
  local beat
  if [ -s "$RUN/final" ]; then  # it left on its own (finish): that path completes the hook
    log "the group is terminating this machine after its own end ($(cat "$RUN/final"))"
    exit 0
  fi
  (while sleep "$((T_HEARTBEAT / 2))"; do
    aws autoscaling record-lifecycle-action-heartbeat --region "$REGION" --auto-scaling-group-name "$GROUP" \
      --lifecycle-hook-name "$LIFECYCLE_HOOK" --instance-id "$(machine_id)" || true
  done) &
  beat=$!
  planned_stop "scaled in by group $GROUP" "$T_HOOK" "$T_JOB_STOP" "$T_FINAL_SYNC"
  kill "$beat" 2>/dev/null
  status stopped "scaled in by group $GROUP: outputs synced"
  complete_lifecycle
  exit 0
}
watch_aws() {  # every T_POLL: the spot notice, a rebalance recommendation, a scale-in
  local rebalanced=0 notice=0 token
  while :; do
    token=$(imds_token) || { sleep "$T_POLL"; continue; }
    if [ "$SPOT" = 1 ] && [ "$notice" = 0 ] && imds spot/instance-action "$token" >/dev/null; then
      notice=1
      on_interruption_notice "spot interruption notice"
    fi
    if [ "$SPOT" = 1 ] && [ "$rebalanced" = 0 ] && [ "$notice" = 0 ] \
      && imds events/recommendations/rebalance "$token" >/dev/null; then
      rebalanced=1
      checkpoint_now "rebalance recommendation" "$T_NOTICE_HOOK" "$T_NOTICE_SYNC"
    fi
    if [ -n "$LIFECYCLE_HOOK" ] && [ "$(imds autoscaling/target-lifecycle-state "$token")" = Terminated ]; then
      on_scale_in
    fi
    sleep "$T_POLL"
  done
}
watch_gcp_preemption() {
  local value
  value=$(gce instance/preempted)
  while [ "$value" != TRUE ]; do
    value=$(gce 'instance/preempted?wait_for_change=true' 3700) || sleep 1
  done
  on_interruption_notice "preemption notice"
}
watch_peers() {  # multi-node: a node that gave up since this boot stops the others
  local abort at why started
  started=$(cat "$RUN/started-at")
  while sleep "$T_ABORT_POLL"; do
    abort=$(read_object status/abort.json 2>/dev/null) || continue
    case $abort in *"\"machine\":\"$(machine_id)\""*) continue ;; esac
    # a node of another `gpufit up` attempt (its nodes are being replaced) stops none of this one's
    case $abort in *'"attempt":"'*) case $abort in *"\"attempt\":\"$ATTEMPT\""*) ;; *) continue ;; esac ;; esac
    at=$(printf '%s' "$abort" | sed -n 's/.*"at":\([0-9]*\).*/\1/p')
    if [ "${at:-0}" -ge "$started" ]; then
      why=$(printf '%s' "$abort" | sed -n 's/.*"reason":"\([^"]*\)".*/\1/p')
      planned_stop "a peer gave up" "$T_HOOK" "$T_JOB_STOP" "$T_FINAL_SYNC"
      status stopped "another node gave up ($why): stopping with it"
      finish poweroff
    fi
  done
}
start_watchers() {
  if [ "$CLOUD" = aws ]; then
    if [ "$SPOT" = 1 ] || [ -n "$LIFECYCLE_HOOK" ]; then watch_aws & fi
  elif [ "$SPOT" = 1 ]; then
    watch_gcp_preemption &
  fi
  if [ "$NNODES" -gt 1 ]; then watch_peers & fi
}

# --- deadline -----------------------------------------------------------------------------
arm_deadline() {  # NOW
  systemctl stop gpufit-deadline.timer >/dev/null 2>&1
  systemctl reset-failed gpufit-deadline.service gpufit-deadline.timer >/dev/null 2>&1
  systemd-run --unit=gpufit-deadline --description="gpufit planned stop before the deadline" \
    --on-active="$((STOP_AT - $1))s" --timer-property=AccuracySec=1s "$SELF" stop deadline \
    || log "could not arm the deadline timer"
  shutdown -h "+$(((BACKSTOP_AT - $1 + 59) / 60))" "gpufit deadline backstop" \
    || log "could not arm the backstop shutdown"
}

# --- secrets ------------------------------------------------------------------------------
fetch_secret() {  # REF: prints the value
  local ref=$1
  if [ "$CLOUD" = aws ]; then
    local region=$REGION  # an ARN names its secret's region (secrets are regional)
    if [[ $ref == arn:*:secretsmanager:*:*:secret:* ]]; then region=$(cut -d: -f4 <<< "$ref"); fi
    aws secretsmanager get-secret-value --region "$region" --secret-id "$ref" --query SecretString --output text
  elif [[ $ref == projects/*/secrets/* ]]; then
    local project=${ref#projects/}
    gcloud secrets versions access latest --secret "${ref##*/}" --project "${project%%/*}"
  else
    gcloud secrets versions access latest --secret "$ref" --project "$PROJECT"
  fi
}
write_secrets() {  # FILE FORMAT(shell|docker) then VAR REF pairs: root-only, values never logged
  local file=$1 format=$2 var ref value tries
  shift 2
  (umask 077 && : > "$file.tmp") || return 1
  while [ "$#" -ge 2 ]; do
    var=$1 ref=$2
    shift 2
    tries=0 value=""
    until value=$(fetch_secret "$ref") && [ -n "$value" ] && [ "$value" != None ]; do
      tries=$((tries + 1))
      if [ "$tries" -ge 3 ]; then log "could not read the secret for $var"; rm -f "$file.tmp"; return 1; fi
      sleep 10
    done
    if [ "$format" = docker ]; then
      case $value in *$'\n'*) log "the secret for $var holds a line break"; rm -f "$file.tmp"; return 1 ;; esac
      printf '%s=%s\n' "$var" "$value" >> "$file.tmp"
    else
      printf '%s=%q\n' "$var" "$value" >> "$file.tmp"
    fi
  done
  mv "$file.tmp" "$file"
}

write_sglang_config() {  # FILE REF: SGLang's API key as its --config YAML, root-only (tmpfs)
  local file=$1 ref=$2 value tries=0 q="'"
  (umask 077 && : > "$file.tmp") || return 1
  until value=$(fetch_secret "$ref") && [ -n "$value" ] && [ "$value" != None ]; do
    tries=$((tries + 1))
    if [ "$tries" -ge 3 ]; then log "could not read the secret for SGLang's API key"; rm -f "$file.tmp"; return 1; fi
    sleep 10
  done
  case $value in *$'\n'*) log "the secret for SGLang's API key holds a line break"; rm -f "$file.tmp"; return 1 ;; esac
  # one YAML single-quoted scalar: a quote inside is doubled, nothing else is special
  printf "api-key: '%s'\n" "${value//$q/$q$q}" >> "$file.tmp"
  mv "$file.tmp" "$file"
}

# --- a token batch's engine on 127.0.0.1: up before job.command, down after it ----------
batch_engine_healthy() {
  local r
  for ((r = 0; r < GPUFIT_REPLICAS; r++)); do
    curl -sf -m 5 -o /dev/null "http://127.0.0.1:$((BATCH_PORT + r))$HEALTH_PATH" || return 1
  done
}
start_batch_engine() {  # GPUFIT_TP, GPUFIT_REPLICAS, GPUFIT_MAX_NUM_SEQS: this machine type's
  local until
  [ "$BATCH_PORT" -gt 0 ] || return 0
  until=$(($(now) + LOAD_BOUND))
  status starting "starting the batch engine (at most $LOAD_BOUND s)"
  write_secrets "$RUN/serve.env" docker "${SERVE_SECRETS[@]}" || machine_failure "could not fetch the engine's secrets"
  replica_environment
  bash "$ETC/batch-engine-start.sh" || machine_failure "could not start the batch engine (exit $?)"
  until batch_engine_healthy; do
    if [ "$(now)" -ge "$until" ]; then machine_failure "the batch engine did not answer $HEALTH_PATH within $LOAD_BOUND s"; fi
    sleep "$T_HEALTH_POLL"
  done
  log "batch engine answering on 127.0.0.1:$BATCH_PORT+ ($GPUFIT_REPLICAS x TP $GPUFIT_TP, $GPUFIT_MAX_NUM_SEQS sequences)"
}
stop_batch_engine() {  # every replica a machine of the fleet's types can hold (8 GPUs at most)
  [ "$BATCH_PORT" -gt 0 ] || return 0
  local r
  for ((r = 0; r < (GPU_COUNT > 8 ? GPU_COUNT : 8); r++)); do docker rm --force "gpufit-batch-$r" >/dev/null 2>&1; done
  log "batch engine stopped"
}

# --- work: a job or a command ------------------------------------------------------------
run_job() {
  local done_count code attempt=0
  done_count=$(count_objects "$MARKERS/done/")
  if [ "$done_count" -ge "$MACHINES" ]; then
    status succeeded "the job already finished on $done_count machine(s): nothing to run" 0
    finish_planned
  fi
  restore_outputs
  if [ "${#SECRET_VARS[@]}" -gt 0 ]; then
    local pairs=() i
    for i in "${!SECRET_VARS[@]}"; do pairs+=("${SECRET_VARS[$i]}" "${SECRET_REFS[$i]}"); done
    write_secrets "$RUN/job.env" shell "${pairs[@]}" || machine_failure "could not fetch the job's secrets"
  fi
  start_batch_engine
  if [ "$T_SYNC_EVERY" -gt 0 ]; then
    (while sleep "$T_SYNC_EVERY"; do [ -e "$RUN/stopping" ] && break; sync_outputs; done) &
    echo "$!" > "$RUN/sync.pid"
  fi
  while :; do
    attempt=$((attempt + 1))
    echo "$attempt" > "$RUN/attempt"
    status running "attempt $attempt of $((RETRIES + 1))"
    (job_environment; cd "$WORKDIR" && exec setsid bash "$ETC/job.sh") &
    echo "$!" > "$RUN/job.pid"
    wait "$!"
    code=$?
    if [ -e "$RUN/job-stopped" ]; then  # it was asked to stop: whatever it exits, it did not finish
      log "the job exited $code after it was asked to stop for: $(cat "$RUN/stopping" 2>/dev/null)"
      wait
      exit 0
    fi
    if [ "$code" -eq 0 ] && [ "$KIND" = job ]; then job_succeeded; fi
    if [ -e "$RUN/stopping" ]; then
      log "the job stopped for: $(cat "$RUN/stopping")"
      wait
      exit 0
    fi
    log "the command exited $code (attempt $attempt of $((RETRIES + 1)))"
    if [ "$attempt" -gt "$RETRIES" ] || [ "$code" -eq 126 ] || [ "$code" -eq 127 ]; then job_failed "$code" "$attempt"; fi
    status retrying "exit $code; running it again in $T_RETRY_PAUSE s" "$code"
    sleep "$T_RETRY_PAUSE"
  done
}
job_succeeded() {
  planned_stop "the job finished" 0 0 "$T_FINAL_SYNC"
  printf '{"machine":"%s","at":%s}\n' "$(clean "$(machine_id)")" "$(now)" > "$RUN/done.json"
  put_object "$RUN/done.json" "$MARKERS/done/$(machine_id).json" || log "could not record the finished job"
  status succeeded "the job exited 0; outputs synced" 0
  finish_planned
}
job_failed() {  # EXIT-CODE ATTEMPTS
  local what="the command exited $1"
  [ "$NNODES" -gt 1 ] && what="torchrun exited $1 (a node was lost, or never joined, for longer than the $T_JOIN s rendezvous wait, or the job failed)"
  planned_stop "the job failed" 0 0 "$T_FINAL_SYNC"
  case $1 in  # the shell's own codes: the same image fails the same way on any machine
    127) machine_failure "$what: a command was not found in the image's environment; not retried" "$1" final ;;
    126) machine_failure "$what: a command is not executable; not retried" "$1" final ;;
  esac
  machine_failure "$what after $2 attempts" "$1"
}

# --- work: a model server ----------------------------------------------------------------
readiness() {  # STATE [UNTIL]: what the readiness responder answers the group's health check
  [ "$KIND" = serve ] || return 0
  printf '{"state":"%s","until":%s}\n' "$1" "${2:-0}" > "$RUN/readiness.json.tmp" \
    && mv "$RUN/readiness.json.tmp" "$RUN/readiness.json"
}
serve_host() {  # the address the server binds: loopback, or the private interface's (never 0.0.0.0)
  local ip
  if [ "$SERVE_BIND" = loopback ]; then echo 127.0.0.1; return 0; fi
  if [ "$CLOUD" = aws ]; then ip=$(imds local-ipv4) || return 1
  else ip=$(gce instance/network-interfaces/0/ip) || return 1
  fi
  [[ $ip =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || return 1
  echo "$ip"
}
server_healthy() {
  local port
  for port in "${SERVE_PORTS[@]}"; do curl -sf -m 5 -o /dev/null "http://$SERVE_HOST:$port$HEALTH_PATH" || return 1; done
}
run_server() {
  local until fails=0
  until=$(($(now) + LOAD_BOUND))
  readiness loading "$until"
  SERVE_HOST=$(serve_host) || machine_failure "could not read the machine's private address from the metadata server"
  export SERVE_HOST
  if [ "$READINESS_PORT" -gt 0 ]; then
    systemd-run --unit=gpufit-readiness --description="gpufit readiness for the group's health check" \
      --setenv=GPUFIT_ENGINE_HOST="$SERVE_HOST" \
      --property=Restart=always python3 "$LIB/readiness.py" "$RUN/readiness.json" "$READINESS_PORT" \
      "$HEALTH_PATH" "${SERVE_PORTS[@]}" || log "could not start the readiness responder"
  fi
  status starting "loading the model server (at most $LOAD_BOUND s)"
  if [ -n "$SGLANG_CONFIG" ]; then
    write_sglang_config "$SGLANG_CONFIG" "$API_KEY_REF" || machine_failure "could not fetch the server's secrets"
    write_secrets "$RUN/serve.env" docker "${SERVE_SECRETS[@]}" \
      || machine_failure "could not fetch the server's secrets"
  else
    write_secrets "$RUN/serve.env" docker "$API_KEY_VAR" "$API_KEY_REF" "${SERVE_SECRETS[@]}" \
      || machine_failure "could not fetch the server's secrets"
  fi
  bash "$ETC/serve-restore.sh" || log "no cached weights in the bucket"
  bash "$ETC/serve-start.sh" || machine_failure "could not start the model server (exit $?)"
  until server_healthy; do
    if [ "$(now)" -ge "$until" ]; then machine_failure "the model server did not answer $HEALTH_PATH within $LOAD_BOUND s"; fi
    sleep "$T_HEALTH_POLL"
  done
  readiness serving
  status serving "answering $HEALTH_PATH on port(s) ${SERVE_PORTS[*]}"
  bash "$ETC/serve-cache.sh" || log "could not cache the weights in the bucket"
  while sleep "$T_HEALTH_WATCH"; do
    if server_healthy; then fails=0; continue; fi
    fails=$((fails + 1))
    log "the model server failed its health check ($fails of $T_HEALTH_FAILURES)"
    [ "$fails" -ge "$T_HEALTH_FAILURES" ] && machine_failure "the model server stopped answering $HEALTH_PATH"
  done
}

# --- commands -----------------------------------------------------------------------------
cmd_boot() {
  local t
  mkdir -p "$WORKDIR/outputs"
  rm -f "$RUN/stopping" "$RUN/stopped" "$RUN/job-stopped" "$RUN/final" "$RUN/job.pid" "$RUN/sync.pid" "$RUN/attempt"
  [ -n "$MASTER_ADDR" ] || MASTER_ADDR=$(hostname -I | cut -d' ' -f1)
  t=$(now)
  echo "$t" > "$RUN/started-at"
  log "machine $(machine_id): $KIND, deadline $EXPIRES_AT (planned stop at $STOP_AT)"
  if [ "$t" -ge "$STOP_AT" ]; then
    status expired "booted at $t, past its planned stop at $STOP_AT: nothing runs"
    finish_planned
  fi
  arm_deadline "$t"
  start_watchers
  case $KIND in
    serve) run_server ;;
    job | service) run_job ;;
    *)
      status idle "no job command: ready until the deadline"
      while :; do sleep 3600; done ;;
  esac
}
cmd_stop() {  # REASON
  planned_stop "$1" "$T_HOOK" "$T_JOB_STOP" "$T_FINAL_SYNC"
  status stopped "planned stop: $1; outputs synced"
  readiness leaving
  finish_planned
}
cmd_shutdown() {
  if [ -e "$RUN/stopped" ]; then exit 0; fi
  planned_stop "the machine is shutting down" "$T_SHUTDOWN_HOOK" "$T_SHUTDOWN_JOB_STOP" "$T_SHUTDOWN_SYNC"
  status stopped "the machine shut down: outputs synced"
}

MARKERS="status/deployments/$DEPLOYMENT"  # done and replacement markers: this deployment's only
install -d -m 0700 "$RUN"
case ${1:-} in
  boot) cmd_boot ;;
  stop) cmd_stop "${2:-deadline}" ;;
  shutdown) cmd_shutdown ;;
  *) log "usage: $0 boot | stop REASON | shutdown"; exit 64 ;;
esac
