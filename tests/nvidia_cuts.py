"""Real `nvidia-smi -q` outputs cut to their first GPU blocks, as `nvidia-smi -q -i 0` (or `-i 0,1`) prints them
under the unchanged `Attached GPUs : N` line: one helper for every test of a filtered inventory."""

from __future__ import annotations

from pathlib import Path

NVIDIA_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia"


def first_gpu_blocks(fixture: str, blocks: int, folder: Path, name: str = "smi-q-i0.txt") -> Path:
    """The fixture cut before its GPU block number `blocks + 1`, written to `folder/name`."""
    lines = (NVIDIA_FIXTURES / fixture).read_text().splitlines()
    cut = [i for i, line in enumerate(lines) if line.startswith("GPU 0000")][blocks]
    path = folder / name
    path.write_text("\n".join(lines[:cut]).rstrip() + "\n")
    return path
