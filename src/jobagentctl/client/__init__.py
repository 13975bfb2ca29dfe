"""The HTTP client for the pull-agent API (V1 and the V2 lease additions).

The only package that imports httpx; every transport error and HTTP status becomes a
:mod:`jobagentctl.errors` class inside it. Its modules:

- ``_client.py``: one method per endpoint;
- ``_ctrlplane.py``: what differs on a server with only the V1 API, and what this process learned
  about each server;
- ``_errors.py``: the translation of errors;
- ``_trace.py``: the ``--debug`` trace;
- ``_pages.py``: the reading of paginated lists, and of a log by its cursor.
"""

from __future__ import annotations

import sys
import types

# httpx imports its own command-line client (click, rich, pygments: ~100 ms) at import time
# whenever those happen to be installed. We never use it; an empty placeholder makes httpx
# take its documented fallback, so client commands start fast and Rich stays unloaded.
sys.modules.setdefault("httpx._main", types.ModuleType("httpx._main"))

from jobagentctl.client._client import Client  # noqa: E402
from jobagentctl.client._connection import USER_AGENT, ConnectionOptions  # noqa: E402
from jobagentctl.client._ctrlplane import MEMORY, V1Pacing  # noqa: E402
from jobagentctl.client._errors import translate  # noqa: E402
from jobagentctl.client._pages import (  # noqa: E402
    LOG_FOLLOW_WAIT,
    iter_cursor_pages,
    iter_log_pages,
    iter_pages,
)

__all__ = [
    "LOG_FOLLOW_WAIT",
    "MEMORY",
    "USER_AGENT",
    "Client",
    "ConnectionOptions",
    "V1Pacing",
    "iter_cursor_pages",
    "iter_log_pages",
    "iter_pages",
    "translate",
]
