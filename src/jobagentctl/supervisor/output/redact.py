"""Redaction: secret values replaced by ``[REDACTED]`` in what `run` sends off the machine.

:class:`Redactor` matches on the bytes of the values' UTF-8 encoding, over the two output streams
taken as one text in arrival order. The helpers below find the values to redact.
"""

from __future__ import annotations

import base64
import bisect
import fnmatch
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

__all__ = [
    "DEFAULT_PATTERNS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "Redactor",
    "api_key_secrets",
    "name_matches",
    "redactable",
    "secret_parts",
    "secrets_from_context",
    "secrets_from_environment",
    "url_credentials",
]

# What replaces a secret.
REDACTED = b"[REDACTED]"
# Shorter values are not redacted: they would turn ordinary words and numbers into noise.
MIN_SECRET_CHARS = 6
# Names of variables whose values are secrets (fnmatch, case-insensitive): buildkite-agent's
# defaults, plus API keys.
DEFAULT_PATTERNS = (
    "*_PASSWORD",
    "*_SECRET",
    "*_TOKEN",
    "*_ACCESS_KEY",
    "*_SECRET_KEY",
    "*_API_KEY",
)
# Values are indexed by their key: their first _KEY_BYTES bytes, or the whole value if shorter
# (at least MIN_SECRET_CHARS characters, so at least that many bytes). A longer key is found
# faster (bytes.find skips further) and names fewer values.
_KEY_BYTES = 32
# Up to this many keys are searched for one by one rather than by one regular expression.
_FIND_ONE_BY_ONE = 128


def _as_bytes(secret: bytes | str) -> bytes | None:
    """The secret's bytes, or None when it is too short to redact."""
    if isinstance(secret, str):
        chars, data = len(secret), secret.encode("utf-8", errors="surrogatepass")
    else:
        data = bytes(secret)
        try:
            chars = len(data.decode("utf-8"))
        except UnicodeDecodeError:
            chars = len(data)
    return data if chars >= MIN_SECRET_CHARS else None


def redactable(secret: bytes | str) -> bool:
    """Whether ``secret`` is long enough to be redacted (:data:`MIN_SECRET_CHARS`)."""
    return _as_bytes(secret) is not None


# ``scheme://user:password@`` anywhere in a value (a URL, a DSN, a command line). The scheme
# is bounded, and begins where a word does: tried at every offset of a long value, an unbounded
# one would scan to its end each time (64 KiB of letters took seconds).
_URL_CREDENTIALS = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://([^\s/?#@:]*):([^\s/?#@]*)@"
)
# An HTTP ``Authorization`` value: the scheme, then the credentials.
_AUTHORIZATION = re.compile(r"(?:Authorization:\s*)?(Basic|Bearer|Token)\s+(\S+)", re.IGNORECASE)
# ``user:password`` alone (a registry login, curl's ``-u``, a Basic credential decoded).
_USER_PASSWORD = re.compile(r"([^\s:/@]+):(\S+)")


def secret_parts(secret: bytes | str) -> Iterator[str]:
    """The parts of a composite secret that a command may print on their own, each a secret:

    - of a URL with credentials (``scheme://user:password@host``): ``user:password`` and the
      password, as written and percent-decoded;
    - of an ``Authorization`` value (``Basic``, ``Bearer``, ``Token``): the credentials, and
      for ``Basic`` the ``user:password`` they encode and its password;
    - of a ``user:password`` pair: the password.

    The API key's secret part is :func:`api_key_secrets`'s (only a key has that shape).
    """
    if isinstance(secret, bytes):
        try:
            secret = secret.decode("utf-8")
        except UnicodeDecodeError:
            return
    yield from url_credentials(secret)
    authorization = _AUTHORIZATION.fullmatch(secret.strip())
    if authorization:
        scheme, credentials = authorization.groups()
        yield credentials
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return
            yield decoded
            secret = decoded
    pair = _USER_PASSWORD.fullmatch(secret)
    if pair and not _URL_CREDENTIALS.search(secret):
        yield pair.group(2)


def url_credentials(text: str) -> Iterator[str]:
    """``user:password`` and the password (as written and percent-decoded) of every URL with
    credentials in ``text``: secrets, whatever the variable that holds them is called."""
    for match in _URL_CREDENTIALS.finditer(text):
        user, password = match.groups()
        if password:
            yield from (f"{user}:{password}", password, urllib.parse.unquote(password))


