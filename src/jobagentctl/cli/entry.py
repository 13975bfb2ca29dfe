"""The console-script entry point, kept free of imports so `jobagentctl --version` is instant.

Everything else goes to the Typer app in :mod:`jobagentctl.cli.app`; `--version` on its own is
answered here, before Typer and pydantic are imported (they cost ~10× a bare interpreter start).
"""

from __future__ import annotations

import sys

from jobagentctl import __version__


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"jobagentctl {__version__}\n")
        return
    from jobagentctl.cli.app import main as app_main

    app_main()
