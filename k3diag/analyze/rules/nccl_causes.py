"""Root causes an NCCL/RCCL log prints verbatim, each a finding with its remedy instead of one line in
"NCCL printed N warnings": a container's /dev/shm too small, SHM segments that cannot be attached,
NVLS asked for but set up on no channel, CollNet (SHARP) asked for but given up, an unhealthy multi-node
NVLink fabric.

`CLAIMED` lists the message texts these rules (and the AMD IOMMU rule) explain, so `nccl-warnings`
does not list them again; it also drops `Failed to open libibverbs` for a job on one node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef

if TYPE_CHECKING:  # annotations only: a machine without an NCCL log does not load its records
    from k3diag.model.nccl import NcclMessage, NcclRun

NCCL_DEBUG_HINT = "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET"
_SHM_FULL = ("No space left on device", "posix_fallocate failed", "failed to extend /dev/shm")
_SHM_CREATE = "Error while creating shared memory segment"
_SHM_ATTACH = ("Error while attaching to shared memory segment",)
# transport.cc: `Cannot initialize CollNet, using point-to-point network instead`
_COLLNET_FALLBACK = "Cannot initialize CollNet"
# why, as the network plugin says it: `NET/IB : SHARP coll init error: Cannot create SHARP job(-11)`
_COLLNET_CAUSES = ("SHARP coll init error", "Cannot create SHARP job")


def _messages(machine: Machine) -> list[tuple[NcclRun, NcclMessage]]:
    seen: set[tuple] = set()
    out = []
    for run in machine.nccl:
        for message in run.messages:
            key = (message.level, message.file, message.line_no, message.text)
            if key not in seen:
                seen.add(key)
                out.append((run, message))
    return out


def _refs(items: list[NcclMessage], limit: int = 4) -> list[SourceRef]:
    return [m.source for m in items[:limit] if m.source is not None]


def is_shm_full(text: str) -> bool:
    return any(token in text for token in _SHM_FULL) or (_SHM_CREATE in text and "/dev/shm" in text) or \
        (_SHM_CREATE in text and "shm" in text)


def is_shm_attach(text: str) -> bool:
    return any(token in text for token in _SHM_ATTACH)


def claimed(message: NcclMessage, run: NcclRun) -> bool:
    """A message a dedicated finding explains (not listed again among the plain warnings)."""
    text = message.text
    if is_shm_full(text) or is_shm_attach(text) or 'Missing "iommu=pt"' in text or _COLLNET_FALLBACK in text:
        return True
    if "Failed to open libibverbs" in text and single_node(run):
        return True
    # the plugin's reason and the traces of CollNet's set-up (`transport/coll_net.cc:1358 -> 2`) are explained by
    # `nccl-collnet-fallback` only when NCCL printed the fallback; a log cut before it keeps them as warnings
    if (is_collnet_cause(text) or (message.file and "coll_net" in message.file)) and _collnet_fell_back(run):
        return True
    return False


def _body(line: str) -> str:
    """A log line without its `host:pid:tid [dev] NCCL INFO ` header, to quote in a sentence."""
    head, found, body = line.partition(" NCCL INFO ")
    return (body if found else line).strip()


def is_collnet_cause(text: str) -> bool:
    """The network plugin's reason for CollNet not starting (`SHARP coll init error: ...`)."""
    return any(cause in text for cause in _COLLNET_CAUSES)


def _collnet_fell_back(run: NcclRun) -> bool:
    return any(_COLLNET_FALLBACK in m.text for m in run.messages)


def single_node(run: NcclRun) -> bool:
    """One node: NCCL said so (`nNodes 1`), or one host and no connection over the network."""
    if run.nodes_reported is not None:
        return run.nodes_reported <= 1
    return len(run.hosts) <= 1 and not any(c.transport == "NET" for c in run.connections)


# -- nccl-shm-no-space -------------------------------------------------------------------------


