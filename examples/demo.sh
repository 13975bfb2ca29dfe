#!/usr/bin/env bash
# jobagentctl demo — and a commented example of scripting jobagentctl from bash.
#
# What it shows, in under a minute, with nothing but a SQLite file in a temp dir:
#   1. `server init` + `server start`: a self-hosted server with short leases (5 s).
#   2. `agents register` + `jobs enqueue`: one job agent and five queued jobs.
#   3. Two workers, "alice" and "bob", each `jobagentctl run --loop` for that agent.
#   4. alice is SIGKILLed mid-job (a crashed host): her heartbeats stop, `inspect-claims`
#      shows her claim going stale and expiring, the reaper puts the job back in the queue,
#      and bob runs it as attempt 2.
#   5. A summary: every job, its attempts, and who finished it.
#
# Run it with `make demo` (which puts .venv/bin on PATH), or directly:
#   PATH="$PWD/.venv/bin:$PATH" bash examples/demo.sh
# Everything it starts is stopped on any exit (success, error or Ctrl-C).
set -euo pipefail

LEASE=4          # seconds: alice's job is re-queued at most LEASE + REAP seconds after the crash
REAP=8           # the reaper's sweep interval: long enough for us to see the claim expired
JOB_SECONDS=2    # how long each job "works"
JOBS=5

command -v jobagentctl >/dev/null || {
  echo "jobagentctl is not on PATH: run 'make demo', or PATH=\"\$PWD/.venv/bin:\$PATH\"" >&2
  exit 2
}
PYTHON=$(command -v python3 || command -v python)

say() { printf "\n\033[1m== %s\033[0m  [%ss]\n" "$*" "$((SECONDS - started))" >&2; }

