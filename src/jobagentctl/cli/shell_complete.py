"""Tab completion answered from the static command tree, without Typer, httpx or pydantic.

The tree (``completion_tree.json``) is generated from the Typer app by ``make completions`` and
checked fresh by a test. The answers follow Click's completion rules (what Typer answered before),
in the protocol of the scripts under ``completions/``. Standard library only: one Tab costs little
more than an interpreter start.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "COMPLETE_VAR",
    "SCRIPTS",
    "SHELLS",
    "answer",
    "completion_script",
    "completions",
    "split_arg_string",
]

COMPLETE_VAR = "_JOBAGENTCTL_COMPLETE"
# Next to this module (os.path, not pathlib: every import counts on this path).
TREE_FILE = os.path.join(os.path.dirname(__file__), "completion_tree.json")

SHELLS = ("bash", "zsh", "fish")

# The protocol Typer's completion uses (and older checked-in scripts call): the program is run
# with _JOBAGENTCTL_COMPLETE=complete_SHELL and the words so far in COMP_WORDS/COMP_CWORD (bash)
# or _TYPER_COMPLETE_ARGS (zsh, fish); cli/shell_complete.py answers.
SCRIPTS = {
    "bash": """\
_jobagentctl_completion() {
    local IFS=$'
'
    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \\
                   COMP_CWORD=$COMP_CWORD \\
                   _JOBAGENTCTL_COMPLETE=complete_bash $1 ) )
    return 0
}

complete -o default -F _jobagentctl_completion jobagentctl
""",
    "zsh": """\
#compdef jobagentctl

_jobagentctl_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _JOBAGENTCTL_COMPLETE=complete_zsh \
jobagentctl)
}

