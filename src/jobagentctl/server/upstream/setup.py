"""``server init --upstream-workspace``: make this store the gateway of a ctrlplane workspace.

- Our workspace row takes ctrlplane's id (so agents keep their ``CTRLPLANE_WORKSPACE``), slug and
  name.
- ctrlplane's agents get rows here: keys bound to one of them need it.
- The store records which upstream it fronts.
- The first workspace key of ours is made and shown once.
"""

from __future__ import annotations

from uuid import UUID

from jobagentctl.errors import ConfigError, NotFound
from jobagentctl.server.admin import CreatedWorkspace, _new_key, opened_store
from jobagentctl.server.store import Store
from jobagentctl.server.upstream.client import UpstreamClient, UpstreamRefused
from jobagentctl.server.upstream.ledger import Ledger

__all__ = ["init_gateway", "mirror_agents"]


async def mirror_agents(store: Store, upstream: UpstreamClient, ws: UUID) -> int:
    """Our rows of ctrlplane's agents of the workspace (made or refreshed); how many."""
    agents = await upstream.list_agents(ws)
    ledger = Ledger(store)
    for agent in agents:
        await ledger.mirror_agent(ws, agent)
    return len(agents)


async def init_gateway(
    database_url: str, upstream_url: str, upstream_key: str, workspace: str
) -> CreatedWorkspace:
    """Resolve ``workspace`` (a slug or an id) in ctrlplane, then migrate and set up the store
    as its gateway (see the module docstring). Run again, it refreshes the agents and makes
    another key."""
    upstream = UpstreamClient(upstream_url, upstream_key)
    try:
        try:
            found = await upstream.workspace(workspace)
        except UpstreamRefused as exc:
            if exc.status == 404:
                raise NotFound(
                    f"ctrlplane has no workspace {workspace!r}", details={"workspace": workspace}
                ) from None
            if exc.status in (401, 403):
                raise ConfigError("ctrlplane refused the upstream API key") from None
            raise
        ws = UUID(str(found["id"]))
        async with opened_store(database_url, migrate=True) as store:
            ledger = Ledger(store)
            record = await store.entities.get_workspace(ws)
            if record is None:
                slug = str(found.get("slug") or f"workspace-{ws.hex[:8]}")
                await ledger.create_workspace(ws, str(found.get("name") or slug), slug)
                record = await store.entities.get_workspace(ws)
            if record is None:  # pragma: no cover - made above
                raise NotFound("workspace not found")
            await ledger.register(ws, upstream.base_url)
            await mirror_agents(store, upstream, ws)
            key = await _new_key(store, ws, None)
            return CreatedWorkspace(workspace_id=ws, slug=record.slug, api_key=key.api_key)
    finally:
        await upstream.aclose()
