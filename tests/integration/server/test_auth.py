"""Keys and scopes: 401 for no/bad/revoked keys, 404 outside a key's scope, and no
secret stored in clear."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from jobagentctl.errors import AuthError
from jobagentctl.server.http.auth import Authenticator, generate_key, hash_secret, split_key
from tests.fixtures.server_app import Api, make_api, requests_naming

pytestmark = pytest.mark.anyio


async def test_no_key_bad_key_revoked_key_are_401(api: Api) -> None:
    agent = await api.agent()
    path = api.path(f"job-agents/{agent}/jobs")

    r = await api.client.get(path)
    assert r.status_code == 401
    assert r.json() == {"message": r.json()["message"], "code": "UNAUTHORIZED", "details": None}

    prefix = api.api_key.split(".", 1)[0]
    for bad in ("nonsense", f"{prefix}.wrong-secret", "jac_unknown.secret", ".", f"{prefix}."):
        r = await api.client.get(path, headers={"X-API-Key": bad})
        assert r.status_code == 401, bad
        assert r.json()["code"] == "UNAUTHORIZED"
        assert bad not in r.text or bad in ("nonsense", ".")  # the key is not echoed back

    key = generate_key()
    key_id = await api.store.entities.create_api_key(
        uuid.UUID(api.workspace_id), None, key.prefix, key.secret_hash
    )
    assert (await api.client.get(path, headers={"X-API-Key": key.value})).status_code == 200
    assert await api.store.entities.revoke_api_key(key_id)
    r = await api.client.get(path, headers={"X-API-Key": key.value})
    assert r.status_code == 401


async def test_401_comes_before_validation(api: Api) -> None:
    r = await api.client.get("/api/v1/workspaces/not-a-uuid/jobs")
    assert r.status_code == 401
    r = await api.client.post(
        api.path("job-agents/x/claim"), content=b"{bad json", headers={"X-API-Key": "x.y"}
    )
    assert r.status_code == 401


async def test_key_of_another_workspace_is_404(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    other_ws = await api.store.entities.create_workspace("other")
    other_key = await api.new_key(ws=str(other_ws))
    for method, rest, body in [
        ("GET", "jobs", None),
        ("GET", f"jobs/{job['id']}", None),
        ("GET", "job-agents", None),
        ("GET", f"job-agents/{agent}/jobs", None),
        ("POST", f"job-agents/{agent}/jobs/{job['id']}/claim", None),
        ("POST", f"job-agents/{agent}/claim", None),
        ("POST", f"jobs/{job['id']}/heartbeat", None),
        ("PUT", f"jobs/{job['id']}/status", {"status": "cancelled"}),
        ("GET", "job-claims", None),
        ("GET", f"jobs/{job['id']}/attempts", None),
        ("POST", f"job-agents/{agent}/jobs", {}),
        ("PUT", f"job-agents/{agent}", {"name": "x", "type": "y"}),
        ("DELETE", f"job-agents/{agent}", None),
    ]:
        r = await api.call(method, rest, body, key=other_key)
        assert r.status_code == 404, (method, rest, r.text)
        assert r.json()["code"] == "NOT_FOUND"
    assert (await api.job(job["id"]))["status"] == "queued"


async def test_agent_key_scope(api: Api) -> None:
    mine, other = await api.agent("mine"), await api.agent("other")
    my_job = await api.enqueue(mine)
    their_job = await api.enqueue(other)
    key = await api.new_key(mine)

    # Its own agent: list, claim, heartbeat, attempts, get, status.
    r = await api.call("GET", f"job-agents/{mine}/jobs", key=key)
    assert r.status_code == 200
    assert [j["id"] for j in r.json()["items"]] == [my_job["id"]]
    r = await api.claim(mine, my_job["id"], {"leaseSeconds": 30}, key=key)
    assert r.status_code == 200
    claim_id = r.json()["claimId"]
    assert (await api.heartbeat(my_job["id"], {"claimId": claim_id}, key=key)).status_code == 200
    assert (await api.call("GET", f"jobs/{my_job['id']}", key=key)).status_code == 200
    assert (await api.call("GET", f"jobs/{my_job['id']}/attempts", key=key)).status_code == 200
    assert (await api.call("GET", f"job-agents/{mine}", key=key)).status_code == 200
    r = await api.call("GET", "jobs", key=key)  # the workspace list, narrowed to its agent
    assert [j["id"] for j in r.json()["items"]] == [my_job["id"]]
    r = await api.call("GET", "job-claims", key=key)
    assert [c["jobId"] for c in r.json()["items"]] == [my_job["id"]]
    body = {"status": "successful", "claimId": claim_id}
    assert (await api.status(my_job["id"], body, key=key)).status_code == 202

    # Another agent's job or agent: 404, never 403.
    for method, rest, payload in [
        *requests_naming(other, their_job["id"]),
        ("POST", f"job-agents/{mine}/jobs/{their_job['id']}/claim", None),
        ("GET", "job-claims?jobAgentId=" + other, None),
    ]:
        r = await api.call(method, rest, payload, key=key)
        assert r.status_code == 404, (method, rest, r.text)
        # The log routes answer their own 404 code (a client tells it from "no such route").
        assert r.json()["code"] == ("LOG_NOT_FOUND" if rest.endswith("/logs") else "NOT_FOUND")
    # Operator-only calls: 404 too.
    for method, rest, payload in [
        ("GET", "job-agents", None),
        ("PUT", f"job-agents/{mine}", {"name": "x", "type": "y"}),
        ("DELETE", f"job-agents/{mine}", None),
        ("POST", f"job-agents/{mine}/jobs", {}),
    ]:
        r = await api.call(method, rest, payload, key=key)
        assert r.status_code == 404, (method, rest, r.text)
    assert (await api.job(their_job["id"]))["status"] == "queued"


async def test_the_database_holds_no_secret_in_clear(api: Api) -> None:
    agent = await api.agent()
    key = await api.new_key(agent)
    _, secret = split_key(key)
    # Use both keys so any cache or audit write has happened.
    assert (await api.call("GET", f"job-agents/{agent}/jobs", key=key)).status_code == 200
    assert (await api.call("GET", "jobs")).status_code == 200
    secrets = [secret, split_key(api.api_key)[1]]
    dump = await dump_database(api.database_url)
    assert dump  # the dump did read rows
    for value in secrets:
        assert value not in dump
    assert hash_secret(secret) in dump  # what is stored instead


async def dump_database(database_url: str) -> str:
    """Every row of every table, as text (and for SQLite every byte of the files)."""
    if database_url.startswith("sqlite:"):
        import glob
        import sqlite3

        from jobagentctl.server.store import sqlite_path

        path = sqlite_path(database_url)
        text = []
        with sqlite3.connect(path) as conn:
            query = "SELECT name FROM sqlite_master WHERE type = 'table'"
            tables = [r[0] for r in conn.execute(query)]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{table}"'):
                    text.append(repr(row))
        for name in glob.glob(path + "*"):  # the file, its WAL and shared memory
            with open(name, "rb") as handle:
                text.append(handle.read().decode("latin-1"))
        return "\n".join(text)
    from tests.fixtures import pgsync

    with pgsync.connect(database_url) as conn:
        rows = conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        text = []
        for (table,) in rows:
            text += [r[0] for r in conn.fetch(f'SELECT t::text FROM "{table}" t')]
        return "\n".join(text)


async def test_key_cache_still_refuses_a_wrong_secret(database_url: str) -> None:
    async for api in make_api(database_url, key_cache_seconds=60):
        auth: Authenticator = api.app.framework.state.auth
        principal = await auth.authenticate(api.api_key)
        assert str(principal.workspace_id) == api.workspace_id
        prefix = api.api_key.split(".", 1)[0]
        with pytest.raises(AuthError):
            await auth.authenticate(f"{prefix}.not-the-secret")
        # Cached: a revocation is seen once the entry is dropped (TTL or forget()).
        assert await api.store.entities.revoke_api_key(principal.key_id)
        assert await auth.authenticate(api.api_key) == principal
        auth.forget(principal.key_id)
        with pytest.raises(AuthError):
            await auth.authenticate(api.api_key)


async def test_concurrent_requests_share_one_key_lookup(database_url: str) -> None:
    """A key that left the cache is looked up once for all the requests waiting on it, not
    once each (a fleet sharing a key would queue thousands of lookups for the pool)."""
    async for api in make_api(database_url, key_cache_seconds=60):
        auth: Authenticator = api.app.framework.state.auth
        store = api.store
        calls = 0
        release = asyncio.Event()
        real = store.entities.get_api_key

        async def slow_lookup(prefix: str, real: Any = real, release: Any = release) -> Any:
            nonlocal calls
            calls += 1
            await release.wait()
            return await real(prefix)

        store.entities.get_api_key = slow_lookup  # type: ignore[method-assign]
        waiting = [asyncio.ensure_future(auth.authenticate(api.api_key)) for _ in range(50)]
        while calls == 0:
            await asyncio.sleep(0)
        for _ in range(10):  # every request had its turn to start a lookup of its own
            await asyncio.sleep(0)
        release.set()
        principals = await asyncio.gather(*waiting)
        assert calls == 1
        assert {str(p.workspace_id) for p in principals} == {api.workspace_id}
        store.entities.get_api_key = real  # type: ignore[method-assign]
        # The next miss looks the key up again (nothing is left in flight).
        auth.forget()
        await auth.authenticate(api.api_key)


def test_generated_keys_have_the_documented_shape() -> None:
    keys = {generate_key().value for _ in range(50)}
    assert len(keys) == 50
    for value in keys:
        prefix, secret = split_key(value)
        assert prefix.startswith("jac_")
        assert len(prefix) == 16
        assert len(secret) >= 32
        assert "." not in secret
    with pytest.raises(AuthError):
        split_key(None)
    with pytest.raises(AuthError):
        split_key("no-dot")
