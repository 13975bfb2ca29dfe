"""`python -m jobagentctl`: the same entry point as the console script."""

from jobagentctl.cli.entry import main

main()
