"""What a demanding SRE sees from the CLI on inputs people really have: the words of each report agree with
its own evidence, a design property is never given a fault's fix, and pasted prompts do not lose the output.
Each test asserts the text a user reads (terminal report piped, or the JSON they script against)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
EXAMPLE = REPO / "k3diag" / "data" / "examples" / "dual-socket-8gpu-pcie"


def _json(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, json.loads(result.stdout)


def _finding(report: dict, finding_id: str, kind: str | None = None) -> dict:
    return next(f for f in report["findings"] if f["id"] == finding_id and (kind is None or f.get("kind") == kind))


def test_cross_socket_p2p_refusal_by_design_gets_no_bios_fix() -> None:
    # The shipped example: CNS on the 16 pairs across sockets is "how this machine is built, not a fault";
    # its fix must not send the user into the BIOS to disable ACS as if it were one.
    _, report = _json("analyze", str(EXAMPLE))
    refusal = _finding(report, "p2p-not-supported", "design")
    assert "not a fault" in refusal["explanation"]
    assert refusal["remedy"].startswith("Nothing to fix on the machine: keep each tensor-parallel group within one socket")
    assert "disable ACS" not in refusal["remedy"] and "iommu=pt" not in refusal["remedy"]


def test_sys_between_gpus_of_one_numa_node_is_not_advised_away_by_numa_placement() -> None:
    # Every pair of this real 8x RTX 4090 box is SYS, GPU0-GPU3 all on NUMA node 0: "keep each TP group inside
    # one NUMA node" would contradict the matrix it quotes (GPU0-GPU1: SYS, both NUMA 0).
    _, report = _json("analyze", str(FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt"))
    sys_pairs = _finding(report, "gpu-pair-sys")
    assert sys_pairs["title"] == "28 GPU pairs cross the CPU interconnect (SYS), even between GPUs of one NUMA node"
    assert "keep each tensor-parallel group inside one of these" not in sys_pairs["explanation"]
    assert "pairs 0-1, 0-2, 0-3, 1-2, 1-3, 2-3 and 6 more are SYS although both GPUs report the same NUMA node" \
        in sys_pairs["explanation"]
    assert sys_pairs["remedy"].startswith("GPUs of one NUMA node are SYS apart here too: prefer replicas")


def test_sys_only_across_sockets_keeps_the_numa_advice() -> None:
    _, report = _json("analyze", str(EXAMPLE))
    sys_pairs = _finding(report, "gpu-pair-sys")
    assert sys_pairs["title"] == "16 GPU pairs cross the CPU interconnect (SYS): TP groups should stay within a socket"
    assert sys_pairs["explanation"].endswith(
        "NUMA node 0: GPU 0, 1, 2, 3; NUMA node 1: GPU 4, 5, 6, 7; keep each tensor-parallel group inside one of these.")


def test_a_latency_column_the_tool_never_recorded_is_explained() -> None:
    # vLLM's default `--percentile-metrics` leaves out e2el: the whole E2E column prints n/r, and the user must be
    # told what n/r means (the legend used to appear only when a single percentile was missing).
    seed = FIXTURES / "serving" / "seed-4x4090"
    result = runner.invoke(app, ["serving", str(seed / "results"), "--from", str(seed / "bundle"),
                                 "--slo-tpot-ms", "40"])
    lines = result.stdout.splitlines()
    row = next(line for line in lines if line.startswith("TP2 GPUs 0,1") and "92.0/101.0/118.0" in line)
    assert row.rstrip().endswith("n/r")
    assert "n/r = not recorded by the tool (e.g. E2E); vLLM records median and P99 only, unless run with --metric-percentiles " \
           "50,95,99, and E2E only with --percentile-metrics ttft,tpot,itl,e2el" in lines


def test_unreadable_inputs_say_their_path_once_and_the_command_is_runnable(tmp_path: Path) -> None:
    binary = tmp_path / "capture.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    result = runner.invoke(app, ["analyze", str(binary), str(empty)])
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert f"  {binary} looks like binary data, not the text output of a tool; give the saved text output instead" \
        in lines
    assert f"  {empty}: the file is empty" in lines
    # the backquoted part is what to type: no prose inside it
    assert "  - any readable tool output (collected on the host): `k3diag collect -o bundle.tar.gz`" in lines
    _, report = _json("analyze", str(empty))
    assert report["verdict"]["missing"] == [{"what": "any readable tool output (collected on the host)",
                                             "command": "k3diag collect -o bundle.tar.gz"}]


def test_fleet_names_what_a_wrong_json_file_is_without_python_words(tmp_path: Path) -> None:
    (tmp_path / "array.json").write_text("[]\n")
    (tmp_path / "object.json").write_text('{"nodes": 3}\n')
    (tmp_path / "fleet.json").write_text('{"schema": "k3diag.fleet/1"}\n')
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "binary.json").write_bytes(b"\x7fELF\x02\x01\x01\x00\xd0\xc3\xff\xfe" * 40)
    result = runner.invoke(app, ["fleet", str(tmp_path)])
    assert result.exit_code == 3
    out = result.stdout
    assert "None" not in out
    tail = "; give bundles or `k3diag check --format json` output"
    assert f"{tmp_path / 'array.json'} is not a k3diag report (a JSON array, expected schema 'k3diag.report/1')" \
        + tail in out
    assert f"{tmp_path / 'object.json'} is not a k3diag report (an object without a \"schema\" field, expected " \
           "schema 'k3diag.report/1')" + tail in out
    assert f"{tmp_path / 'fleet.json'} is not a k3diag report (schema \"k3diag.fleet/1\"" in out
    assert f"{tmp_path / 'empty.json'} is empty" + tail in out
    assert f"{tmp_path / 'binary.json'} is not UTF-8 text, so not JSON" + tail in out


def _pasted(tmp_path: Path, name: str, prompt: str, fixture: Path, drop_first_line: bool = False) -> Path:
    lines = fixture.read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / name
    path.write_text(prompt + "\n" + "".join(lines[1:] if drop_first_line else lines), encoding="utf-8")
    return path


def test_amd_smi_static_after_a_root_prompt_keeps_its_gpus(tmp_path: Path) -> None:
    # `[root@host ~]# amd-smi static` begins with "[", which was taken for the start of amd-smi's JSON: 0 GPUs.
    fixture = FIXTURES / "fabric" / "amd-smi-static-mi300a-4apu-readme.txt"
    path = _pasted(tmp_path, "static.txt", "[root@mi300a-01 ~]# amd-smi static", fixture, drop_first_line=True)
    _, report = _json("analyze", str(path))
    assert report["inputs"][0]["format"] == "amd-smi-static-bus" and report["inputs"][0]["warnings"] == []
    assert [gpu["name"] for gpu in report["topology"]["gpus"]] == ["MI300A"] * 4


def test_proc_cmdline_pasted_with_its_prompt_is_read(tmp_path: Path) -> None:
    fixture = FIXTURES / "pcie" / "cmdline-intel-iommu-pt-rocm-361.txt"
    for number, prompt in enumerate(("user@gpu01:~$ cat /proc/cmdline", "[root@gpu01 ~]# cat /proc/cmdline",
                                     "$ cat /proc/cmdline", "# cat /proc/cmdline")):
        path = _pasted(tmp_path, f"cmdline-{number}.txt", prompt, fixture)
        _, report = _json("analyze", str(path))
        assert report["inputs"][0]["format"] == "kernel-cmdline", prompt
        assert report["host"]["iommu_mode"] == "passthrough", prompt
        assert report["host"]["kernel_cmdline"].startswith("BOOT_IMAGE=/boot/vmlinuz-4.16.15-amd "), prompt


def test_a_missing_command_is_only_what_to_type() -> None:
    # The report quotes `command` whole: prose or nested backquotes inside it break the quote.
    _, report = _json("analyze", str(FIXTURES / "serving" / "llmperf-yi34b-vllm-4xa10g-c1_summary.json"))
    assert report["verdict"]["missing"][0]["command"] == "nvidia-smi topo -m; nvidia-smi -q"
    _, report = _json("analyze", str(FIXTURES / "fabric" / "amd-smi-static-mi300a-4apu-readme.txt"))
    assert report["verdict"]["missing"][0]["command"] == "amd-smi topology || rocm-smi --showtopo"
    for text in (report["verdict"]["text"],):
        assert "`amd-smi topology || rocm-smi --showtopo` shows them" in text


def test_tp_sizes_without_a_recommended_one_are_not_called_other_sizes() -> None:
    # Every pair SYS: the verdict recommends no TP size, so there is no main size for "Other sizes" to follow.
    result = runner.invoke(app, ["analyze", str(FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt")])
    lines = result.stdout.splitlines()
    assert not any(line.lstrip().startswith("Other sizes:") for line in lines)
    index = next(i for i, line in enumerate(lines) if line.startswith("  TP sizes, none recommended: TP2 {0,1}"))
    assert lines[index - 1] == ""  # its own paragraph, not a line of the Design list above it
    assert not any(line.startswith("Run TP") for line in lines)


def test_a_cut_matrix_says_which_links_were_seen() -> None:
    # `topo -m` cut after GPU4's row: GPU5's links to GPU6 and GPU7 are missing, so GPU5's links were not "all seen".
    text = (FIXTURES / "nvidia" / "topo-m-dgx1-v100-mlx5-tabs.txt").read_text(encoding="utf-8")
    result = runner.invoke(app, ["analyze", "-"], input="".join(text.splitlines(keepends=True)[:6]))
    verdict = result.stdout.splitlines()[1]
    assert verdict.startswith("Verdict [OK]: Of the GPUs whose links to each other were all seen (GPU0, GPU1, GPU2, "
                              "GPU3, GPU4 and GPU5): serve with TP4 on {0,1,2,3}")


def test_several_machines_header_is_marked_as_the_warning_behind_exit_1() -> None:
    # Two OK machines, exit 1: piped there is no colour, so the header itself must say it is the warning.
    result = runner.invoke(app, ["analyze", str(FIXTURES / "nvidia" / "smi-q-k80-367-markdown-backslash-breaks.txt"),
                                 str(FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt")])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1] == "[WARN] The inputs describe 2 different machines; each is judged on its own"
    assert result.stdout.count("Verdict [OK]") == 2


def test_a_design_list_never_stands_a_bare_ellipsis_for_gpus() -> None:
    result = runner.invoke(app, ["analyze", str(EXAMPLE)])
    assert "  - All 8 GPUs lack a NIC within GPUDirect RDMA reach (nearest over SYS/PHB)" \
        in result.stdout.splitlines()
    assert ", ..." not in result.stdout


def test_one_nvlink_is_singular() -> None:
    result = runner.invoke(app, ["analyze", str(FIXTURES / "fabric" / "nvlink-s-a100-tabs-cut-nccl-tests228.txt")])
    assert result.stdout.splitlines()[1].startswith("Verdict [WARN]: GPU2 has 1 NVLink up where its peers have 12. ")


def test_serving_names_an_input_it_could_not_read(tmp_path: Path) -> None:
    binary = tmp_path / "results.json.gz"
    binary.write_bytes(__import__("gzip").compress(b"{\"completed\": 1}\n" * 50))  # a whole gzip file
    result = runner.invoke(app, ["serving", str(binary),
                                 str(FIXTURES / "serving" / "vllm-bench-serve-qwen3vl-8b-1qps.json")])
    lines = result.stdout.splitlines()
    assert "Warnings:" in lines
    assert f"  {binary} is gzip-compressed; unpack it first (`gunzip -k {binary}`) and give the unpacked files" in lines


def test_a_corrupt_gzip_is_a_sentence_not_a_traceback(tmp_path: Path) -> None:
    # Magic bytes, then data zlib cannot inflate (a file cut or mangled in transfer): the bundle check raised
    # zlib.error out of every command that takes paths.
    broken = tmp_path / "results.json.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 64)
    for args in (["analyze", str(broken)], ["serving", str(broken)], ["check", "--from", str(broken)]):
        result = runner.invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
    result = runner.invoke(app, ["analyze", str(broken)])
    assert result.exit_code == 3
    # gunzip would fail on it too: it is called cut or corrupt, not something to unpack
    assert f"  {broken} is gzip-compressed but ends early or is corrupt (74 bytes; a cut download or copy?); copy " \
        "it again, `gzip -t` checks it" in result.stdout.splitlines()


def test_a_damaged_bundle_names_no_python_exception(tmp_path: Path) -> None:
    import io
    import tarfile

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as archive:
        for member in sorted(EXAMPLE.rglob("*")):
            archive.add(member, arcname=str(member.relative_to(EXAMPLE.parent)))
    raw = bytearray(data.getvalue())
    for offset in range(len(raw) // 2, len(raw) // 2 + 64):
        raw[offset] ^= 0x5A
    bundle = tmp_path / "node.tar.gz"
    bundle.write_bytes(bytes(raw))
    result = runner.invoke(app, ["analyze", str(bundle)])
    line = next(line for line in result.stdout.splitlines() if "ends early or is corrupt" in line)
    assert "Error" not in line and "BadGzipFile" not in line
    assert line.endswith("the download may be incomplete, ask the sender for the file again")


def test_an_unrecognized_file_is_not_a_host_without_gpus(tmp_path: Path) -> None:
    # "format not recognized ... k3diag reads nvidia-smi topo -m ..." named nvidia-smi, so any unreadable file
    # raised no-gpu-found: "No NVIDIA or AMD GPU was found on this host" about a typo'd path.
    notes = tmp_path / "notes.txt"
    notes.write_text("NodeName=gpu01 Arch=x86_64 CoresPerSocket=32\n")
    _, report = _json("analyze", str(notes))
    assert [f["id"] for f in report["findings"]] == []
    assert report["exit_code"] == 3


def test_a_pasted_tool_error_is_named_for_what_it_is(tmp_path: Path) -> None:
    cases = {
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n":
            "this is nvidia-smi's error, not its output: nvidia-smi could not communicate with the NVIDIA driver",
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.90\n":
            "this is nvidia-smi's error, not its output: the loaded NVIDIA kernel module and the user-space library "
            "differ",
        "No devices were found\n": "this is nvidia-smi's answer when it finds no NVIDIA GPU",
        "user@gpu01:~$ nvidia-smi topo -m\nbash: nvidia-smi: command not found\n":
            "the shell did not find `nvidia-smi` on that host: its output is not in this file",
    }
    for number, (text, said) in enumerate(cases.items()):
        path = tmp_path / f"paste-{number}.txt"
        path.write_text(text)
        result = runner.invoke(app, ["analyze", str(path)])
        assert result.exit_code == 3
        assert any(line.startswith(f"  {path}: {said}") for line in result.stdout.splitlines()), result.stdout


def test_shm_between_geforce_cards_is_not_told_to_remove_settings_the_log_does_not_have() -> None:
    # 4x RTX 4090, no topo -p2p, a vLLM log with NCCL on SHM and no NCCL_* setting: the likely cause is the
    # stock driver's refusal (GNS), which the old fix ("Remove NCCL_P2P_DISABLE ...") did not mention.
    seed = FIXTURES / "serving" / "seed-4x4090"
    _, report = _json("analyze", str(seed / "bundle"), str(seed / "results" / "vllm-tp4.log"))
    pair = next(f for f in report["findings"] if f["id"] == "nccl-same-host-pair-not-p2p"
                and f["subjects"] == ["box4090:rank0", "box4090:rank1"])
    assert "these are consumer GPUs, on which the stock driver refuses P2P" in pair["explanation"]
    assert pair["remedy"].startswith("Run `nvidia-smi topo -p2p r`: GNS there means the stock driver refuses P2P on "
                                     "these cards and SHM is the best path NCCL has")


def test_the_short_fix_never_cuts_inside_parentheses() -> None:
    # The AMD remedy's first "; " sits inside "(`sudo lspci -vvv | grep ACSCtl`; ...)": the one-line Fix ended
    # there with the parenthesis open.
    result = runner.invoke(app, ["analyze", str(FIXTURES / "amd" / "amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt")])
    fixes = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("Fix: ")]
    assert fixes
    for fix in fixes:
        assert fix.count("(") == fix.count(")") and fix.count("`") % 2 == 0, fix
    # a desktop with two GPUs gets the bare-metal advice first, not "In a VM, ..."
    assert not any(fix.startswith("Fix: In a VM") for fix in fixes)


def test_an_amd_pair_without_p2p_is_one_problem_not_two() -> None:
    # amd-smi's ACCESS DISABLED was reported twice for one pair: amd-p2p-not-accessible (with AMD's fix) and the
    # generic p2p-not-supported NS (with NVIDIA-minded advice), two warnings for one fact on one evidence line.
    _, report = _json("analyze", str(FIXTURES / "amd" / "amd-smi-topology-2x-rx7900xtx-access-disabled-legend.txt"))
    problems = [f["id"] for f in report["findings"] if f["severity"] in ("warn", "fail")]
    assert problems == ["amd-p2p-not-accessible"]


def test_a_cut_matrix_row_warning_is_in_words_not_json(tmp_path: Path) -> None:
    text = (FIXTURES / "bench" / "p2pbw-6gpu-p2p-slower-than-disabled.txt").read_text(encoding="utf-8")
    path = tmp_path / "p2p.txt"
    path.write_text(text.replace("     1   9.90 922.37  10.01  10.22   9.64  10.22", "     1   9.90 922.37  10.01"))
    result = runner.invoke(app, ["analyze", str(path)])
    line = next(line for line in result.stdout.splitlines() if "misaligned matrix row" in line)
    assert "null" not in line and line.endswith("its missing cells are left unknown")


PLAIN_NVIDIA_SMI = """\
Tue Dec  1 10:12:03 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
| N/A   33C    P0             70W /  700W |       1MiB /  81559MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
"""


def test_plain_nvidia_smi_says_which_output_to_give(tmp_path: Path) -> None:
    # The table pasted most often: it names a GPU, so it is no "No GPU found", and the unknown says what to run.
    path = tmp_path / "nvidia-smi.txt"
    path.write_text(PLAIN_NVIDIA_SMI)
    result = runner.invoke(app, ["analyze", str(path)])
    assert f"  {path}: this is plain `nvidia-smi` (its status table), which shows no link between GPUs; give " \
           "`nvidia-smi topo -m` and `nvidia-smi -q` (or a `k3diag collect` bundle) instead" in result.stdout.splitlines()
    _, report = _json("analyze", str(path))
    assert [f["id"] for f in report["findings"]] == [] and report["exit_code"] == 3


def test_a_fleet_drain_list_names_real_hosts_only(tmp_path: Path) -> None:
    # Two reports for one node (a re-run kept beside the first): the second is compared as gpu001#2, but the drain
    # list is what scontrol gets, and `gpu001#2` is no node.
    for name, bundle in (("a.json", EXAMPLE), ("b.json", EXAMPLE)):
        result = runner.invoke(app, ["check", "--from", str(bundle), "--format", "json", "--node", "gpu001"])
        (tmp_path / name).write_text(result.stdout)
    result = runner.invoke(app, ["fleet", str(tmp_path)])
    assert "drain (1): gpu001" in result.stdout.splitlines()
    report = json.loads(runner.invoke(app, ["fleet", str(tmp_path), "--json"]).stdout)
    assert report["drain"] == {"hosts": "gpu001", "nodes": 1}


def test_two_machines_matrices_in_one_file_get_the_fix_that_separates_them(tmp_path: Path) -> None:
    # `for h in gpu01 gpu02; do ssh $h nvidia-smi topo -m; done > all.txt`: no host is named. Two boxes wired
    # to other CPUs are now told apart by their affinity columns: CPU 52 is GPU4's in the H100 box and GPU0's
    # in the 4090 box (a CPU set only narrows the lists; it never moves a CPU to another GPU).
    h100 = (FIXTURES / "nvidia" / "topo-m-h100-nv18-narrow.txt").read_text()
    both = tmp_path / "all.txt"
    both.write_text(h100 + (FIXTURES / "nvidia" / "topo-m-8x4090-dual-socket-sys-tabs.txt").read_text())
    result = runner.invoke(app, ["analyze", str(both)])
    assert result.stdout.splitlines()[1] == "[WARN] The inputs describe 2 different machines; each is judged on its own"
    assert "different CPU wiring (CPU 52: GPU4 on CPUs 52-103 (" in " ".join(result.stdout.split())
    # Matrices with the same affinities and different link cells (one box read twice, or twins) stay one
    # machine: the disagreement is flagged, and the fix says how to split the file if it holds two machines.
    twice = tmp_path / "twice.txt"
    twice.write_text(h100 + "\n".join(line.replace("NV18", "NV12", 1) if line.startswith("GPU0 ") else line
                                      for line in h100.splitlines()) + "\n")
    result = runner.invoke(app, ["analyze", str(twice)])
    assert result.exit_code == 1
    assert "      Fix: Both readings are in one file: if it holds the outputs of two machines (a loop over hosts), " \
           "split it per host, or keep each host's prompt line (`user@host:~$ nvidia-smi topo -m`) above its output " \
           "so k3diag can tell them apart." in result.stdout.splitlines()
    # and that advice works: with the prompt lines the file is two machines
    prompted = tmp_path / "prompted.txt"
    prompted.write_text("user@gpu01:~$ nvidia-smi topo -m\n" + h100 + "user@gpu02:~$ nvidia-smi topo -m\n"
                        + twice.read_text()[len(h100):])
    result = runner.invoke(app, ["analyze", str(prompted)])
    assert result.stdout.splitlines()[1] == "[WARN] The inputs describe 2 different machines; each is judged on its own"


def test_no_gpu_verdict_says_no_gpu_once(tmp_path: Path) -> None:
    # A bundle from a host without a GPU: the verdict read "cannot be assessed: No NVIDIA or AMD GPU was found on
    # this host: ..." (the same fact twice in the first line an SRE reads).
    from k3diag.analyze.engine import run_rules
    from k3diag.analyze.verdict import decide_verdict
    from k3diag.model.machine import InputRecord, Machine

    machine = Machine(live=True)
    machine.inputs.append(InputRecord(path="host-readings.json", format="host-readings"))
    machine.note("nvml", "the NVIDIA driver library libnvidia-ml.so.1 was not found")
    verdict = decide_verdict(machine, run_rules(machine), None)
    assert verdict.text == ("No GPU was found, so this machine cannot be assessed: the NVIDIA driver library "
                            "libnvidia-ml.so.1 was not found.")