def check_shm_no_space(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    items = [m for _, m in _messages(machine) if is_shm_full(m.text)]
    if not items:
        return
    full = any(token in m.text for m in items for token in _SHM_FULL)
    count = sum(m.count for m in items)
    yield Finding(
        id="nccl-shm-no-space",
        severity="fail",
        subjects=["/dev/shm"],
        title="NCCL could not create its shared-memory segments in /dev/shm" + (" (no space left)" if full else ""),
        explanation=(
            f"NCCL failed to create or extend its /dev/shm segments {'once' if count == 1 else f'{count} times'}"
            + (": the file system is full" if full else "")
            + ". NCCL's SHM transport and its proxy buffers live in /dev/shm; when it is too small, communicator "
            "init fails with `unhandled system error` and the job dies before the first collective. A container "
            "gets 64 MiB of /dev/shm by default (Docker, Kubernetes pods), which an 8-GPU job outgrows; stale "
            "`/dev/shm/nccl-*` files left by crashed jobs fill it too."
        ),
        evidence=_refs(items),
        remedy=(
            "Give the container more shared memory: `docker run --shm-size=16g ...` or `--ipc=host`; in "
            "Kubernetes mount an `emptyDir` with `medium: Memory` (and a `sizeLimit`) at /dev/shm; remove stale "
            "`/dev/shm/nccl-*` files. `NCCL_SHM_DISABLE=1` only works around it, at the cost of the SHM transport."
        ),
        confirm_with="df -h /dev/shm; ls -la /dev/shm | grep nccl",
        data={"messages": len(items), "occurrences": count, "no_space": full},
    )


# -- nccl-shm-attach-failed --------------------------------------------------------------------


def check_shm_attach_failed(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    items = [m for _, m in _messages(machine) if is_shm_attach(m.text)]
    if not items:
        return
    count = sum(m.count for m in items)
    yield Finding(
        id="nccl-shm-attach-failed",
        severity="warn",
        subjects=["/dev/shm"],
        title="NCCL ranks could not attach to each other's shared-memory segments",
        explanation=(
            f"{'Once' if count == 1 else f'{count} times'} a rank could not open a /dev/shm segment another rank "
            "of the same node had created. "
            "The ranks then do not share one /dev/shm: they run in different containers or IPC namespaces, "
            "systemd removed the segment (`RemoveIPC=yes` when a user's last session ends), or a cleaner emptied "
            "/dev/shm while the job started. Init fails or the pair falls back to a slower transport."
        ),
        evidence=_refs(items),
        remedy=(
            "Run all ranks of a node in one container, or start the containers with `--ipc=host` (Kubernetes: one "
            "pod per node, or `hostIPC: true`); set `RemoveIPC=no` in /etc/systemd/logind.conf; "
            "`NCCL_SHM_DISABLE=1` is a workaround that costs the SHM transport."
        ),
        confirm_with="ls -la /dev/shm; grep RemoveIPC /etc/systemd/logind.conf; docker inspect -f '{{.HostConfig.IpcMode}}' CONTAINER",
        data={"messages": len(items), "occurrences": count},
    )


# -- nccl-nvls-no-channels ---------------------------------------------------------------------


def _nvls_asked(run: NcclRun) -> SourceRef | None:
    value = (run.env.get("NCCL_NVLS_ENABLE") or "").strip()
    algo = (run.env.get("NCCL_ALGO") or "").upper()
    if value == "1":
        return run.env_sources.get("NCCL_NVLS_ENABLE")
    if "NVLS" in algo and not algo.startswith("^"):
        return run.env_sources.get("NCCL_ALGO")
    return None


def check_nvls_no_channels(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for run in machine.nccl:
        asked = _nvls_asked(run)
        if asked is None:
            continue
        zero = [c for c in run.channel_counts if c.nvls == 0]
        some = [c for c in run.channel_counts if c.nvls]
        unavailable = [n for n in run.nvls_support if not n.available]
        if some or not (zero or unavailable):
            continue
        evidence = [asked] + [c.source for c in zero[:2] if c.source] + [n.source for n in unavailable[:2] if n.source]
        why = ("NCCL found no NVLink multicast support on the GPUs (`NVLS multicast support is not available`)"
               if unavailable else "NCCL set up 0 NVLS channels")
        yield Finding(
            id="nccl-nvls-no-channels",
            severity="warn",
            subjects=[run.comm_id and f"comm:{run.comm_id}" or "nccl"],
            title="NVLS (NVLink SHARP) was asked for but NCCL runs without it: 0 nvls channels",
            explanation=(
                f"The job asks for NVLS ({asked.text.strip() if asked else 'NCCL_NVLS_ENABLE=1'}), yet {why}. "
                "All-reduce then runs as ring/tree over NVLink, which on an NVSwitch system reaches roughly half "
                "the bus bandwidth NVLS offers. NVLS needs NVSwitch-based GPUs (H100/H200/B200 HGX, not PCIe or "
                "NVLink-bridged cards), Fabric Manager running, CUDA driver support for multicast (driver 530+), "
                "and inside containers the IMEX channel devices."
            ),
            evidence=[e for e in evidence if e is not None][:5],
            remedy=(
                "Check the GPUs sit behind NVSwitches (`nvidia-smi topo -m` shows NV18 to every GPU) and that "
                "`nvidia-fabricmanager` runs (`systemctl status nvidia-fabricmanager`, `nvidia-smi -q | grep -A2 "
                "Fabric` shows State Completed); update the driver; on cards without NVSwitch drop the NVLS request."
            ),
            confirm_with="nvidia-smi -q | grep -i -A3 fabric; systemctl status nvidia-fabricmanager",
            data={"nvls_channels": [c.nvls for c in zero], "multicast_unavailable": len(unavailable)},
        )
        return


# -- nccl-collnet-fallback ---------------------------------------------------------------------


def check_collnet_fallback(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    messages = _messages(machine)
    fallbacks = [m for _, m in messages if _COLLNET_FALLBACK in m.text]
    if not fallbacks:
        return
    causes = [m for _, m in messages if is_collnet_cause(m.text)]
    asked = next((run.env_sources.get("NCCL_COLLNET_ENABLE") for run in machine.nccl
                  if (run.env.get("NCCL_COLLNET_ENABLE") or "").strip() == "1"), None)
    ranks = sum(m.count for m in fallbacks)
    because = f" The network plugin says why: `{causes[0].text.strip()}`." if causes else ""
    yield Finding(
        id="nccl-collnet-fallback",
        severity="warn",
        subjects=sorted({run.comm_id and f"comm:{run.comm_id}" or "nccl" for run, m in messages if m in fallbacks}),
        title="CollNet (SHARP in-network reduction) could not start: NCCL uses the point-to-point network instead",
        explanation=(
            f"The job asks for CollNet (`{_body(asked.text) if asked is not None else 'NCCL_COLLNET_ENABLE=1'}`), "
            f"and NCCL printed `{fallbacks[0].text.strip()}` "
            f"{'once' if ranks == 1 else f'{ranks} times'}.{because} Inter-node all-reduce then runs as ring or "
            "tree over the NICs, without the switch-side reduction that halves the data each node sends, so large "
            "all-reduces across nodes reach well under what SHARP gives. A SHARP job that cannot be created usually "
            "means the aggregation manager (sharp_am) on the subnet manager is down or has no resources left for "
            "this job (`No resource`: trees or quota taken by other jobs), or the HCAs are not SHARP-enabled."
        ),
        evidence=_refs(fallbacks, 2) + _refs(causes, 2),
        remedy=(
            "Check the SHARP aggregation manager (`systemctl status sharp_am` on the subnet-manager host) and run "
            "`sharp_hello` from the nodes of the job; free or raise the SHARP quota if it reports `No resource`; "
            "check the nccl-rdma-sharp-plugins build matches this NCCL. Set `NCCL_COLLNET_ENABLE=0` meanwhile: it "
            "skips the attempt, which the job is not using anyway."
        ),
        confirm_with="sharp_hello; ibv_devinfo | grep -i sharp",
        data={"fallbacks": ranks, "causes": [m.text.strip() for m in causes[:3]], "asked": asked is not None},
    )


# -- nccl-mnnvl-unhealthy ----------------------------------------------------------------------


def check_mnnvl_unhealthy(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    bad = []
    for run in machine.nccl:
        for item in run.mnnvl_health:
            if item.problems() and all(item.mask != b.mask or item.host != b.host for b in bad):
                bad.append(item)
    if not bad:
        return
    problems = sorted({p for item in bad for p in item.problems()})
    hosts = sorted({item.host for item in bad if item.host})
    yield Finding(
        id="nccl-mnnvl-unhealthy",
        severity="fail",
        subjects=hosts or ["nvlink-fabric"],
        title=f"The multi-node NVLink fabric reports a problem: {problems[0]}",
        explanation=(
            f"NCCL printed the GPU fabric health mask ({', '.join(sorted({i.mask for i in bad}))}) that NVML "
            f"reports for multi-node NVLink (GB200 NVL72 and similar): {'; '.join(problems)}. Communicators across "
            "the NVLink domain then run degraded, recover routes mid-job or fail to form. (Each 2-bit field of the "
            "mask reads 1 for a problem and 2 for none: 0xaa is a healthy fabric.)"
        ),
        evidence=[item.source for item in bad[:4] if item.source is not None],
        remedy=("Check the NVLink switch trays and the fabric manager (`nvidia-smi -q | grep -A8 Fabric`, "
                "`nvidia-smi nvlink -s`), the IMEX service and the partition assignment; replace or reseat the "
                "failing tray or cable; `NCCL_MNNVL_ENABLE=0` keeps jobs off the multi-node fabric meanwhile."),
        confirm_with="nvidia-smi -q | grep -i -A8 fabric",
        data={"masks": [item.mask for item in bad], "problems": problems, "hosts": hosts},
    )


RULES = (
    Rule("nccl-shm-no-space", "fail", "NCCL: /dev/shm too small or full", check_shm_no_space,
         kind="misconfiguration"),
    Rule("nccl-shm-attach-failed", "warn", "NCCL: shared-memory segments not shared between ranks",
         check_shm_attach_failed, kind="misconfiguration"),
    Rule("nccl-nvls-no-channels", "warn", "NVLS asked for but not set up", check_nvls_no_channels,
         kind="misconfiguration"),
    Rule("nccl-collnet-fallback", "warn", "CollNet (SHARP) asked for but not started", check_collnet_fallback,
         kind="misconfiguration"),
    Rule("nccl-mnnvl-unhealthy", "fail", "Multi-node NVLink fabric unhealthy", check_mnnvl_unhealthy, kind="fault"),
)
