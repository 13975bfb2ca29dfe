"""The fenced code blocks of README.md and docs/*.md, read from the docs at test time.

A test never keeps its own copy of a recipe: it asks for a block by its key and runs the text
the doc has now. A key is ``FILE › HEADING`` (the nearest heading above the block), with
`` [2]``, `` [3]``… for the second and later blocks under the same heading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")


@dataclass(frozen=True)
class Block:
    key: str
    lang: str
    text: str
    line: int  # 1-based line of the opening fence

    def lines(self) -> list[str]:
        return self.text.splitlines()


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(path: Path) -> list[Block]:
    """Every fenced block of one Markdown file, in order."""
    name = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    heading = "(top)"
    seen: dict[str, int] = {}
    fence: str | None = None
    lang = ""
    body: list[str] = []
    start = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if fence is None:
            opening = _FENCE.match(line)
            if opening:
                fence, lang, body, start = opening.group(1), opening.group(2), [], number
                continue
            title = _HEADING.match(line)
            if title:
                heading = title.group(1)
            continue
        if line.strip() == fence:
            base = f"{name} › {heading}"
            seen[base] = seen.get(base, 0) + 1
            key = base if seen[base] == 1 else f"{base} [{seen[base]}]"
            blocks.append(Block(key, lang, "\n".join(body) + "\n", start))
            fence = None
            continue
        body.append(line)
    if fence is not None:
        raise AssertionError(f"{name}:{start}: unclosed code fence")
    return blocks


@cache
def all_blocks() -> dict[str, Block]:
    return {block.key: block for path in doc_files() for block in parse(path)}


def block(key: str) -> Block:
    """The block with this key, as the doc has it now (a clear failure if it moved)."""
    blocks = all_blocks()
    if key not in blocks:
        known = "\n  ".join(blocks)
        raise AssertionError(f"no code block {key!r} in the docs any more; blocks:\n  {known}")
    return blocks[key]


def shell_lines(text: str) -> list[str]:
    """Non-empty, non-comment lines of a shell snippet (continuations joined)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def yaml_run_lines(text: str) -> list[str]:
    """The commands of a GitHub Actions workflow's ``run:`` steps (one-line ones)."""
    return [m.group(1).strip() for m in re.finditer(r"^\s*(?:- )?run:\s*(\S.*)$", text, re.M)]
