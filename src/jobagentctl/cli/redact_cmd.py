"""`jobagentctl redact add`: inside a job, hand `run` a secret to redact from then on."""

from __future__ import annotations

import typer

__all__ = ["redact_app", "register"]

redact_app = typer.Typer(help="Secrets `run` redacts: add one at run time.", no_args_is_help=True)


@redact_app.command("add")
def add() -> None:
    """Read a value on stdin and have the `run` supervising this job redact it from now on.

    For a secret the command fetched while it runs (from Vault, a cloud secrets manager). From then
    on it is replaced by [REDACTED] in what `run` sends to the server (the failure message,
    --report). One value per call: all of stdin, less one trailing newline; values under 6
    characters are not redacted. Only the job's own processes can hand values over: run names its
    socket in JOBAGENTCTL_REDACT_SOCKET and its pid in JOBAGENTCTL_RUN_PID. The value goes only to
    that run; a socket whose listener is another process gets nothing.

    Exit codes: 0 added; 2 no value, or too short; 3 no `run` to hand it to; 4 what listens is not
    this job's `run` (the value was not sent).

    \b
    Example:
      token=$(vault read -field=token secret/deploy)
      printf '%s' "$token" | jobagentctl redact add
    """
    import os
    import sys

    from jobagentctl.errors import AuthError, ServerUnavailable, UsageError
    from jobagentctl.models import REDACT_SOCKET_ENV, RUN_PID_ENV
    from jobagentctl.supervisor.output.redact import MIN_SECRET_CHARS, redactable
    from jobagentctl.supervisor.process.handover import MAX_VALUE_BYTES, PeerRefused, hand_over

    value = sys.stdin.buffer.read(MAX_VALUE_BYTES + 1)
    if len(value) > MAX_VALUE_BYTES:
        raise UsageError(f"the value is longer than {MAX_VALUE_BYTES} bytes")
    value = value.removesuffix(b"\n").removesuffix(b"\r")
    if not value:
        raise UsageError("no value on stdin: e.g. printf '%s' \"$TOKEN\" | jobagentctl redact add")
    if not redactable(value):
        raise UsageError(
            f"the value is too short: values under {MIN_SECRET_CHARS} characters are not redacted"
        )
    path = os.environ.get(REDACT_SOCKET_ENV)
    if not path:
        raise ServerUnavailable(
            f"no `jobagentctl run` supervises this process ({REDACT_SOCKET_ENV} is not set)"
        )
    run_pid = os.environ.get(RUN_PID_ENV, "")
    if not run_pid.isdecimal():
        raise AuthError(
            f"refused to hand the value over: {RUN_PID_ENV} does not name the `jobagentctl run`"
            " of this job, so its socket cannot be checked (a `run` older than this command?)"
        )
    try:
        added = hand_over(path, value, run_pid=int(run_pid))
    except PeerRefused as exc:
        raise AuthError(f"refused to hand the value over: {exc}") from None
    except OSError as exc:
        raise ServerUnavailable(
            f"cannot reach the `jobagentctl run` of this job ({exc.strerror or exc})"
        ) from None
    if not added:
        raise UsageError(
            f"the value is too short: values under {MIN_SECRET_CHARS} characters are not redacted"
        )


def register(app: typer.Typer) -> None:
    """Add the ``redact`` command group to ``app``."""
    app.add_typer(redact_app, name="redact")
