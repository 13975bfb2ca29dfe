"""`jobagentctl completion bash|zsh|fish`: print the shell completion script.

The scripts are checked in under ``completions/``; Tab itself is answered from
``completion_tree.json``, the command tree written out by :func:`build_tree`. ``make completions``
regenerates both, and a test fails when either is stale.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any

import typer

from jobagentctl.cli.shell_complete import SHELLS, TREE_FILE, completion_script

__all__ = ["TREE_FILE", "build_tree", "completion_script", "register", "tree_json"]


def _choices(param: Any, ctx: Any) -> list[str]:
    """The values Tab offers for ``param``: an enum's, or those its own completion gives."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [str(member.value) for member in annotation]
    # Plain values only: a path's completion ("file") is the shell's own.
    offered = param.shell_complete(ctx, "")
    return [item.value for item in offered if item.type == "plain" and item.value]


def _node(command: Any, ctx: Any) -> dict[str, Any]:
    """One command of the tree: its subcommands, arguments and options, as Tab needs them.

    The global options are hidden from a command's --help, but Tab offers them there too: they
    are accepted after the command as before it."""
    from jobagentctl.cli.options import GLOBAL_OPTIONS

    globals_ = {option.name for option, _ in GLOBAL_OPTIONS}
    node: dict[str, Any] = {"commands": [], "options": [], "arguments": []}
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            node["arguments"].append(_choices(param, ctx))
            continue
        if param.param_type_name != "option":
            continue
        choices = _choices(param, ctx)
        names = [*param.opts, *param.secondary_opts]
        if param.name == "help":
            names.sort(key=len)  # Click builds them from a set: any order, run to run
        node["options"].append(
            {
                "names": names,
                "value": not param.is_flag and not param.count,
                "multiple": bool(param.multiple),
                "hidden": bool(param.hidden) and param.name not in globals_,
                "help": param.help or "",
                "choices": choices,
            }
        )
    return node


def build_tree() -> dict[str, dict[str, Any]]:
    """Every command path ("" for the root, "jobs list", …) with what Tab completes there."""
    import typer.main

    from jobagentctl.cli.app import PROG_NAME, app

    tree: dict[str, dict[str, Any]] = {}

    def walk(command: Any, ctx: Any, path: str) -> None:
        node = _node(command, ctx)
        tree[path] = node
        for name in command.list_commands(ctx) if hasattr(command, "list_commands") else []:
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            node["commands"].append([name, sub.get_short_help_str()])
            sub_ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
            walk(sub, sub_ctx, f"{path} {name}".strip())

    root = typer.main.get_command(app)
    walk(root, root.make_context(PROG_NAME, [], resilient_parsing=True), "")
    return tree


def tree_json() -> str:
    """``completion_tree.json`` as it should be checked in."""
    return json.dumps(build_tree(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_tree() -> None:
    """Regenerate ``completion_tree.json`` (``make completions``)."""
    with open(TREE_FILE, "w", encoding="utf-8") as handle:
        handle.write(tree_json())


if __name__ == "__main__":
    write_tree()


def _shells(incomplete: str) -> list[str]:
    return [shell for shell in SHELLS if shell.startswith(incomplete)]


def completion(
    shell: Annotated[
        str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.", autocompletion=_shells)
    ],
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
    """Add the ``completion`` command to ``app``."""
    app.command("completion")(completion)
