"""The console-script entry point, kept free of imports so `jobagentctl --version` is instant.

`--version` on its own and Tab completion are handled here, before Typer, httpx and pydantic are
imported (they cost ~20× a bare interpreter start). Tab is answered from the static command tree in
:mod:`jobagentctl.cli.shell_complete`. Everything else goes to the Typer app in
:mod:`jobagentctl.cli.app`.
"""

from __future__ import annotations

import os
import sys

from jobagentctl import __version__


def main() -> None:
    """The console script: ``--version`` and Tab completion answered before Typer loads."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"jobagentctl {__version__}\n")
        return
    if os.environ.get("_JOBAGENTCTL_COMPLETE"):
        from jobagentctl.cli.shell_complete import answer

        sys.exit(answer(os.environ))
    skip_pydantic_plugins()
    from jobagentctl.cli.app import main as app_main

    app_main()


def skip_pydantic_plugins() -> None:
    """Tell pydantic there are no plugins before it builds the CLI's first model.

    Otherwise it reads every installed distribution's entry points for plugins (tens of ms in a
    full environment) on a command's path. The CLI's own models want none. Its public switch,
    ``PYDANTIC_DISABLE_PLUGINS``, would be inherited by the commands ``run`` starts.
    """
    from pydantic.plugin import _loader

    if _loader._plugins is None:  # not looked for yet: an empty set is what it would cache
        _loader._plugins = {}
