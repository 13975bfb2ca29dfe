"""`jobagentctl completion bash|zsh|fish`: print the shell completion script.

The same text is checked in under ``completions/`` (``make completions`` regenerates it).
"""

from __future__ import annotations

import typer

__all__ = ["SHELLS", "completion_script", "register"]

SHELLS = ("bash", "zsh", "fish")


def completion_script(shell: str) -> str:
    """Typer's completion script for ``jobagentctl`` (no shell detection, no config read)."""
    from typer._completion_shared import get_completion_script

    return get_completion_script(
        prog_name="jobagentctl", complete_var="_JOBAGENTCTL_COMPLETE", shell=shell
    )


def completion(
    shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish."),
) -> None:
    """Print the completion script for SHELL.

    \b
    Examples:
      jobagentctl completion bash > ~/.local/share/bash-completion/completions/jobagentctl
      jobagentctl completion zsh > "${fpath[1]}/_jobagentctl"
      jobagentctl completion fish > ~/.config/fish/completions/jobagentctl.fish
    """
    from jobagentctl.errors import UsageError

    if shell not in SHELLS:
        raise UsageError(f"unsupported shell {shell!r}: use {', '.join(SHELLS)}")
    print(completion_script(shell))


def register(app: typer.Typer) -> None:
    app.command("completion")(completion)
