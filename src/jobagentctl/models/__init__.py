"""Wire models shared by client and server, with ctrlplane's camelCase field names.

Python attributes are snake_case; ``model_dump(by_alias=True)`` / ``model_validate`` speak the
wire names. Response models accept every shape ctrlplane's own handlers produce (``toJobResponse``
in ctrlplane's ``apps/api/src/routes/v1/workspaces/jobs.ts`` at commit 66e0888). Unknown fields are
kept (``releaseId``, ``updatedAt``, whatever a newer server adds). Optional fields may be absent.
``jobAgentId`` is ``""`` for a job without agent. Fields the server did not send stay
unset, so ``model_dump(exclude_unset=True)`` gives back what the server sent and invents no
``null``. Also the other names both sides share: the enums, and the environment a job runs in.
"""

from __future__ import annotations

# Each module's names, written once in its ``__all__``; this package re-exports them all.
from jobagentctl.models import environment, logs, requests, wire
from jobagentctl.models.environment import *  # noqa: F403
from jobagentctl.models.logs import *  # noqa: F403
from jobagentctl.models.requests import *  # noqa: F403
from jobagentctl.models.wire import *  # noqa: F403

__all__ = [*environment.__all__, *logs.__all__, *requests.__all__, *wire.__all__]
