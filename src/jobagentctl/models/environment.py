"""The environment a job runs in: `run` sets it for its child, the client settings read it.

Named here, the one module both the client settings and the supervisor may import; nowhere
else spells them (tests/unit/codebase/test_vocabulary.py).
"""

from __future__ import annotations

__all__ = [
    "AGENT_ENV",
    "API_KEY_ENV",
    "API_KEY_FILE_ENV",
    "ATTEMPT_ENV",
    "CLAIM_ID_ENV",
    "CTRLPLANE_ENV",
    "ENV_PREFIX",
    "JOB_FILE_ENV",
    "JOB_ID_ENV",
    "LEASE_SECONDS_ENV",
    "REDACT_SOCKET_ENV",
    "RUN_PID_ENV",
    "STOP_REASON_FILE_ENV",
    "URL_ENV",
    "WORKSPACE_ENV",
]

ENV_PREFIX = "JOBAGENTCTL_"
# The job context: `claim -o env` exports it, `run` gives it to its child, `heartbeat` and
# `complete` read it back (settings.job_context).
JOB_ID_ENV = f"{ENV_PREFIX}JOB_ID"
CLAIM_ID_ENV = f"{ENV_PREFIX}CLAIM_ID"
ATTEMPT_ENV = f"{ENV_PREFIX}ATTEMPT"
LEASE_SECONDS_ENV = f"{ENV_PREFIX}LEASE_SECONDS"  # also the client's default lease
# `run`'s files for its child: the claimed job as JSON, and where the stop reason is written.
JOB_FILE_ENV = f"{ENV_PREFIX}JOB_FILE"
STOP_REASON_FILE_ENV = f"{ENV_PREFIX}STOP_REASON_FILE"
# Where `jobagentctl redact add` inside a job hands `run` a value to redact.
REDACT_SOCKET_ENV = f"{ENV_PREFIX}REDACT_SOCKET"
# The pid of that `run`: `redact add` hands a value only to a socket this process listens on.
RUN_PID_ENV = f"{ENV_PREFIX}RUN_PID"
# Client settings `run` hands its child, so a `jobagentctl` inside the job reaches the same
# server (the API key only with --pass-api-key).
URL_ENV = f"{ENV_PREFIX}URL"
WORKSPACE_ENV = f"{ENV_PREFIX}WORKSPACE"
AGENT_ENV = f"{ENV_PREFIX}AGENT"
API_KEY_ENV = f"{ENV_PREFIX}API_KEY"
API_KEY_FILE_ENV = f"{ENV_PREFIX}API_KEY_FILE"
# ctrlplane's own variables, honoured as fallbacks so existing ctrlplane set-ups just work.
CTRLPLANE_ENV = {
    "url": "CTRLPLANE_URL",
    "api_key": "CTRLPLANE_API_KEY",
    "workspace": "CTRLPLANE_WORKSPACE",
}
