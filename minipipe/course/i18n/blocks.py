"""The unit of translation: a markdown cell cut into blocks, and put back together.

A block is what lies between blank lines, except that a fenced code block (``` or ~~~) and a display
formula ($$ ... $$) stay whole, blank lines and all. A translator translates block by block; the
German or Dutch cell is its translated blocks joined by one blank line. A changed English paragraph
then marks only its own translation stale, not the whole cell's.
"""

from __future__ import annotations


def split_blocks(text: str) -> list[str]:
    blocks: list[str] = []
    current: list[str] = []
    fence: str | None = None  # the fence we are inside: ``` or ~~~ or $$
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None and not stripped:
            if current:
                blocks.append("\n".join(current).rstrip())
                current = []
            continue
        current.append(line)
        if fence is None:
            for marker in ("```", "~~~", "$$"):
                # a line that opens a fence and does not also close it ($$ x $$ on one line is whole)
                if stripped.startswith(marker) and not (
                    marker == "$$" and len(stripped) > 2 and stripped.endswith("$$")
                ):
                    fence = marker
                    break
        elif stripped.startswith(fence) or (fence == "$$" and stripped.endswith("$$")):
            fence = None
    if current:
        blocks.append("\n".join(current).rstrip())
    return [b for b in blocks if b.strip()]


def join_blocks(blocks: list[str]) -> str:
    return "\n\n".join(blocks)
