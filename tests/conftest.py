"""Root conftest: the shared fixture plugins.

- ``tests.fixtures.databases``: ``database_url`` over SQLite and PostgreSQL (each test gets its
  own database; PostgreSQL ones are cloned from a migrated template and dropped afterwards).
- ``tests.fixtures.live_server``: a real ``jobagentctl server start`` process on a free port.
- ``tests.fixtures.server_app``: ``api``, the server app in-process on such a database (server
  tests of tests/integration/server).
- ``tests.fixtures.ctrlplane``: ``ctrlplane``, a running stand-in of ctrlplane's API server.
- ``tests.fixtures.isolation``: ``isolated_env``, no developer settings (autouse in tests/unit).
- ``tests.fixtures.clirun``: ``cli``, the app run in-process with CliRunner.
"""

pytest_plugins = [
    "tests.fixtures.databases",
    "tests.fixtures.live_server",
    "tests.fixtures.server_app",
    "tests.fixtures.ctrlplane",
    "tests.fixtures.isolation",
    "tests.fixtures.clirun",
]


import signal  # noqa: E402

import pytest  # noqa: E402

# The processes the suite starts get SIGINT as a person's terminal delivers it. A suite started
# in the background by a non-interactive shell (`make test &`, `nohup … &`) inherits SIGINT
# ignored, every child with it, and bash keeps a signal that was ignored when it started: the
# README agent's `trap 'exit 130' INT` never runs and the SIGINT test hangs (it did, in two CI
# runs started that way). A Python handler here is reset to the default in every exec'd child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _client_process_memory() -> None:
    """Each test starts as a new process would: the client forgets what it learned about
    servers (V1-only, workspace slugs, one-time warnings), which in-process CLI runs share."""
    from jobagentctl.client import MEMORY

    MEMORY.forget()


# The kinds in the order their tests are handed to the workers: the longest first, so that a
# minute-long soak or recipe does not start last and run alone while the other workers idle.
# The unit tests, many and short, fill the gaps at the end. It takes `make test`'s
# `--maxschedchunk 1` (one test at a time to whichever worker is free): xdist's default hands
# each worker a contiguous block first, which put every soak test on one worker (tests/README.md).
_KIND_ORDER = {"soak": 0, "system": 1, "integration": 2, "unit": 3}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def kind(item: pytest.Item) -> int:
        parts = item.nodeid.split("/")
        return _KIND_ORDER.get(parts[1], 2) if len(parts) > 1 and parts[0] == "tests" else 2

    items.sort(key=kind)  # stable: within a kind, the collection order
