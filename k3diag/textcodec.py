"""Which codec a saved output was written in. Imports nothing from k3diag.

It sits outside the layers because the evidence layer (reading bytes) and the parse layer
(reading text) both need it, and `k3diag.evidence` sits below the parsers.
"""

from __future__ import annotations

# Byte order marks, longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def detect_encoding(head: bytes) -> str:
    """The codec a saved output was written in, from its first bytes.

    Windows PowerShell 5.1 writes `>` redirections and `Out-File` as UTF-16 LE with a byte order
    mark, and Notepad adds a UTF-8 one; the unmarked UTF-16 that some editors save is recognized by
    its pattern of NUL bytes (every other byte is NUL in ASCII text). Anything else is read as UTF-8.
    """
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec
    sample = head[:4096]
    pairs = len(sample) // 2
    if pairs < 2:
        return "utf-8"
    even_nuls = sum(1 for byte in sample[0 : 2 * pairs : 2] if byte == 0)
    odd_nuls = sum(1 for byte in sample[1 : 2 * pairs : 2] if byte == 0)
    if odd_nuls > pairs * 0.6 and even_nuls < pairs * 0.05:
        return "utf-16-le"
    if even_nuls > pairs * 0.6 and odd_nuls < pairs * 0.05:
        return "utf-16-be"
    return "utf-8"


def decode_text(data: bytes, encoding: str | None = None) -> str:
    """Bytes to text in `encoding` (detected when not given); undecodable bytes are replaced."""
    return data.decode(encoding or detect_encoding(data), errors="replace")