def api_key_secrets(key: str) -> list[str]:
    """The API key, and its secret part on its own. A key is ``<prefix>.<secret>``, and a script
    that splits it may print the part that authenticates without the prefix."""
    prefix, dot, rest = key.partition(".")
    return [key, rest] if prefix and dot and rest else [key]


class _Tier:
    """A search for some of the values' keys."""

    def __init__(self, keys: frozenset[bytes]) -> None:
        self.keys = keys
        # A few keys are found fastest one by one (bytes.find is a vectorised search); many,
        # by one regular expression (one pass, whatever their number).
        self.finders: tuple[Callable[[bytes, int], int], ...]
        if len(keys) <= _FIND_ONE_BY_ONE:
            self.finders = tuple(partial(_find, key) for key in sorted(keys))
        else:
            pattern = re.compile(b"|".join(re.escape(key) for key in sorted(keys)))
            self.finders = (partial(_search, pattern),)


def _find(key: bytes, data: bytes, pos: int) -> int:
    return data.find(key, pos)


def _search(pattern: re.Pattern[bytes], data: bytes, pos: int) -> int:
    match = pattern.search(data, pos)
    return -1 if match is None else match.start()


class _Secrets:
    """The values to redact, shared by redactors (so one added reaches all of them).

    Values are indexed by their key: their first :data:`_KEY_BYTES` bytes, or all of a shorter
    value. Candidates are found by searching for keys, then checked against the values of the keys
    that begin there. The search goes one key by one when few, by regular expressions over the keys
    only when many. The keys are compiled in tiers whose sizes are distinct powers of two, merged as
    a binary counter carries. An add compiles the new key and, amortised, O(log n) others: never one
    giant pattern of every value. Memory is the values plus a few bytes per key.

    Readers take no lock. Values are only ever added, and each structure is replaced or extended in
    one step. A value added while a reader scans is redacted from the next scan on.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: set[bytes] = set()
        # key → the values that begin with it, longest first (the longest wins at a position).
        self.by_key: dict[bytes, tuple[bytes, ...]] = {}
        # The lengths of the keys (a key that begins at an offset has one of them).
        self.key_sizes: tuple[int, ...] = ()
        # Every proper prefix of a key: what a tail too short to hold a key must be to be held.
        self.stubs: set[bytes] = set()
        self.tiers: tuple[_Tier, ...] = ()
        self.finders: tuple[Callable[[bytes, int], int], ...] = ()
        self.longest = 0

    def add(self, values: Iterable[bytes | str]) -> None:
        whole = list(values)
        parts = [part for value in whole for part in secret_parts(value)]
        fresh = {data for value in (*whole, *parts) if (data := _as_bytes(value)) is not None}
        with self.lock:
            for value in fresh - self.values:
                self._add(value)

    def _add(self, value: bytes) -> None:
        key = value[:_KEY_BYTES]
        known = self.by_key.get(key)
        self.by_key[key] = tuple(sorted((*(known or ()), value), key=lambda v: (-len(v), v)))
        self.values.add(value)
        self.longest = max(self.longest, len(value))
        if known is not None:
            return
        self.stubs.update(key[:size] for size in range(1, len(key)))
        if len(key) not in self.key_sizes:
            self.key_sizes = (*self.key_sizes, len(key))
        tiers = list(self.tiers)
        keys = frozenset([key])
        while tiers and len(tiers[-1].keys) <= len(keys):
            keys |= tiers.pop().keys
        tiers.append(_Tier(keys))
        self.tiers = tuple(tiers)
        self.finders = tuple(finder for tier in tiers for finder in tier.finders)

    def scan(self, data: bytes, *, final: bool) -> tuple[list[tuple[int, int]], int]:
        """The secrets in ``data`` as ``(start, end)``, left to right, the longest where several
        begin. And the offset from which ``data`` must be held back, where a secret may begin that
        continues past the end (``len(data)`` if none). ``final``: nothing follows."""
        finders, by_key, stubs, key_sizes = self.finders, self.by_key, self.stubs, self.key_sizes
        size = len(data)
        view = memoryview(data)
        found: list[tuple[int, int]] = []
        # Offsets near the end where a key may begin that the end cuts short: held unless final.
        cut_keys = (
            []
            if final
            else [
                start
                for start in range(max(0, size - _KEY_BYTES + 1), size)
                if data[start:] in stubs
            ]
        )
        # What each finder found at or after ``pos`` (-1: nothing left), searched again only
        # once ``pos`` has passed it.
        nexts = [-2] * len(finders)
        pos = 0
        while True:
            start = next((at for at in cut_keys if at >= pos), -1)
            for index, finder in enumerate(finders):
                at = nexts[index]
                if at == -2 or 0 <= at < pos:
                    at = nexts[index] = finder(data, pos)
                if at >= 0 and (start < 0 or at < start):
                    start = at
            if start < 0:
                break
            rest = size - start
            values = sorted(
                (
                    value
                    for key_size in key_sizes
                    if key_size <= rest
                    for value in by_key.get(data[start : start + key_size], ())
                ),
                key=len,
                reverse=True,
            )
            if not final and (
                (rest < _KEY_BYTES and data[start:] in stubs)
                or any(len(value) > rest and value.startswith(view[start:]) for value in values)
            ):
                return found, start  # a longer secret may begin here: what follows decides
            value = next((value for value in values if data.startswith(value, start)), None)
            if value is None:
                pos = start + 1
            else:
                found.append((start, start + len(value)))
                pos = start + len(value)
        return found, size


class Redactor:
    """Replaces secret values with ``[REDACTED]`` in output fed in chunks, or in one piece.

    The :meth:`feed` method takes the chunks of both streams in the order they arrived and treats
    them as one text. A secret split across chunks, writes or the two streams is still replaced. One
    marker replaces it, attributed to the stream its first byte came from. It holds back at most the
    longest secret's length minus one byte (what may be the start of a secret), and releases
    everything else. So what it returns, joined, is exactly what replacing every secret in the whole
    text at once would give. Values shorter than :data:`MIN_SECRET_CHARS` characters are ignored.
    Every method may be called from any thread. Chunks fed from two threads (one per stream) are one
    text, in the order the calls were made. What is held back waits for the next chunk or
    :meth:`flush`, however long that takes. Releasing the start of a secret early would let the rest
    of it follow in the next chunk.
    """

    def __init__(self, secrets: Iterable[bytes | str] = ()) -> None:
        self._secrets = _Secrets()
        self._secrets.add(secrets)
        self._held: list[tuple[str, bytes]] = []
        self._feeding = threading.Lock()

    def fork(self) -> Redactor:
        """Another redactor over the same secrets (one added to either reaches both), with
        output of its own held back: one per consumer of the output."""
        other = Redactor()
        other._secrets = self._secrets
        return other

    def add(self, secret: bytes | str) -> None:
        """Redact ``secret`` from now on (ignored when shorter than the minimum)."""
        self._secrets.add([secret])

    @property
    def holdback(self) -> int:
        """The most bytes :meth:`feed` may hold back now: the longest secret's length - 1."""
        return max(0, self._secrets.longest - 1)

    @property
    def held(self) -> int:
        """The bytes held back now, waiting for what follows."""
        with self._feeding:
            return sum(len(data) for _, data in self._held)

    @property
    def count(self) -> int:
        """How many values are redacted (not ``len``: an empty redactor is still one)."""
        return len(self._secrets.values)

    def redact(self, data: bytes) -> bytes:
        """``data`` with every secret replaced (one-shot: nothing held back)."""
        found, _ = self._secrets.scan(data, final=True)
        if not found:
            return data
        out: list[bytes] = []
        pos = 0
        for start, end in found:
            out += (data[pos:start], REDACTED)
            pos = end
        out.append(data[pos:])
        return b"".join(out)

    def redact_text(self, text: str) -> str:
        """:meth:`redact` for text (UTF-8, undecodable characters kept as they were)."""
        data = text.encode("utf-8", errors="surrogatepass")
        redacted = self.redact(data)
        return text if redacted == data else redacted.decode("utf-8", errors="surrogatepass")

    def feed(self, stream: str, data: bytes) -> list[tuple[str, bytes]]:
        """Take ``data`` read from ``stream``; the segments that may now be released, in order
        (adjacent ones of the same stream merged)."""
        with self._feeding:
            if not self._secrets.finders and not self._held:
                return [(stream, bytes(data))] if data else []
            parts = [*self._held, (stream, bytes(data))] if data else self._held
            out, self._held = _redacted(_Text(parts), self._secrets, final=False)
            return out

    def flush(self) -> list[tuple[str, bytes]]:
        """At the end of the output: release everything held back (redacted)."""
        with self._feeding:
            text = _Text(self._held)
            self._held = []
        return _redacted(text, self._secrets, final=True)[0]


