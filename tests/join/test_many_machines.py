"""One file of many machines' outputs (`pdsh -a nvidia-smi topo -m > fleet.txt`), or of one machine read many
times: each machine found as before, and a new machine's reason a sentence, not every other machine listed.

Grouping scored every input against every machine before it: 2,000 hosts' `topo -m` in one file took 293 s
and 988 MB, 10,000 sections naming no host over 300 s (`benchmarks/bench_cli.py --only sections` measures it);
the machine index must not change where any input goes.
"""

from __future__ import annotations

from pathlib import Path

from k3diag.inputs import load_machines

TOPO = (Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "good-8x-h100-nvlink" / "evidence"
        / "nvidia-smi-topo-m.txt").read_text()


def _paste(path: Path, hosts: list[str | None]) -> Path:
    """One `topo -m` section per entry, after a prompt naming that host (None: no prompt, no host)."""
    path.write_text("".join((f"root@{host}:~# nvidia-smi topo -m\n" if host else "") + TOPO for host in hosts))
    return path


def test_a_new_machines_reason_names_three_others_and_counts_the_rest(tmp_path: Path) -> None:
    # the sixth host's reason listed the five before it, each by name and host ("not with ...; not with ..."):
    # 2,000 hosts made a report of 2 million refusals
    machines, _ = load_machines([_paste(tmp_path / "fleet.txt", [f"gpu{index:03d}" for index in range(6)])])
    assert [m.identity.hostnames[0].value for m in machines.machines] == [f"gpu{index:03d}" for index in range(6)]
    reasons = [record.machine_reason for record in machines.inputs]
    assert reasons[0] == "the first input that names its machine (host gpu000, 8 GPUs, NVIDIA)"
    assert reasons[3].count("not with ") == 3 and "nor with" not in reasons[3]
    assert reasons[5].count("not with ") == 3
    assert reasons[5].startswith(f"not with {tmp_path / 'fleet.txt'} (nvidia-smi topo -m): different host names "
                                 "(gpu000 vs gpu005)")
    assert reasons[5].endswith("; nor with the 2 other machines, which contradict it too")
    assert reasons[4].endswith("; nor with the 1 other machine, which contradicts it too")


def test_a_host_seen_again_later_joins_its_machine_whatever_came_between(tmp_path: Path) -> None:
    hosts = [f"node{index}" for index in range(8)]
    machines, _ = load_machines([_paste(tmp_path / "twice.txt", hosts + list(reversed(hosts)))])
    assert len(machines.machines) == 8
    assert [len(m.inputs) for m in machines.machines] == [2] * 8
    by_host = {m.identity.hostnames[0].value: m for m in machines.machines}
    assert sorted(by_host) == sorted(hosts)
    second = machines.inputs[8]  # node7's second section: the same machine as its first, for the host
    assert second.machine_reason.startswith("same machine as ") and "the same host name node7" in second.machine_reason


def test_sections_naming_no_host_join_the_first_host_named_and_another_host_stands_apart(tmp_path: Path) -> None:
    # one machine's topo -m read many times, then one naming a host: a host name contradicts no section that
    # names none, so they are one machine, as before the index; a second host is a second machine
    machines, _ = load_machines([_paste(tmp_path / "one.txt", [None] * 40 + ["gpu9", "gpu8"])])
    assert [len(m.inputs) for m in machines.machines] == [41, 1]
    assert [m.identity.hostnames[0].value for m in machines.machines] == ["gpu9", "gpu8"]
    joined, apart = machines.inputs[40].machine_reason, machines.inputs[41].machine_reason
    assert joined.startswith("same machine as ") and " and 37 more: " in joined  # three names shown, the rest counted
    assert apart.startswith("not with ") and " and 38 more: different host names (gpu9 vs gpu8)" in apart


def test_distinct_gpu_uuids_are_distinct_machines_and_a_repeated_one_joins_its_own(tmp_path: Path) -> None:
    # the machine index covers GPU UUIDs too: sections with no host name, told apart by their GPUs alone
    import re

    text = (Path(__file__).resolve().parents[2] / "fixtures" / "nvidia" / "smi-q-2x3090-560.txt").read_text()

    def with_uuids(number: int) -> str:
        return re.sub(r"GPU-[0-9a-f]{8}", f"GPU-{number:08x}", text)

    paste = tmp_path / "gpus.txt"
    paste.write_text("\n".join(with_uuids(number) for number in (1, 2, 3, 4, 5, 3)))
    machines, _ = load_machines([paste])
    assert [len(m.inputs) for m in machines.machines] == [1, 1, 2, 1, 1]
    reasons = [record.machine_reason for record in machines.inputs]
    assert reasons[4].startswith("not with ") and "no GPU UUID in common" in reasons[4]
    assert reasons[4].endswith("; nor with the 1 other machine, which contradicts it too")
    assert reasons[5].startswith("same machine as ") and "the same GPU UUID GPU-00000003" in reasons[5]
