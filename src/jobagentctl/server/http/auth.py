"""API keys: generation, hashing, and verifying the ``X-API-Key`` header into a ``Principal``.

A key is ``<prefix>.<secret>``; the database keeps the prefix (to find the row) and the SHA-256
of the secret. The secret has 256 bits of entropy, so a fast hash is right (no password KDF).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import secrets
import string
import time
from dataclasses import dataclass
from uuid import UUID

from jobagentctl.errors import AuthError, ServerUnavailable
from jobagentctl.server.store import ApiKeyRecord, Store

__all__ = [
    "KEY_PREFIX",
    "Authenticator",
    "GeneratedKey",
    "Principal",
    "generate_key",
    "hash_secret",
    "split_key",
]

KEY_PREFIX = "jac_"
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
_PREFIX_RANDOM_CHARS = 12
_SECRET_BYTES = 32  # token_urlsafe(32) → 43 characters from [A-Za-z0-9_-]
_MAX_KEY_LENGTH = 256


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a workspace key (``agent_id`` None) or an agent key."""

    key_id: UUID
    workspace_id: UUID
    agent_id: UUID | None
    prefix: str = ""  # the key's prefix, to look it up again (empty: built in a test)


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    """A new key: its prefix (stored, to find the row) and its secret (never stored)."""

    prefix: str
    secret: str

    @property
    def value(self) -> str:
        """The full key as the client sends it; shown once, never stored."""
        return f"{self.prefix}.{self.secret}"

    @property
    def secret_hash(self) -> str:
        """What the database keeps of the secret."""
        return hash_secret(self.secret)


def generate_key() -> GeneratedKey:
    """A fresh key: ``jac_`` + 12 random lowercase/digit characters, ``.``, a 43-char secret."""
    prefix = KEY_PREFIX + "".join(
        secrets.choice(_PREFIX_ALPHABET) for _ in range(_PREFIX_RANDOM_CHARS)
    )
    return GeneratedKey(prefix=prefix, secret=secrets.token_urlsafe(_SECRET_BYTES))


def hash_secret(secret: str) -> str:
    """The SHA-256 hex digest of a key's secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


# Compared against when a prefix is unknown, so that refusal costs what a wrong secret costs.
_DUMMY_HASH = hash_secret(secrets.token_urlsafe(_SECRET_BYTES))


def split_key(raw: str | None) -> tuple[str, str]:
    """``(prefix, secret)`` of a header value, or ``AuthError`` when it cannot be a key."""
    if not raw:
        raise AuthError("missing API key: send the X-API-Key header")
    raw = raw.strip()
    prefix, sep, secret = raw.partition(".")
    if not sep or not prefix or not secret or len(raw) > _MAX_KEY_LENGTH:
        raise AuthError("invalid API key")
    return prefix, secret


class Authenticator:
    """Verifies keys against the store, with a small TTL cache of verified keys.

    The cache maps prefix → (secret hash, principal, expiry). Revocation is seen at the latest
    ``ttl`` seconds later (``key_cache_seconds``); ``ttl`` 0 disables the cache.

    Every refusal costs the same. An unknown prefix is compared against a dummy hash. A wrong secret
    for a cached prefix is looked up like an unknown one. So neither the answer time nor the cache
    tells an attacker whether a prefix exists. A lookup the database does not
    answer within ``lookup_timeout`` seconds is a 503 (``ServerUnavailable``). Concurrent
    requests with the same prefix share one lookup.
    """

    def __init__(
        self,
        store: Store,
        ttl: float = 2.0,
        max_entries: int = 10_000,
        lookup_timeout: float | None = None,
    ) -> None:
        self._store = store
        self._ttl = ttl
        self._max_entries = max_entries
        self._lookup_timeout = lookup_timeout
        self._cache: dict[str, tuple[str, Principal, float]] = {}
        self._inflight: dict[str, asyncio.Future[ApiKeyRecord | None]] = {}

    async def authenticate(self, raw: str | None) -> Principal:
        """The principal of the ``X-API-Key`` header value ``raw``; ``AuthError`` (401) when it
        is missing, malformed, unknown, wrong or revoked."""
        prefix, secret = split_key(raw)
        digest = hash_secret(secret)
        now = time.monotonic()
        cached = self._cache.get(prefix)
        if cached is not None and cached[2] > now and hmac.compare_digest(cached[0], digest):
            return cached[1]
        record = await self._lookup(prefix)
        expected = record.secret_hash if record is not None else _DUMMY_HASH
        matches = hmac.compare_digest(expected, digest)
        if record is None or record.revoked_at is not None:
            self._cache.pop(prefix, None)
            raise AuthError("invalid API key")
        if not matches:
            raise AuthError("invalid API key")
        principal = Principal(
            key_id=record.id,
            workspace_id=record.workspace_id,
            agent_id=record.job_agent_id,
            prefix=prefix,
        )
        if self._ttl > 0:
            if len(self._cache) >= self._max_entries:
                # Crude but bounded: an attacker cannot grow the cache, and a reset only costs
                # one database lookup per live key.
                self._cache.clear()
            self._cache[prefix] = (record.secret_hash, principal, now + self._ttl)
        return principal

    async def reverify(self, principal: Principal) -> None:
        """``AuthError`` when the key of ``principal`` has been revoked since it was verified
        (seen at most ``ttl`` seconds late, as every revocation). Long-polls call this before
        handing out a job: one may have waited longer than a revocation takes to be seen."""
        cached = self._cache.get(principal.prefix)
        if cached is not None and cached[2] > time.monotonic() and cached[1] == principal:
            return
        record = await self._lookup(principal.prefix)
        if record is None or record.revoked_at is not None or record.id != principal.key_id:
            self._cache.pop(principal.prefix, None)
            raise AuthError("invalid API key")

    async def _lookup(self, prefix: str) -> ApiKeyRecord | None:
        # One lookup in flight per prefix, shared by every request that needs it: when a key
        # used by thousands of agents leaves the cache, one query refreshes it, instead of one
        # per request queueing for the pool (past the lookup timeout, all of them 503). The
        # shared lookup carries the timeout itself, so a hung one ends for all its waiters and
        # the next request starts afresh.
        task = self._inflight.get(prefix)
        if task is None:
            task = asyncio.ensure_future(self._bounded_lookup(prefix))
            self._inflight[prefix] = task
            task.add_done_callback(functools.partial(self._landed, prefix))
        try:
            return await asyncio.shield(task)
        except TimeoutError:
            raise ServerUnavailable(
                f"the database did not answer the key lookup within {self._lookup_timeout:g} s"
            ) from None

    async def _bounded_lookup(self, prefix: str) -> ApiKeyRecord | None:
        if self._lookup_timeout is None:
            return await self._store.entities.get_api_key(prefix)
        return await asyncio.wait_for(
            self._store.entities.get_api_key(prefix), self._lookup_timeout
        )

    def _landed(self, prefix: str, task: asyncio.Future[ApiKeyRecord | None]) -> None:
        if self._inflight.get(prefix) is task:
            del self._inflight[prefix]
        if not task.cancelled():
            task.exception()  # retrieved here: every waiter may have given up on it

    def forget(self, key_id: UUID | None = None) -> None:
        """Drop cached keys (all, or the one with ``key_id``): used after a local revocation."""
        if key_id is None:
            self._cache.clear()
            return
        for prefix, (_, principal, _) in list(self._cache.items()):
            if principal.key_id == key_id:
                del self._cache[prefix]
