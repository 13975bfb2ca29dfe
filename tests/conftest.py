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