# --- housekeeping: a private temp dir, and a trap that stops everything we start -----------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/jobagentctl-demo.XXXXXX")
pids=()      # background processes we started (server, agents)
started=$SECONDS

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  # SIGTERM first (the agents release their jobs, the server drains), SIGKILL what lingers.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  # Job processes run in their own process groups: kill any a crash left behind.
  for file in "$tmp"/state/*.pgid; do
    [ -e "$file" ] && kill -KILL -- "-$(cat "$file")" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Keep the demo away from the user's own configuration and server.
unset JOBAGENTCTL_URL JOBAGENTCTL_WORKSPACE JOBAGENTCTL_AGENT JOBAGENTCTL_API_KEY \
  JOBAGENTCTL_API_KEY_FILE JOBAGENTCTL_PROFILE JOBAGENTCTL_CONFIG JOBAGENTCTL_LEASE_SECONDS \
  CTRLPLANE_URL CTRLPLANE_API_KEY CTRLPLANE_WORKSPACE
export XDG_CONFIG_HOME="$tmp/config" XDG_DATA_HOME="$tmp/data"
# Tables size themselves to the terminal; piped (CI, tests) they would squeeze into 80 columns.
[ -t 1 ] || export COLUMNS="${COLUMNS:-160}"
mkdir -p "$tmp/state"

# Read one field of a JSON object on stdin (every jobagentctl command has `-o json`).
field() { "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# Run a command every 0.2 s until it succeeds, or fail after $1 seconds. (Its arguments are
# expanded once, at the call: put anything that must be re-read in a function.)
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "demo: timed out waiting for $what" >&2; exit 1; fi
    sleep 0.2
  done
}

# --- 1. the server ---------------------------------------------------------------------------

say "1. A server on SQLite: init prints the workspace and its key once"
init=$(jobagentctl server init --database "sqlite:///$tmp/demo.db" -o json)
workspace=$(field workspaceId <<<"$init")
api_key=$(field apiKey <<<"$init")
echo "workspace $workspace (key kept in \$JOBAGENTCTL_API_KEY, never printed)" >&2

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
JOBAGENTCTL_SERVER_MIN_LEASE_SECONDS=1 jobagentctl server start \
  --database "sqlite:///$tmp/demo.db" --port "$port" \
  --lease-seconds "$LEASE" --reap-interval "$REAP" 2>"$tmp/server.log" &
pids+=($!)
wait_for 30 "the server to listen" grep -q "listening" "$tmp/server.log"
echo "listening on http://127.0.0.1:$port (lease ${LEASE}s, reaper every ${REAP}s)" >&2

# Every client command reads these (flags and a config profile work too).
export JOBAGENTCTL_URL="http://127.0.0.1:$port"
export JOBAGENTCTL_WORKSPACE="$workspace"
export JOBAGENTCTL_API_KEY="$api_key"

# --- 2. an agent and its queue ---------------------------------------------------------------

say "2. Register a job agent and queue $JOBS jobs"
JOBAGENTCTL_AGENT=$(jobagentctl agents register demo-agent -o json | field id)
export JOBAGENTCTL_AGENT
# Each job's config is what the job script gets to read. (Enqueued in parallel: each call is
# its own process, and the queue orders jobs by creation time.)
enqueues=()
for n in $(seq "$JOBS"); do
  jobagentctl -q jobs enqueue --config "{\"name\": \"job-$n\", \"seconds\": $JOB_SECONDS}" \
    -o json >/dev/null &
  enqueues+=($!)
done
for pid in "${enqueues[@]}"; do wait "$pid"; done   # (a bare `wait` would wait for the server)
jobagentctl list -o table

# The job itself: `jobagentctl run` hands it the claimed job as JSON in $JOBAGENTCTL_JOB_FILE
# and its attempt number in $JOBAGENTCTL_ATTEMPT. $WORKER says which demo worker runs it.
cat >"$tmp/job.sh" <<'JOB'
#!/usr/bin/env bash
set -euo pipefail
name=$(python3 -c 'import json, os; print(json.load(open(os.environ["JOBAGENTCTL_JOB_FILE"]))["jobAgentConfig"]["name"])')
seconds=$(python3 -c 'import json, os; print(json.load(open(os.environ["JOBAGENTCTL_JOB_FILE"]))["jobAgentConfig"]["seconds"])')
echo $$ >"$STATE/$WORKER.pgid"                 # our process group, for the crash below
echo "$name $JOBAGENTCTL_JOB_ID" >"$STATE/$WORKER.running"
echo "$WORKER starts $name (attempt $JOBAGENTCTL_ATTEMPT)"
sleep "$seconds"
echo "$name attempt $JOBAGENTCTL_ATTEMPT finished by $WORKER" >>"$STATE/finished"
rm -f "$STATE/$WORKER.running" "$STATE/$WORKER.pgid"
JOB
chmod +x "$tmp/job.sh"

# --- 3. two workers --------------------------------------------------------------------------

say "3. Two workers run the queue: jobagentctl run --loop -- job.sh"
for worker in alice bob; do
  # The lease is the client's to ask for (default 60 s); the server clamps it to its bounds.
  # (TMPDIR: where run puts each job's private files; a SIGKILLed agent leaves them behind.)
  TMPDIR="$tmp" WORKER=$worker STATE="$tmp/state" jobagentctl run --loop --lease-seconds "$LEASE" \
    --report "$tmp/$worker.jsonl" -- "$tmp/job.sh" >"$tmp/$worker.out" 2>"$tmp/$worker.err" &
  pids+=($!)
  eval "${worker}_pid=\$!"
done

# --- 4. alice crashes mid-job ----------------------------------------------------------------

# Let alice finish one job first (its line in her --report), and crash her during the next.
alice_busy_again() {
  [ -s "$tmp/alice.jsonl" ] && [ -s "$tmp/state/alice.running" ] &&
    ! grep -q "^$(cut -d' ' -f1 "$tmp/state/alice.running") " "$tmp/state/finished" 2>/dev/null
}
wait_for 40 "alice to start her second job" alice_busy_again
read -r lost_job lost_id <"$tmp/state/alice.running"
say "4. alice crashes (SIGKILL) in the middle of $lost_job"
kill -KILL "$alice_pid"
wait "$alice_pid" 2>/dev/null || true
# A SIGKILLed agent cannot take its child along (it runs in its own session), and on a real
# crash the whole host is gone: kill alice's job too, as the crash would have.
kill -KILL -- "-$(cat "$tmp/state/alice.pgid")" 2>/dev/null || true
rm -f "$tmp/state/alice.pgid"
echo "alice's heartbeats have stopped; her claim stays active until the lease runs out:" >&2
jobagentctl inspect-claims -o table

# Watch the claim: `-o tsv` is for scripts (no header; columns: job, state, agent, claim,
# attempt, lease, claimed, last heartbeat, expires). It expires LEASE seconds after alice's
# last heartbeat; the next reaper sweep (within REAP seconds) deletes it and re-queues the job.
# Sleep until just before the expiry, then look (each look is a new process, which takes a
# moment to start): the claim shows as expired from then until the sweep.
expires=$(jobagentctl inspect-claims -o tsv | grep "^$lost_id" | cut -f9 || true)
"$PYTHON" - "$expires" <<'PY'
import sys, time
from datetime import datetime
if sys.argv[1]:
    expires = datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp()
    time.sleep(max(0.0, min(expires - time.time() - 0.5, 30.0)))
PY
deadline=$((SECONDS + LEASE + REAP + 30))
while :; do
  row=$(jobagentctl inspect-claims -o tsv | grep "^$lost_id" || true)
  state=$(cut -f2 <<<"$row")
  attempt=$(cut -f5 <<<"$row")
  if [ "$state" = expired ]; then
    say "The lease ran out: inspect-claims shows the claim expired"
    jobagentctl inspect-claims --state expired -o table
    # Monitoring checks use this: exit 6 while any claim is expired (or unleased).
    jobagentctl inspect-claims --fail-if-stuck -o tsv >/dev/null || echo "inspect-claims --fail-if-stuck exited $?" >&2
    break
  fi
  if [ -z "$row" ] || [ "$attempt" != 1 ]; then
    echo "(the reaper was quicker than our look at the claims)" >&2
    break
  fi
  [ "$SECONDS" -lt "$deadline" ] || { echo "demo: the claim never expired" >&2; exit 1; }
  sleep 0.2
done

say "The reaper re-queues $lost_job; bob runs it as attempt 2"
wait_for 40 "bob to finish $lost_job" grep -q "^$lost_job attempt 2 finished by bob" "$tmp/state/finished"
all_finished() { [ "$(wc -l <"$tmp/state/finished")" -ge "$JOBS" ]; }
wait_for 40 "every job to finish" all_finished

# bob drains on SIGTERM: no new claims, the current job finishes, exit 0.
kill -TERM "$bob_pid"
bob_status=0
wait "$bob_pid" || bob_status=$?
echo "bob drained and exited $bob_status" >&2

# --- 5. summary ------------------------------------------------------------------------------

say "5. Summary"
# One call for every job of the agent (-o json: the API objects), one for the lost job's
# attempts; the workers' own log says who finished what.
jobagentctl list --status all --limit 100 -o json >"$tmp/jobs.json"
jobagentctl jobs attempts "$lost_id" -o json >"$tmp/attempts.json"
"$PYTHON" - "$tmp" "$lost_id" <<'PY'
import json, sys
tmp, lost_id = sys.argv[1], sys.argv[2]
jobs = sorted(json.load(open(f"{tmp}/jobs.json")), key=lambda j: j["jobAgentConfig"]["name"])
finished = open(f"{tmp}/state/finished").read().splitlines()
for job in jobs:
    name = job["jobAgentConfig"]["name"]
    by = ", ".join(line.split(" finished by ")[1] for line in finished if line.startswith(name + " "))
    print(f"{name}  {job['status']:<11} finished by {by}")
attempts = json.load(open(f"{tmp}/attempts.json"))
print("attempts of the crashed job: " + ", ".join(
    f"#{a['attempt']} {a['outcome']}" for a in attempts))
PY
echo >&2
# `run --report` writes one JSON line per job: what a CI system or a log shipper would read.
for worker in alice bob; do
  lines=0
  [ -e "$tmp/$worker.jsonl" ] && lines=$(wc -l <"$tmp/$worker.jsonl")
  echo "$worker's --report has $lines line(s)" >&2
done
echo "bob's last one: $(tail -n 1 "$tmp/bob.jsonl")" >&2
echo "demo finished in $((SECONDS - started))s; stopping the server" >&2
