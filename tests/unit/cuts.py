"""Cutting a wire into the pieces a transport might deliver (shared by the split tests)."""

from __future__ import annotations


def pieces(wire: bytes, sizes: list[int]) -> list[bytes]:
    """``wire`` cut into consecutive pieces of ``sizes`` bytes, what is left as the last
    piece; sizes past the end of ``wire`` are not used."""
    out: list[bytes] = []
    pos = 0
    for n in [*sizes, len(wire)]:
        out.append(wire[pos : pos + n])
        pos += n
        if pos >= len(wire):
            break
    return out