def _redacted(
    text: _Text, secrets: _Secrets, *, final: bool
) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """``text`` redacted: the segments to release, and those held back (none when ``final``)."""
    found, hold = secrets.scan(text.data, final=final)
    if not found and hold == len(text.data) and len(text.streams) == 1:
        return [(text.streams[0], text.data)], []  # nearly all output: nothing to cut
    out: list[tuple[str, bytes]] = []
    pos = 0
    for start, end in found:
        out += text.cut(pos, start)
        out.append((text.stream_at(start), REDACTED))
        pos = end
    out += text.cut(pos, hold)
    return _merged(out), text.cut(hold, len(text.data))


class _Text:
    """Chunks of several streams joined into one text, with the stream of every byte."""

    def __init__(self, parts: list[tuple[str, bytes]]) -> None:
        self.data = b"".join(data for _, data in parts)
        self.streams = [stream for stream, _ in parts]
        self.starts: list[int] = []
        offset = 0
        for _, data in parts:
            self.starts.append(offset)
            offset += len(data)

    def stream_at(self, offset: int) -> str:
        return self.streams[bisect.bisect_right(self.starts, offset) - 1]

    def cut(self, start: int, end: int) -> list[tuple[str, bytes]]:
        """``data[start:end]`` as segments of their streams."""
        if start >= end:
            return []
        out: list[tuple[str, bytes]] = []
        index = bisect.bisect_right(self.starts, start) - 1
        while index < len(self.starts) and self.starts[index] < end:
            part_end = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.data)
            lo, hi = max(start, self.starts[index]), min(end, part_end)
            if lo < hi:
                out.append((self.streams[index], self.data[lo:hi]))
            index += 1
        return _merged(out)


