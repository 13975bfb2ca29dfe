"""A property of the redactor: whatever the secrets and however the output is cut into chunks
and spread over the two streams, nothing it releases contains a secret, and the text that is
not a secret comes out unchanged, as if the whole output had been redacted at once.

Secrets mix ASCII, multi-byte characters and shared prefixes (one secret the start of
another, a secret repeating its own start), where a streaming matcher goes wrong first.
"""

from __future__ import annotations

import base64
import itertools
import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobagentctl.supervisor.output import redact
from jobagentctl.supervisor.output.redact import (
    MIN_SECRET_CHARS,
    REDACTED,
    Redactor,
    api_key_secrets,
)

# Few letters, so secrets overlap each other and the text around them often.
ALPHABET = "ab€é😀 \n"
MARKER = REDACTED.decode()


def _usable(secret: str) -> bool:
    # A secret sharing characters with the marker could appear across a marker's edge.
    return "[" not in secret and "]" not in secret and secret not in MARKER


secret_texts = st.text(ALPHABET, min_size=MIN_SECRET_CHARS, max_size=12).filter(_usable)


@st.composite
def outputs(draw: st.DrawFn) -> tuple[list[str], bytes, list[tuple[str, bytes]]]:
    """Secrets, the whole output, and that output cut into chunks of random streams."""
    secrets = draw(st.lists(secret_texts, min_size=1, max_size=4))
    # Some secrets are prefixes of others, or of themselves repeated.
    if draw(st.booleans()):
        base = secrets[0]
        secrets.append(base + draw(st.text(ALPHABET, min_size=1, max_size=4)))
    pieces = draw(
        st.lists(
            st.one_of(st.sampled_from(secrets), st.text(ALPHABET, max_size=10)),
            max_size=12,
        )
    )
    data = "".join(pieces).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=10)))
    bounds = [0, *cuts, len(data)]
    chunks = [
        (draw(st.sampled_from(("stdout", "stderr"))), data[lo:hi])
        for lo, hi in itertools.pairwise(bounds)
    ]
    return secrets, data, chunks


def _one_shot(secrets: list[str], data: bytes) -> bytes:
    ordered = sorted({s.encode() for s in secrets}, key=len, reverse=True)
    return re.sub(b"|".join(re.escape(s) for s in ordered), REDACTED, data)


# Slow (as all of tests/property was): 200 examples, 9 s with the machine busy.
@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(outputs())
def test_no_secret_is_released_and_the_rest_is_kept(
    case: tuple[list[str], bytes, list[tuple[str, bytes]]],
) -> None:
    secrets, data, chunks = case
    redactor = Redactor(secrets)
    released: list[tuple[str, bytes]] = []
    for stream, chunk in chunks:
        released += redactor.feed(stream, chunk)
        assert redactor.held <= redactor.holdback
    released += redactor.flush()
    assert redactor.held == 0
    merged = b"".join(chunk for _, chunk in released)
    for secret in secrets:
        assert secret.encode() not in merged
    assert merged == _one_shot(secrets, data)
    # Every segment is tagged with a stream the output came from.
    assert {stream for stream, _ in released} <= {stream for stream, _ in chunks}


@settings(max_examples=50, deadline=None)
@given(outputs())
def test_a_fork_redacts_the_same_and_shares_what_is_added(
    case: tuple[list[str], bytes, list[tuple[str, bytes]]],
) -> None:
    secrets, data, chunks = case
    first = Redactor(secrets[:1])
    second = first.fork()
    for secret in secrets[1:]:
        first.add(secret)
    for redactor in (first, second):
        released = [seg for stream, chunk in chunks for seg in redactor.feed(stream, chunk)]
        released += redactor.flush()
        assert b"".join(chunk for _, chunk in released) == _one_shot(secrets, data)


