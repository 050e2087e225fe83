"""Two `nvidia-smi topo -m` files with the same GPU count are one machine only if every GPU hangs off the
same CPUs and NUMA node in both: affinity is wiring. Files of one machine that differ only in link cells
(a paste cut, another driver) stay one machine with the 'Sources disagree' warning."""

from __future__ import annotations

from pathlib import Path

from k3diag.analyze.engine import run_rules
from k3diag.inputs import load_machines

NVIDIA = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"
A100 = NVIDIA / "topo-m-a100-nv12-narrow.txt"  # 8x A100, GPU0-3 on CPUs 0-23
H100 = NVIDIA / "topo-m-h100-nv18-narrow.txt"  # 8x H100, GPU0-3 on CPUs 0-51


def test_two_eight_gpu_boxes_wired_to_other_cpus_are_two_machines() -> None:
    machines, _ = load_machines([A100, H100])
    assert [len(m.gpus) for m in machines.machines] == [8, 8]
    reason = machines.inputs[1].machine_reason or ""
    assert reason == (f"not with {A100} (nvidia-smi topo -m): different CPU affinity (GPU0 on CPUs 0-23 ({A100}:3) "
                      f"vs GPU0 on CPUs 0-51 ({H100}:3)): a GPU's affinity is its wiring, fixed for a machine"), reason
    for machine in machines.machines:
        assert not [f for f in run_rules(machine) if f.id == "link-readings-disagree"]


def test_numa_nodes_alone_tell_two_machines_apart(tmp_path: Path) -> None:
    moved = tmp_path / "topo-other-box.txt"
    lines = A100.read_text().splitlines()
    # the same CPUs but GPU7 on NUMA node 0 (another board's lane map): still another machine
    moved.write_text("\n".join(line[:-1] + "0" if line.startswith("GPU7 ") else line for line in lines) + "\n")
    machines, _ = load_machines([A100, moved])
    assert len(machines.machines) == 2
    assert "different NUMA affinity (GPU7 on NUMA node 1 (" in (machines.inputs[1].machine_reason or "")


def test_the_same_box_read_twice_with_a_differing_link_cell_stays_one_machine_and_warns(tmp_path: Path) -> None:
    again = tmp_path / "topo-again.txt"
    lines = A100.read_text().splitlines()
    again.write_text("\n".join(line.replace("NV12", "NV6", 1) if line.startswith("GPU0 ") else line
                               for line in lines) + "\n")
    machines, _ = load_machines([A100, again])
    assert len(machines.machines) == 1
    assert [f.id for f in run_rules(machines.machines[0]) if f.id == "link-readings-disagree"]