def _merged(segments: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for stream, data in segments:
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + data)
        elif data:
            out.append((stream, data))
    return out


def name_matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the fnmatch ``patterns``, case-insensitively."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def secrets_from_environment(env: Mapping[str, str], patterns: Iterable[str]) -> Iterator[str]:
    """The values of the variables of ``env`` whose names match ``patterns``, and the
    credentials of URLs in any variable (``DATABASE_URL=postgres://app:pw@db/app``)."""
    kept = tuple(patterns)
    for name, value in env.items():
        if value and name_matches(name, kept):
            yield value
        elif "://" in value:
            yield from url_credentials(value)


def secrets_from_context(
    context: Mapping[str, Any] | None, patterns: Iterable[str]
) -> Iterator[str]:
    """The secret values of a job's dispatch context (ctrlplane's shapes, docs/run.md):

    - the variables ``release.encryptedVariables`` names, in ``release.variables`` and in
      ``variables`` (the same map, copied there by ctrlplane's dispatcher);
    - the ``value`` of any object flagged ``"sensitive": true`` or ``"isSensitive": true``
      (ctrlplane's resource and job variables, ``{key, value, sensitive}``);
    - variables (``variables``, ``release.variables``, ``resource.variables``) whose names
      match ``patterns``;
    - the credentials of a URL in any string of the context (:func:`url_credentials`).

    A value that is not a string gives the text of each of its scalars.
    """
    if not isinstance(context, Mapping):
        return
    kept = tuple(patterns)
    release = _mapping(context.get("release"))
    encrypted = {name for name in release.get("encryptedVariables") or () if isinstance(name, str)}
    maps = (
        _mapping(context.get("variables")),
        _mapping(release.get("variables")),
        _mapping(_mapping(context.get("resource")).get("variables")),
    )
    for variables in maps:
        for name, value in variables.items():
            if name in encrypted or name_matches(str(name), kept):
                yield from _scalars(value)
    yield from _flagged(context)
    for text in _scalars(context):
        if "://" in text:
            yield from url_credentials(text)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _flagged(node: object) -> Iterator[str]:
    """The values of the objects under ``node`` flagged sensitive."""
    if isinstance(node, Mapping):
        if (node.get("sensitive") is True or node.get("isSensitive") is True) and "value" in node:
            yield from _scalars(node["value"])
        for child in node.values():
            yield from _flagged(child)
    elif isinstance(node, list):
        for child in node:
            yield from _flagged(child)


def _scalars(value: object) -> Iterator[str]:
    """The text of every scalar in ``value`` (booleans and nulls are no secrets)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, Mapping):
        for child in value.values():
            yield from _scalars(child)
    elif isinstance(value, list):
        for child in value:
            yield from _scalars(child)
