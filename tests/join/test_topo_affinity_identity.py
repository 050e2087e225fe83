"""Two `nvidia-smi topo -m` files with the same GPU count are one machine only if every GPU hangs off the
same NUMA node in both, and no CPU is near one GPU in one file and near none of the same GPUs in the other:
that is wiring. The CPU lists themselves are not: nvidia-smi narrows them to the CPU set it runs in. Files of one machine that differ only in link cells
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
    # CPU 24 is GPU4's in the A100 box and GPU0's in the H100 box
    assert reason == (f"not with {A100} (nvidia-smi topo -m): different CPU wiring (CPU 24: GPU4 on CPUs 24-47 "
                      f"({A100}:7) vs GPU0 on CPUs 0-51 ({H100}:3)): a CPU set narrows a GPU's CPU list, it never "
                      "moves a CPU to another GPU"), reason
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


SLURM = NVIDIA / "topo-m-8x-a100-slurm-cpuset-excerpt.txt"  # inside `srun -c32`: CPUs 0-15,56-71 only


def _outside_the_job(line: str) -> str:
    """The same host's row as printed outside the job: each socket's CPUs listed (0-27,56-83 and 28-55,84-111)."""
    if line.startswith(("GPU0", "GPU1", "GPU2", "GPU3")):
        return line.replace("0-15,56-71", "0-27,56-83")
    return line.replace("NODE            1 ", "NODE    28-55,84-111    1").replace(
        "PHB             1 ", "PHB     28-55,84-111    1")


def test_one_box_read_inside_and_outside_a_slurm_job_is_one_machine(tmp_path: Path) -> None:
    # inside the job nvidia-smi listed only the job's CPUs, and none for GPU4-7: narrower lists, same wiring
    outside = tmp_path / "topo-outside-the-job.txt"
    outside.write_text("\n".join(_outside_the_job(line) for line in SLURM.read_text().splitlines()[1:]) + "\n")
    assert "28-55,84-111" in outside.read_text()
    machines, _ = load_machines([SLURM, outside])
    assert len(machines.machines) == 1, [record.machine_reason for record in machines.inputs]
    (machine,) = machines.machines
    assert sorted({gpu.numa_node for gpu in machine.gpus.values()}) == [0, 1]
