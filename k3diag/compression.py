"""Which compressor wrote a file, from its first bytes: one table for the bundle reader (which unpacks
gzip, bzip2 and xz) and for the inputs (which say what to unpack a compressed file with). A leaf: it
imports nothing from k3diag, and no compressor (detection runs on every input at start-up)."""

from __future__ import annotations

# (magic, the name the bundle reader unpacks it by or None, what it is in words, the command that unpacks it)
FORMATS: tuple[tuple[bytes, str | None, str, str], ...] = (
    (b"\x1f\x8b", "gzip", "gzip-compressed", "gunzip -k"),
    (b"\xfd7zXZ\x00", "xz", "xz-compressed", "unxz -k"),
    (b"BZh", "bzip2", "bzip2-compressed", "bunzip2 -k"),
    (b"\x28\xb5\x2f\xfd", None, "zstd-compressed", "unzstd"),
    (b"PK\x03\x04", None, "a zip archive", "unzip"),
)
# `BZh` is also text ("BZhello"): a bzip2 stream has its level digit next, then the magic of its first
# block (pi's digits) or, empty, of its end (sqrt(pi)'s)
_BZIP2_NEXT = (b"1AY&SY", b"\x17rE8P\x90")
# bytes of a file's head these checks read
HEAD_BYTES = 10


def compressed(head: bytes) -> tuple[str | None, str, str] | None:
    """(the bundle reader's name for it or None, what it is, the command that unpacks it) for a file whose
    first bytes (`HEAD_BYTES` of them at least) are a compressor's; None for any other file."""
    for magic, name, words, command in FORMATS:
        if head.startswith(magic):
            if magic == b"BZh" and not (head[3:4].isdigit() and head[4:10] in _BZIP2_NEXT):
                continue
            return name, words, command
    return None
