"""The global options, declared once and given to the root and to every command.

``jobagentctl --json list`` and ``jobagentctl list --json`` mean the same. Each command's signature
gets the global options through Typer's public API: a wrapper with a ``__signature__``. They are
hidden from its ``--help``; the root's help lists them. Click then parses them where they are. An
option the command defines itself stays the command's (``server create-key --workspace``). Nothing
after ``--`` or after ``run``'s command line is an option. Each occurrence is stored in the
invocation's :class:`~jobagentctl.cli.context.AppState`; a later one wins.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from jobagentctl.cli.context import OUTPUT_FORMATS, AppState, get_state

__all__ = ["GLOBAL_OPTIONS", "GlobalOption", "install", "with_global_options"]

_MARK = "__jobagentctl_global_options__"


@dataclass(frozen=True)
class GlobalOption:
    """One global option: its flags, its type, and where its value goes in the state."""

    name: str  # the keyword the wrapper receives (prefixed: never a command's own name)
    decls: tuple[str, ...]
    annotation: Any
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()  # what Tab offers for its value

    @property
    def is_flag(self) -> bool:
        """A boolean switch (``--json``) rather than an option that takes a value."""
        return self.annotation is bool

    def parameter(self, *, hidden: bool) -> inspect.Parameter:
        """The option as a keyword-only parameter of a command's signature, for Typer."""
        default: Any = False if self.is_flag else None
        choices = self.choices
        option = typer.Option(
            *self.decls,
            metavar=self.metavar,
            help=self.help,
            hidden=hidden,
            autocompletion=(
                (lambda incomplete: [c for c in choices if c.startswith(incomplete)])
                if choices
                else None
            ),
        )
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[self.annotation, option],
        )


def _flag(field_name: str) -> Callable[[AppState, Any], None]:
    def store(state: AppState, value: Any) -> None:
        state.flags = replace(state.flags, **{field_name: value})

    return store


def _attr(attr: str) -> Callable[[AppState, Any], None]:
    def store(state: AppState, value: Any) -> None:
        setattr(state, attr, value)

    return store


GLOBAL_OPTIONS: tuple[tuple[GlobalOption, Callable[[AppState, Any], None]], ...] = (
    (
        GlobalOption(
            "g_url", ("--url",), str | None, "Server base URL, with or without /api.", "URL"
        ),
        _flag("url"),
    ),
    (
        GlobalOption("g_workspace", ("--workspace",), str | None, "Workspace id or slug.", "ID"),
        _flag("workspace"),
    ),
    (
        GlobalOption(
            "g_agent", ("--agent",), str | None, "Job agent id, or its name if unique.", "ID"
        ),
        _flag("agent"),
    ),
    (
        GlobalOption(
            "g_profile", ("--profile",), str | None, "Profile of the config file to use.", "NAME"
        ),
        _flag("profile"),
    ),
    (
        GlobalOption(
            "g_api_key_file",
            ("--api-key-file",),
            Path | None,
            "Read the API key from this file (keys never come from flags).",
            "PATH",
        ),
        _flag("api_key_file"),
    ),
    (
        GlobalOption(
            "g_ca_bundle",
            ("--ca-bundle",),
            Path | None,
            "CA certificates (PEM file or directory) to trust for an https:// server.",
            "PATH",
        ),
        _flag("ca_bundle"),
    ),
    (
        GlobalOption(
            "g_output",
            ("-o", "--output"),
            str | None,
            "table, json, tsv or env (default: table on a TTY, tsv when piped).",
            "FORMAT",
            OUTPUT_FORMATS,
        ),
        _attr("output_flag"),
    ),
    (GlobalOption("g_json", ("--json",), bool, "Same as -o json."), _attr("json_flag")),
    (
        GlobalOption("g_quiet", ("-q", "--quiet"), bool, "No progress or confirmations."),
        _attr("quiet"),
    ),
    (
        GlobalOption("g_no_color", ("--no-color",), bool, "No colours (also: NO_COLOR=1)."),
        _attr("no_color"),
    ),
    (
        GlobalOption(
            "g_debug",
            ("--debug",),
            bool,
            "Tracebacks and an HTTP trace on stderr (API key redacted).",
        ),
        _attr("debug"),
    ),
)


def _own_flags(signature: inspect.Signature) -> set[str]:
    """The flags a command declares itself, in its ``Annotated[…, typer.Option(…)]`` types."""
    flags: set[str] = set()
    for param in signature.parameters.values():
        for declared in getattr(param.annotation, "__metadata__", ()):
            # In Annotated, an option's first flag is taken where its default would be.
            first = getattr(declared, "default", None)
            flags.update([first] if isinstance(first, str) else [])
            flags.update(getattr(declared, "param_decls", None) or ())
    return flags


def with_global_options(func: Callable[..., Any], *, root: bool = False) -> Callable[..., Any]:
    """``func`` with the global options added to its signature (those it lacks).

    In the root callback they are listed in ``--help``. In a command they are hidden, and the output
    format is decided once every option is parsed (a conflict is a usage error, exit 2).
    """
    if getattr(func, _MARK, False):
        return func
    signature = inspect.signature(func, eval_str=True)
    own = _own_flags(signature)
    extra = [(opt, store) for opt, store in GLOBAL_OPTIONS if not own & set(opt.decls)]
    params = list(signature.parameters.values())
    ctx_name = next((p.name for p in params if p.annotation is typer.Context), None)
    if ctx_name is None:
        params.insert(
            0,
            inspect.Parameter(
                "g_ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
            ),
        )
    params.extend(opt.parameter(hidden=not root) for opt, _ in extra)

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        ctx: typer.Context = kwargs[ctx_name] if ctx_name else kwargs.pop("g_ctx")
        state = get_state(ctx)
        for opt, store in extra:
            value = kwargs.pop(opt.name)
            if value is not None and value is not False:
                store(state, value)
        if not root:
            state.output  # noqa: B018 - decide the format now: a bad -o is a usage error
        return func(**kwargs)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty
    }
    setattr(wrapper, _MARK, True)
    return wrapper


def install(app: typer.Typer, *, root: bool = True) -> None:
    """Give every command of ``app`` (and of its groups) the global options; the root too."""
    if root and app.registered_callback is not None and app.registered_callback.callback:
        callback = app.registered_callback.callback
        app.registered_callback.callback = with_global_options(callback, root=True)
    for command in app.registered_commands:
        if command.callback is not None:
            command.callback = with_global_options(command.callback)
    for group in app.registered_groups:
        if isinstance(group.typer_instance, typer.Typer):
            install(group.typer_instance, root=False)