compdef _jobagentctl_completion jobagentctl
""".replace("\\\n", ""),
    "fish": (
        'complete --command jobagentctl --no-files --arguments "(env '
        "_JOBAGENTCTL_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=get-args "
        '_TYPER_COMPLETE_ARGS=(commandline -cp) jobagentctl)" --condition "env '
        "_JOBAGENTCTL_COMPLETE=complete_fish _TYPER_COMPLETE_FISH_ACTION=is-args "
        '_TYPER_COMPLETE_ARGS=(commandline -cp) jobagentctl"\n'
    ),
}


def completion_script(shell: str) -> str:
    """The completion script for ``shell`` (no shell detection, no config read)."""
    return SCRIPTS[shell].rstrip("\n")


def load_tree() -> dict[str, dict[str, Any]]:
    """The command tree Tab completes from, as ``completion_cmd`` wrote it."""
    with open(TREE_FILE, encoding="utf-8") as handle:
        tree: dict[str, dict[str, Any]] = json.load(handle)
    return tree


def split_arg_string(string: str) -> list[str]:
    """Split like a POSIX shell; an unterminated quote keeps what was typed (as Click does)."""
    import shlex

    lex = shlex.shlex(string, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    out: list[str] = []
    try:
        for token in lex:
            out.append(token)
    except ValueError:
        out.append(lex.token)
    return out


def _option(node: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    found: Mapping[str, Any] | None = next(
        (option for option in node["options"] if name in option["names"]), None
    )
    return found


def _takes_value(node: Mapping[str, Any], token: str) -> bool:
    """Whether ``token`` is an option of ``node`` whose value is the next word."""
    if not token.startswith("-") or "=" in token:
        return False
    option = _option(node, token)
    return bool(option and option["value"])


def completions(tree: Mapping[str, Any], args: list[str], incomplete: str) -> list[tuple[str, str]]:
    """What to offer for ``incomplete`` after the complete words ``args`` (program excluded)."""
    path = ""
    node = tree[path]
    level: list[str] = []  # the words given to the current command
    positional = 0  # its arguments given so far
    i = 0
    while i < len(args):
        token = args[i]
        level.append(token)
        if token == "--":
            level.extend(args[i + 1 :])
            break
        if token.startswith("-"):
            if _takes_value(node, token) and i + 1 < len(args):
                level.append(args[i + 1])
                i += 1
            i += 1
            continue
        if node["commands"]:
            sub = f"{path} {token}".strip()
            if sub not in tree:
                break  # an unknown command: offer what is valid here, as Click does
            path, node, level, positional = sub, tree[sub], [], 0
        else:
            positional += 1
        i += 1

    words = list(args)
    if incomplete == "=":
        incomplete = ""
    elif "=" in incomplete and incomplete.startswith("-"):
        name, _, incomplete = incomplete.partition("=")
        words.append(name)
        level.append(name)

    if "--" not in words and incomplete.startswith("-"):
        return _commands(node, incomplete) + _options(node, level, incomplete)
    if words and _takes_value(node, words[-1]):
        option = _option(node, words[-1])
        choices = option["choices"] if option else []
        return [(c, "") for c in choices if c.startswith(incomplete)]
    arguments = node.get("arguments", [])
    if not node["commands"] and positional < len(arguments):
        return [(c, "") for c in arguments[positional] if c.startswith(incomplete)]
    return _commands(node, incomplete)


def _commands(node: Mapping[str, Any], incomplete: str) -> list[tuple[str, str]]:
    return [(name, short) for name, short in node["commands"] if name.startswith(incomplete)]


def _given(level: list[str]) -> set[str]:
    """Option names among the words: ``--limit=3`` gives ``--limit``, ``-n3`` gives ``-n``."""
    names = set()
    for word in level:
        if word.startswith("--"):
            names.add(word.partition("=")[0])
        elif word.startswith("-"):
            names.add(word[:2])
    return names


def _options(node: Mapping[str, Any], level: list[str], incomplete: str) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    given = _given(level)
    for option in node["options"]:
        if option["hidden"]:
            continue
        if not option["multiple"] and given & set(option["names"]):
            continue
        items.extend((n, option["help"]) for n in option["names"] if n.startswith(incomplete))
    return items


# --- the shells' side of the protocol ----------------------------------------------------------


def _zsh_escape(text: str) -> str:
    return (
        text.replace('"', '""')
        .replace("'", "''")
        .replace("$", "\\$")
        .replace("`", "\\`")
        .replace(":", r"\\:")
    )


def _args_and_incomplete(words: str) -> tuple[list[str], str]:
    cwords = split_arg_string(words)
    args = cwords[1:]
    if args and not words.endswith(" "):
        return args[:-1], args[-1]
    return args, ""


def answer(environ: Mapping[str, str]) -> int:
    """Print the answer to the shell's request in ``environ``; return the exit status."""
    instruction = environ.get(COMPLETE_VAR, "")
    action, _, shell = instruction.partition("_")
    if shell not in SHELLS or action not in ("complete", "source"):
        print(f"Shell {shell or instruction} not supported.", file=sys.stderr)
        return 1
    if action == "source":
        print(completion_script(shell))
        return 0
    tree = load_tree()
    if shell == "bash":
        cwords = split_arg_string(environ.get("COMP_WORDS", ""))
        cword = int(environ.get("COMP_CWORD", "0") or 0)
        args = cwords[1:cword]
        incomplete = cwords[cword] if cword < len(cwords) else ""
        items = completions(tree, args, incomplete)
        sys.stdout.write("\n".join(value for value, _ in items))
        return 0
    args, incomplete = _args_and_incomplete(environ.get("_TYPER_COMPLETE_ARGS", ""))
    items = completions(tree, args, incomplete)
    if shell == "zsh":
        if not items:
            sys.stdout.write("_files")
            return 0
        lines = [
            f'"{_zsh_escape(v)}":"{_zsh_escape(h)}"' if h else f'"{_zsh_escape(v)}"'
            for v, h in items
        ]
        joined = "\n".join(lines)
        sys.stdout.write(f"_arguments '*: :(({joined}))'")
        return 0
    # fish: "get-args" lists the candidates, "is-args" says whether there are any.
    lines = [f"{v}\t{' '.join(h.split())}" if h else v for v, h in items]
    if environ.get("_TYPER_COMPLETE_FISH_ACTION") == "is-args":
        return 0 if lines else 1
    sys.stdout.write("\n".join(lines))
    return 0
