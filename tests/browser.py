"""Headless Chromium for the tests that look at a page the way a person would (audit, serving and fleet
HTML, the hostile-payload check): how to start it on loopback only, and how to read back its PNG."""

from __future__ import annotations

import struct
import subprocess
import zlib
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
NO_CHROMIUM = "Debian's chromium is not installed (apt-get install -y chromium)"
# No network here: without these flags Chromium keeps trying to reach Google's hosts at every start.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run")


def run_chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Chromium with a fresh profile, in its own process group, bounded to two minutes."""
    return subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120, start_new_session=True,
    )


def png_scanlines(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the filtered scanlines of a PNG (enough to judge that it is not blank)."""
    width, height, _, raw = _png(path)
    return width, height, raw


def png_rows(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered RGB rows of an 8-bit PNG (alpha dropped), to count colours."""
    width, height, colour, raw = _png(path)
    bpp = 4 if colour == 6 else 3
    stride = width * bpp
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up = previous[x]
            corner = previous[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
        previous = line
    return width, height, rows


def _png(path: Path) -> tuple[int, int, int, bytes]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, colour = 8, b"", 0, 0, 2
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, colour, zlib.decompress(idat)
