"""Completion: the checked-in scripts and command tree are fresh, and the static answers are
the ones Typer's own completion gives for the same words."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobagentctl.cli import shell_complete
from jobagentctl.cli.app import app
from jobagentctl.cli.completion_cmd import tree_json
from jobagentctl.cli.options import GLOBAL_OPTIONS

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_checked_in_script_is_fresh(shell: str) -> None:
    result = CliRunner().invoke(app, ["completion", shell])
    assert result.exit_code == 0
    checked_in = (ROOT / "completions" / f"jobagentctl.{shell}").read_text()
    assert result.stdout == checked_in, "run `make completions`"
    assert "_JOBAGENTCTL_COMPLETE" in checked_in


def test_checked_in_tree_is_fresh() -> None:
    """The tree Tab answers from is the app's command tree today."""
    with open(shell_complete.TREE_FILE, encoding="utf-8") as handle:
        assert handle.read() == tree_json(), "run `make completions`"


# (complete words, incomplete word): what a user has typed when pressing Tab.
CASES = [
    ([], ""),
    ([], "c"),
    ([], "-"),
    ([], "--"),
    ([], "--js"),
    (["--json"], ""),
    (["--url", "http://x"], "he"),
    (["--url"], ""),
    (["jobs"], ""),
    (["jobs"], "g"),
    (["jobs", "list"], "--"),
    (["jobs", "list", "--status"], ""),
    (["jobs", "list", "--status", "failure"], "--"),
    (["jobs", "list", "--all-pages"], "--"),
    (["list"], "-"),
    (["list"], "--status="),
    (["list", "--limit=3"], "--l"),
    (["heartbeat"], "--"),
    (["heartbeat", "--claim-id"], ""),
    (["server"], ""),
    (["server", "init"], "--"),
    (["server", "init", "--write-config"], "--"),
    (["server", "create-key", "--workspace", "W"], "--"),
    (["run", "--"], "--"),
    (["run", "--wait", "1m"], "--t"),
    (["agents", "register"], ""),
    (["nosuch"], ""),
    (["nosuch"], "li"),
    (["completion"], ""),
    (["inspect-claims"], "--s"),
]


@pytest.fixture
def typer_completion() -> None:
    # Typer's completion classes, as the app used them before Tab was answered statically.
    from typer._completion_classes import completion_init

    completion_init()


@pytest.mark.parametrize(
    ("words", "incomplete"), CASES, ids=[" ".join(c[0]) + "|" + c[1] for c in CASES]
)
def test_static_answers_match_typer(
    words: list[str], incomplete: str, typer_completion: None
) -> None:
    line = " ".join(["jobagentctl", *words, incomplete])
    env = {
        "_JOBAGENTCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) + 1),
    }
    result = CliRunner().invoke(app, [], env=env, prog_name="jobagentctl")
    assert result.exit_code == 0, result.output
    static = shell_complete.completions(shell_complete.load_tree(), words, incomplete)
    expected = result.stdout.split()
    if expected == [incomplete] and incomplete and not incomplete.startswith("-"):
        expected = []  # Typer echoes a path's prefix back; the shell completes files itself
    # Typer hides the global options after a command; Tab offers them there (below).
    offered = [value for value, _ in static if value in expected or value not in GLOBAL_NAMES]
    # Order aside: Click lists -h/--help in a different order from run to run.
    assert sorted(offered) == sorted(expected)


GLOBAL_NAMES = {name for option, _ in GLOBAL_OPTIONS for name in option.decls}


@pytest.mark.parametrize(
    ("words", "incomplete", "expected"),
    [
        (["inspect-claims", "--state"], "", ["active", "expired", "unleased", "revoked", "all"]),
        (["inspect-claims", "--state"], "e", ["expired"]),
        (["list", "--status"], "f", ["failure"]),
        (["jobs", "list", "--status"], "a", ["actionRequired", "all"]),
        (["complete", "--status"], "s", ["skipped", "successful"]),
        (["-o"], "", ["table", "json", "tsv", "env"]),
        (["list", "--output"], "t", ["table", "tsv"]),
        (["completion"], "", ["bash", "zsh", "fish"]),
        (["completion"], "z", ["zsh"]),
        (["completion", "bash"], "", []),
    ],
)
def test_values_complete_to_their_choices(
    words: list[str], incomplete: str, expected: list[str]
) -> None:
    static = shell_complete.completions(shell_complete.load_tree(), words, incomplete)
    assert [value for value, _ in static] == expected


@pytest.mark.parametrize("command", [["run"], ["list"], ["jobs", "get"]])
def test_global_options_complete_after_the_command(command: list[str]) -> None:
    offered = {v for v, _ in shell_complete.completions(shell_complete.load_tree(), command, "--")}
    assert {"--url", "--workspace", "--agent", "--json", "--output", "--debug"} <= offered
    if command == ["run"]:
        assert {"--lease-seconds", "--timeout"} <= offered  # and its own
    # Not once they are given, nor after `--`, where the command's own words begin.
    again = shell_complete.completions(shell_complete.load_tree(), [*command, "--json"], "--")
    assert "--json" not in {v for v, _ in again}
    after = shell_complete.completions(shell_complete.load_tree(), [*command, "--"], "--")
    assert after == []


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"_JOBAGENTCTL_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "jobagentctl jobs g"},
            '_arguments \'*: :(("get":"Show one job, with its config, dispatch..."))\'',
        ),
        (
            {
                "_JOBAGENTCTL_COMPLETE": "complete_zsh",
                "_TYPER_COMPLETE_ARGS": "jobagentctl jobs get ",
            },
            "_files",
        ),
        (
            {
                "_JOBAGENTCTL_COMPLETE": "complete_fish",
                "_TYPER_COMPLETE_FISH_ACTION": "get-args",
                "_TYPER_COMPLETE_ARGS": "jobagentctl jobs g",
            },
            "get\tShow one job, with its config, dispatch...",
        ),
    ],
)
def test_zsh_and_fish_answers(
    env: dict[str, str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell_complete.answer(env) == 0
    assert capsys.readouterr().out == expected


def test_fish_is_args_says_whether_there_are_candidates() -> None:
    base = {"_JOBAGENTCTL_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "is-args"}
    assert shell_complete.answer({**base, "_TYPER_COMPLETE_ARGS": "jobagentctl jo"}) == 0
    assert shell_complete.answer({**base, "_TYPER_COMPLETE_ARGS": "jobagentctl jobs get "}) == 1


def test_unknown_shell_instruction(capsys: pytest.CaptureFixture[str]) -> None:
    assert shell_complete.answer({"_JOBAGENTCTL_COMPLETE": "complete_powershell"}) == 1
    assert "not supported" in capsys.readouterr().err


def test_unknown_shell_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["completion", "powershell"])
    assert result.exit_code == 2
    assert "unsupported shell" in result.stderr