@st.composite
def whole_character_chunks(draw: st.DrawFn) -> tuple[list[str], str, list[tuple[str, bytes]]]:
    """Secrets, a text of them and other characters, and the text cut between characters."""
    secrets = draw(st.lists(secret_texts, min_size=1, max_size=3))
    pieces = st.one_of(st.sampled_from(secrets), st.text(ALPHABET, max_size=8))
    text = "".join(draw(st.lists(pieces, max_size=10)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    bounds = [0, *cuts, len(text)]
    chunks = [
        (draw(st.sampled_from(("stdout", "stderr"))), text[lo:hi].encode())
        for lo, hi in itertools.pairwise(bounds)
    ]
    return secrets, text, chunks


@settings(max_examples=50, deadline=None)
@given(whole_character_chunks())
def test_chunks_of_whole_characters_come_out_as_whole_characters(
    case: tuple[list[str], str, list[tuple[str, bytes]]],
) -> None:
    # Output read in whole characters is released in whole characters (a shipped chunk
    # decodes on its own), with secrets cut across chunks and streams.
    secrets, text, chunks = case
    redactor = Redactor(secrets)
    released = [seg for stream, chunk in chunks for seg in redactor.feed(stream, chunk)]
    released += redactor.flush()
    for _, segment in released:
        segment.decode("utf-8")  # raises if a character was cut
    assert b"".join(chunk for _, chunk in released) == _one_shot(secrets, text.encode())


@st.composite
def many_secrets(draw: st.DrawFn) -> tuple[list[str], bytes, list[tuple[str, bytes]]]:
    """Many secrets (more than are searched for one by one), some long, most sharing their
    first bytes, and output of them cut into chunks shorter than the long ones."""
    short = st.text("ab€", min_size=MIN_SECRET_CHARS, max_size=9).filter(_usable)
    long = st.text("ab", min_size=20, max_size=80)
    secrets = draw(st.lists(st.one_of(short, long), min_size=9, max_size=40, unique=True))
    pieces = draw(
        st.lists(st.one_of(st.sampled_from(secrets), st.text("ab€c", max_size=10)), max_size=20)
    )
    data = "".join(pieces).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=30)))
    bounds = [0, *cuts, len(data)]
    chunks = [
        (draw(st.sampled_from(("stdout", "stderr"))), data[lo:hi])
        for lo, hi in itertools.pairwise(bounds)
    ]
    return secrets, data, chunks


# Slow: 150 examples of up to hundreds of secrets, 19 s with the machine busy.
@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True)
@given(many_secrets(), st.sampled_from([1, 4, 128]))
def test_many_secrets_added_one_by_one_redact_as_one_pattern_would(
    case: tuple[list[str], bytes, list[tuple[str, bytes]]], one_by_one: int
) -> None:
    # Added one at a time, as `redact add` does: the redactor's searches are rebuilt in tiers,
    # and a long secret cut across many chunks and both streams is still one marker. Tiers of
    # more keys than ``one_by_one`` are searched by a regular expression (past 128 keys in
    # use: lowered here so that these few secrets take that path too).
    secrets, data, chunks = case
    redactor = Redactor()
    with mock.patch.object(redact, "_FIND_ONE_BY_ONE", one_by_one):
        for secret in secrets:
            redactor.add(secret)
    assert redactor.count == len(secrets)
    released = [seg for stream, chunk in chunks for seg in redactor.feed(stream, chunk)]
    assert redactor.held <= redactor.holdback
    released += redactor.flush()
    assert b"".join(chunk for _, chunk in released) == _one_shot(secrets, data)
    assert redactor.redact(data) == _one_shot(secrets, data)


# Lowercase letters and digits: no character of the marker, nor of the URL's punctuation.
_WORD = "abcdefghijklmnopqrstuvwxyz0123456789"
_passwords = st.text(_WORD + "-_", min_size=MIN_SECRET_CHARS, max_size=16)


@st.composite
def composite_secrets(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """A composite secret, the part that authenticates, and output printing that part alone."""
    user = draw(st.text(_WORD, min_size=1, max_size=8))
    password = draw(_passwords)
    shape = draw(st.sampled_from(("url", "basic", "pair")))
    if shape == "url":
        secret = f"postgres://{user}:{password}@db.internal:5432/app"
    elif shape == "basic":
        secret = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    else:
        secret = f"{user}:{password}"
    around = st.text(_WORD + " \n=", max_size=12)
    pieces = draw(st.lists(st.one_of(st.just(password), around), min_size=1, max_size=8))
    return secret, password, [*pieces, password]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(composite_secrets(), st.data())
def test_the_password_of_a_composite_secret_printed_alone_is_redacted(
    case: tuple[str, str, list[str]], data: st.DataObject
) -> None:
    secret, password, pieces = case
    output = "".join(pieces).encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(output)), max_size=6)))
    redactor = Redactor([secret])
    released = [
        segment
        for lo, hi in itertools.pairwise([0, *cuts, len(output)])
        for segment in redactor.feed("stdout", output[lo:hi])
    ]
    released += redactor.flush()
    merged = b"".join(chunk for _, chunk in released)
    assert password.encode() not in merged
    assert REDACTED in merged


@given(st.text(_WORD, min_size=4, max_size=16), _passwords)
def test_the_api_key_s_secret_part_is_a_secret_of_its_own(prefix: str, part: str) -> None:
    key = f"jac_{prefix}.{part}"
    redactor = Redactor(api_key_secrets(key))
    assert redactor.redact(f"{key} {part}".encode()) == b"[REDACTED] [REDACTED]"
