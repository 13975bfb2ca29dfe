"""Administration without HTTP: migrate, create workspaces and keys, revoke keys.

The ``jobagentctl server …`` commands call these against the database directly (the server need
not run). Each function opens the store, does one thing, and closes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from uuid import UUID

from jobagentctl.errors import NotFound
from jobagentctl.server.http.auth import generate_key
from jobagentctl.server.settings import check_database_url
from jobagentctl.server.store import Store
from jobagentctl.server.store.schema_window import SchemaWindow

__all__ = [
    "CreatedKey",
    "CreatedWorkspace",
    "create_key",
    "create_workspace",
    "init",
    "migrate",
    "opened_store",
    "revoke_key",
]

DEFAULT_WORKSPACE = "default"


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A key just made: the full key is in this object only, once."""

    id: UUID
    api_key: str  # the full key: shown once, never stored
    workspace_id: UUID
    job_agent_id: UUID | None


@dataclass(frozen=True, slots=True)
class CreatedWorkspace:
    """A workspace just made, with its first (workspace-scoped) key."""

    workspace_id: UUID
    slug: str  # the one given, or the store's (derived from the name; made unique)
    api_key: str  # its first workspace key: shown once, never stored


@asynccontextmanager
async def opened_store(database_url: str, *, migrate: bool = False) -> AsyncIterator[Store]:
    """The store at ``database_url``, open (and migrated, if asked) for the ``with`` block."""
    from jobagentctl.server.store import open_store

    store = open_store(check_database_url(database_url))
    await store.open()
    try:
        if migrate:
            await store.migrate()
        yield store
    finally:
        await store.close()


async def _new_key(store: Store, workspace_id: UUID, agent_id: UUID | None) -> CreatedKey:
    key = generate_key()
    key_id = await store.entities.create_api_key(
        workspace_id, agent_id, key.prefix, key.secret_hash
    )
    return CreatedKey(
        id=key_id, api_key=key.value, workspace_id=workspace_id, job_agent_id=agent_id
    )


async def migrate(database_url: str) -> tuple[list[int], SchemaWindow]:
    """Apply the pending migrations; the versions applied and the schema window after them
    (``SchemaTooNew`` when the database is past this release's window)."""
    async with opened_store(database_url) as store:
        applied = await store.migrate()
        return applied, await store.schema_window()


async def init(
    database_url: str, workspace_name: str = DEFAULT_WORKSPACE, *, slug: str | None = None
) -> CreatedWorkspace:
    """Migrate, then create a workspace and its first (workspace-scoped) key."""
    _check_slug(slug)
    async with opened_store(database_url, migrate=True) as store:
        return await _new_workspace(store, workspace_name, slug)


async def create_workspace(
    database_url: str, name: str, *, slug: str | None = None
) -> CreatedWorkspace:
    """A workspace (``slug`` None: derived from ``name`` by the store) and its first key.

    A malformed slug is a ``ValidationError`` before the database is opened; a taken one a
    ``Conflict``, with nothing created.
    """
    _check_slug(slug)
    async with opened_store(database_url) as store:
        return await _new_workspace(store, name, slug)


def _check_slug(slug: str | None) -> None:
    # The store checks again; checking first means a bad --slug touches no database.
    if slug is not None:
        from jobagentctl.server.store.validation import check_slug

        check_slug(slug)


async def _new_workspace(store: Store, name: str, slug: str | None) -> CreatedWorkspace:
    workspace_id = await store.entities.create_workspace(name, slug)
    record = await store.entities.get_workspace(workspace_id)
    if record is None:  # pragma: no cover - created above, workspaces are never deleted
        raise NotFound("workspace not found", details={"workspaceId": str(workspace_id)})
    key = await _new_key(store, workspace_id, None)
    return CreatedWorkspace(workspace_id=workspace_id, slug=record.slug, api_key=key.api_key)


async def create_key(database_url: str, workspace: UUID | str, agent_id: UUID | None) -> CreatedKey:
    """A workspace key, or an agent key when ``agent_id`` is given (the agent must exist).
    ``workspace`` is the workspace's id or its slug."""
    async with opened_store(database_url) as store:
        if isinstance(workspace, str):
            record = await store.entities.get_workspace_by_slug(workspace)
            if record is None:
                raise NotFound(
                    f"no workspace with slug {workspace!r} in this database: check the slug, "
                    "or --database",
                    details={"slug": workspace},
                )
            workspace_id = record.id
        elif not await store.entities.workspace_exists(workspace):
            raise NotFound("workspace not found", details={"workspaceId": str(workspace)})
        else:
            workspace_id = workspace
        if agent_id is not None and await store.entities.get_agent(workspace_id, agent_id) is None:
            raise NotFound(
                "job agent not found in that workspace", details={"jobAgentId": str(agent_id)}
            )
        return await _new_key(store, workspace_id, agent_id)


async def revoke_key(database_url: str, key_id: UUID) -> bool:
    """Revoke the key ``key_id`` (``NotFound`` when there is none): servers refuse it once
    their key cache lets it go, ``key_cache_seconds`` at the latest. False when it was
    already revoked (nothing to do: revoking is idempotent)."""
    async with opened_store(database_url) as store:
        if await store.entities.revoke_api_key(key_id):
            return True
        if await store.entities.api_key_revoked(key_id):
            return False
        raise NotFound(
            "API key not found in this database: check the key's id (from create-key) or "
            "--database",
            details={"id": str(key_id)},
        )
