"""`leading_header`'s short cut for the two bus id spellings lspci prints gives what its pattern gives."""

from __future__ import annotations

import itertools

from k3diag.parse import lspci_header


def by_pattern(line: str) -> tuple[str, dict] | None | bool:
    """`leading_header` without its short cut: `_HEADER_RE` alone."""
    match = lspci_header._HEADER_RE.match(line)
    if match is None:
        return False
    fields = lspci_header._candidate(False, (match.group("rest") or "").strip())
    if fields is None:
        return None
    return lspci_header.fast_bdf(match.group("bdf")), fields


def test_the_short_cut_agrees_with_the_pattern() -> None:
    bus_ids = ["0000:1b:00.0", "1b:00.0", "0000:1B:00.0", "1B:00.0", "00000:1b:00.0", "0000:1b:00.8", "1b:00.7",
               "abcd:ef:1f.7", "ab:cd:00.0", "1b:00.0x", "0000:1b:00", ""]
    rests = ["", " ", "  ", "\t", " 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)",
             "  PCI bridge: Intel Corporation Device 1bbc (rev 11) (prog-if 00 [Normal decode])",
             "\tEthernet controller: Mellanox Technologies MT28908 Family [ConnectX-6] ", " x: y",
             " 0604: 1022:57a3 (prog-if 00 [Normal decode])", "\n", " a\nb", "x PCI bridge: y", ": PCI bridge: y",
             " PCI bridge: y \n", " Bridge: z\r", " Unknown thing without a colon"]
    checked = 0
    for bus_id, rest, before in itertools.product(bus_ids, rests, ("", " ", "Card: ")):
        line = before + bus_id + rest
        assert lspci_header.leading_header(line) == by_pattern(line), line
        checked += 1
    assert checked == len(bus_ids) * len(rests) * 3
