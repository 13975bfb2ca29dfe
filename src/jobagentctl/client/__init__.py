"""The HTTP client for the pull-agent API (V1 and the V2 lease additions).

The only package that imports httpx; every transport error and HTTP status becomes a
:mod:`jobagentctl.errors` class inside it.
"""

from __future__ import annotations

from jobagentctl.client._client import USER_AGENT, Client, iter_pages
from jobagentctl.client._errors import translate

__all__ = ["USER_AGENT", "Client", "iter_pages", "translate"]
