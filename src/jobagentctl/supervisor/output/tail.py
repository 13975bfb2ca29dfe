"""The output tail: the last N bytes of a child's stdout and stderr, kept for the failure report.

Both streams feed one combined tail, in arrival order, as a terminal would show them.
"""

from __future__ import annotations

import codecs
from collections import deque

__all__ = ["OutputTail", "truncate_utf8"]


def truncate_utf8(text: str, limit: int) -> str:
    """The longest suffix of ``text`` whose UTF-8 encoding fits in ``limit`` bytes.

    Works on characters, so a multi-byte character is either kept whole or dropped whole.
    """
    if limit <= 0:
        return ""
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= limit:
        return text
    cut = len(data) - limit
    # Skip continuation bytes (0b10xxxxxx): the cut must land on the start of a character.
    while cut < len(data) and data[cut] & 0xC0 == 0x80:
        cut += 1
    return data[cut:].decode("utf-8", errors="surrogatepass")


class OutputTail:
    """A bounded, UTF-8-safe ring of recent output from several streams.

    Each stream has its own incremental decoder, so a character split across two reads (or
    interleaved with the other stream's output) is still decoded whole. Undecodable bytes become
    U+FFFD. The bound is on the UTF-8 size of what is kept.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self._pieces: deque[tuple[str, int]] = deque()
        self._size = 0
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}

    def feed(self, stream: str, data: bytes) -> None:
        """Add raw bytes read from ``stream`` (e.g. ``"stdout"``)."""
        if self.limit == 0:
            return
        decoder = self._decoders.get(stream)
        if decoder is None:
            decoder = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        self._add(decoder.decode(data))

    def close(self, stream: str) -> None:
        """End of ``stream``: flush a trailing partial character (as U+FFFD)."""
        decoder = self._decoders.pop(stream, None)
        if decoder is not None:
            self._add(decoder.decode(b"", final=True))

    def text(self) -> str:
        """The kept output, at most ``limit`` bytes once encoded."""
        return "".join(piece for piece, _ in self._pieces)

    def _add(self, piece: str) -> None:
        if not piece:
            return
        size = len(piece.encode("utf-8", errors="surrogatepass"))
        if size > self.limit:
            # The new output alone fills the tail: everything older goes.
            piece = truncate_utf8(piece, self.limit)
            size = len(piece.encode("utf-8", errors="surrogatepass"))
            self._pieces.clear()
            self._size = 0
        self._pieces.append((piece, size))
        self._size += size
        while self._size > self.limit:
            head, head_size = self._pieces.popleft()
            self._size -= head_size
            excess = self._size + head_size - self.limit
            if excess < head_size:
                # Keep the part of the oldest piece that still fits.
                kept = truncate_utf8(head, head_size - excess)
                kept_size = len(kept.encode("utf-8", errors="surrogatepass"))
                self._pieces.appendleft((kept, kept_size))
                self._size += kept_size
