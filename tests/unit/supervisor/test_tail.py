"""The output tail keeps the last N bytes, never splits a character, and keeps arrival order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobagentctl.supervisor.output.tail import OutputTail, truncate_utf8


def test_truncate_keeps_the_end_and_whole_characters() -> None:
    text = "aé€😀"  # 1 + 2 + 3 + 4 bytes
    assert truncate_utf8(text, 100) == text
    assert truncate_utf8(text, 4) == "😀"
    assert truncate_utf8(text, 6) == "😀"  # "€" (3 bytes) does not fit in the 2 left
    assert truncate_utf8(text, 7) == "€😀"
    assert truncate_utf8(text, 3) == ""
    assert truncate_utf8(text, 0) == ""


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_truncate_is_a_fitting_suffix(text: str, limit: int) -> None:
    kept = truncate_utf8(text, limit)
    assert text.endswith(kept)
    assert len(kept.encode("utf-8", errors="surrogatepass")) <= limit


def test_tail_is_bounded_and_keeps_arrival_order_across_streams() -> None:
    tail = OutputTail(10)
    tail.feed("stdout", b"out1\n")
    tail.feed("stderr", b"err1\n")
    tail.feed("stdout", b"out2\n")
    assert tail.text() == "err1\nout2\n"
    assert len(tail.text().encode()) <= 10


def test_a_character_split_across_reads_is_decoded_whole() -> None:
    tail = OutputTail(100)
    data = "héllo €".encode()
    for i in range(len(data)):
        tail.feed("stdout", data[i : i + 1])
    tail.feed("stderr", b"!")  # the other stream in between does not disturb stdout's decoder
    tail.close("stdout")
    assert tail.text() == "héllo €!"


def test_undecodable_bytes_become_replacement_characters() -> None:
    tail = OutputTail(100)
    tail.feed("stdout", b"ok \xff\xfe end")
    tail.feed("stderr", b"cut \xe2\x82")  # a truncated "€" at EOF
    tail.close("stderr")
    assert tail.text() == "ok \ufffd\ufffd endcut \ufffd"


def test_zero_limit_keeps_nothing() -> None:
    tail = OutputTail(0)
    tail.feed("stdout", b"anything")
    assert tail.text() == ""


# UTF-8 cannot carry lone surrogates, so the property is over encodable text.
_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]))


@given(
    st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), _TEXT), max_size=20),
    st.integers(min_value=1, max_value=50),
)
def test_tail_is_a_suffix_of_everything_written(chunks: list[tuple[str, str]], limit: int) -> None:
    tail = OutputTail(limit)
    for stream, text in chunks:
        tail.feed(stream, text.encode())
    everything = "".join(text for _, text in chunks)
    kept = tail.text()
    assert len(kept.encode()) <= limit
    assert everything.endswith(kept)
    # And it keeps as much as fits: dropping it all is not an option.
    assert len(kept.encode()) > limit - 4 or kept == everything
