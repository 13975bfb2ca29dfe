"""Redaction: secret values replaced by ``[REDACTED]`` in what `run` sends off the machine.

:class:`Redactor` matches on the bytes of the values' UTF-8 encoding, over the two output
streams taken as one text in arrival order; the helpers below find the values to redact.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "DEFAULT_PATTERNS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "Redactor",
    "name_matches",
    "redactable",
    "secrets_from_context",
    "secrets_from_environment",
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


class _Secrets:
    """The values to redact, shared by redactors (so one added reaches all of them)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: frozenset[bytes] = frozenset()
        self.pattern: re.Pattern[bytes] | None = None
        self.longest = 0

    def add(self, values: Iterable[bytes | str]) -> None:
        fresh = {data for value in values if (data := _as_bytes(value)) is not None}
        with self.lock:
            if fresh <= self.values:
                return
            values_now = self.values | fresh
            # Longest first: at a given position the longest secret wins, as it would with
            # the whole text at hand.
            ordered = sorted(values_now, key=lambda value: (-len(value), value))
            self.pattern = re.compile(b"|".join(re.escape(value) for value in ordered))
            self.values = values_now
            self.longest = len(ordered[0])

    def snapshot(self) -> tuple[re.Pattern[bytes] | None, frozenset[bytes], int]:
        with self.lock:
            return self.pattern, self.values, self.longest


class Redactor:
    """Replaces secret values with ``[REDACTED]`` in output fed in chunks, or in one piece.

    :meth:`feed` takes the chunks of both streams in the order they arrived and treats them as
    one text: a secret split across chunks, writes or the two streams is still replaced (by
    one marker, attributed to the stream its first byte came from). It holds back at most the
    longest secret's length minus one byte (what may be the start of a secret) and releases
    everything else, so what it returns, joined, is exactly what replacing every secret in the
    whole text at once would give. Values shorter than :data:`MIN_SECRET_CHARS` characters are
    ignored. Every method may be called from any thread: chunks fed from two threads (one per
    stream) are one text in the order the calls were made. What is held back waits for the next
    chunk or :meth:`flush`, however long that takes: releasing the start of a secret early would
    let the rest of it follow in the next chunk.
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
        return max(0, self._secrets.snapshot()[2] - 1)

    @property
    def held(self) -> int:
        """The bytes held back now, waiting for what follows."""
        with self._feeding:
            return sum(len(data) for _, data in self._held)

    @property
    def count(self) -> int:
        """How many values are redacted (not ``len``: an empty redactor is still one)."""
        return len(self._secrets.snapshot()[1])

    def redact(self, data: bytes) -> bytes:
        """``data`` with every secret replaced (one-shot: nothing held back)."""
        pattern, values, _ = self._secrets.snapshot()
        if pattern is None or not any(value in data for value in values):
            return data
        return pattern.sub(REDACTED, data)

    def redact_text(self, text: str) -> str:
        """:meth:`redact` for text (UTF-8, undecodable characters kept as they were)."""
        data = text.encode("utf-8", errors="surrogatepass")
        redacted = self.redact(data)
        return text if redacted == data else redacted.decode("utf-8", errors="surrogatepass")

    def feed(self, stream: str, data: bytes) -> list[tuple[str, bytes]]:
        """Take ``data`` read from ``stream``; the segments that may now be released, in order
        (adjacent ones of the same stream merged)."""
        with self._feeding:
            return self._feed(stream, data)

    def _feed(self, stream: str, data: bytes) -> list[tuple[str, bytes]]:
        pattern, values, longest = self._secrets.snapshot()
        if pattern is None and not self._held:
            return [(stream, bytes(data))] if data else []
        parts = [*self._held, (stream, bytes(data))] if data else self._held
        text = _Text(parts)
        if pattern is None:
            self._held = []
            return text.cut(0, len(text.data))
        holds = _possible_starts(text.data, values, longest)
        out: list[tuple[str, bytes]] = []
        pos = 0
        for match in _matches(pattern, values, text.data):
            hold = _first_at_or_after(holds, pos)
            if hold is not None and hold <= match.start():
                break  # a longer secret (or an earlier one) may still begin there
            out += text.cut(pos, match.start())
            out.append((text.stream_at(match.start()), REDACTED))
            pos = match.end()
        hold = _first_at_or_after(holds, pos)
        end = len(text.data) if hold is None else hold
        out += text.cut(pos, end)
        self._held = text.cut(end, len(text.data))
        return _merged(out)

    def flush(self) -> list[tuple[str, bytes]]:
        """At the end of the output: release everything held back (redacted)."""
        pattern, values, _ = self._secrets.snapshot()
        with self._feeding:
            text = _Text(self._held)
            self._held = []
        if pattern is None:
            return text.cut(0, len(text.data))
        out: list[tuple[str, bytes]] = []
        pos = 0
        for match in _matches(pattern, values, text.data):
            out += text.cut(pos, match.start())
            out.append((text.stream_at(match.start()), REDACTED))
            pos = match.end()
        out += text.cut(pos, len(text.data))
        return _merged(out)


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


def _matches(
    pattern: re.Pattern[bytes], values: frozenset[bytes], data: bytes
) -> Iterator[re.Match[bytes]]:
    """The secrets in ``data``, left to right, the longest where several begin."""
    # Looking for each value first is many times faster than the pattern on output that holds
    # none (nearly all of it): a substring search against the regex engine's alternation.
    if any(value in data for value in values):
        yield from pattern.finditer(data)


def _merged(segments: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for stream, data in segments:
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + data)
        elif data:
            out.append((stream, data))
    return out


def _possible_starts(data: bytes, values: frozenset[bytes], longest: int) -> list[int]:
    """Sorted offsets near the end of ``data`` where a secret may begin that continues past
    the end (what follows ``data`` decides): the rest of ``data`` is a proper prefix of it."""
    found: set[int] = set()
    size = len(data)
    window = max(0, size - (longest - 1))
    for value in values:
        lo = max(window, size - (len(value) - 1))
        first = value[:1]
        at = data.find(first, lo)
        while at != -1:
            if value.startswith(data[at:]):
                found.add(at)
            at = data.find(first, at + 1)
    return sorted(found)


def _first_at_or_after(offsets: list[int], pos: int) -> int | None:
    index = bisect.bisect_left(offsets, pos)
    return offsets[index] if index < len(offsets) else None


def name_matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the fnmatch ``patterns``, case-insensitively."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def secrets_from_environment(env: Mapping[str, str], patterns: Iterable[str]) -> Iterator[str]:
    """The values of the variables of ``env`` whose names match ``patterns``."""
    kept = tuple(patterns)
    for name, value in env.items():
        if value and name_matches(name, kept):
            yield value


def secrets_from_context(
    context: Mapping[str, Any] | None, patterns: Iterable[str]
) -> Iterator[str]:
    """The secret values of a job's dispatch context (ctrlplane's shapes, docs/run.md):

    - the variables ``release.encryptedVariables`` names, in ``release.variables`` and in
      ``variables`` (the same map, copied there by ctrlplane's dispatcher);
    - the ``value`` of any object flagged ``"sensitive": true`` or ``"isSensitive": true``
      (ctrlplane's resource and job variables, ``{key, value, sensitive}``);
    - variables (``variables``, ``release.variables``, ``resource.variables``) whose names
      match ``patterns``.

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
