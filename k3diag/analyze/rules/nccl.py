"""NCCL log findings: what transport each GPU pair really used, which settings forced it, what
NCCL warned about.

Ranks are mapped to this machine's GPUs by bus id (NCCL's `busId`), else by NVML index (the
brackets of 2.13+ connection lines, `nvmlDev`), and only for ranks on this machine's host (or
when the log has a single host and the machine's name is unknown). Cause keys point at the
topology findings (`gpu-pair-sys@GPU0,GPU2`, `p2p-not-supported@GPU0,GPU2`) and at this module's
own env and P2P-disabled findings, so the report can chain symptom to cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from k3diag.analyze.finding import Finding, Rule
from k3diag.analyze.rules.nccl_causes import claimed
from k3diag.model.machine import Machine
from k3diag.model.source import SourceRef
from k3diag.model.words import counted

if TYPE_CHECKING:  # annotations only: a machine without an NCCL log does not load its records
    from k3diag.model.nccl import NcclConnection, NcclRun

NCCL_DEBUG_HINT = "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,NET"
_P2P_BAD = ("CNS", "GNS", "TNS", "NS", "DR")
_SLOW_PATHS = ("SYS", "SOC", "PHB", "NODE")
_CONSUMER = ("GeForce", "RTX 30", "RTX 40", "RTX 50", "TITAN")


# -- helpers ------------------------------------------------------------------------------------


def _short(host: str | None) -> str | None:
    return host.split(".")[0].lower() if host else None


def _on_this_machine(machine: Machine, run: NcclRun, host: str | None) -> bool:
    own = _short(machine.host.hostname)
    if own:
        return _short(host) == own
    return len(run.hosts) <= 1


def rank_gpu(machine: Machine, run: NcclRun, rank: int) -> tuple[int | None, str | None]:
    """The nvidia-smi index of the GPU a rank ran on, and what that mapping rests on."""
    info = run.rank_info(rank)
    if info is None:
        return None, None
    if info.bus_id:
        gpu = machine.gpu_by_bus_id(info.bus_id)
        if gpu is not None:
            return gpu.index, "busId"
    if not _on_this_machine(machine, run, info.host):
        return None, None
    if info.nvml_dev is not None:
        return info.nvml_dev, "nvmlDev"
    if info.cuda_dev is not None and not machine.gpus:
        return info.cuda_dev, "cudaDev"
    if info.cuda_dev is not None and info.cuda_dev in machine.gpus and len(machine.gpus) == len(
        {r.cuda_dev for r in run.ranks if r.host == info.host and r.cuda_dev is not None}
    ):
        return info.cuda_dev, "cudaDev"
    return None, None


def _pair_connections(run: NcclRun) -> dict[tuple[int, int], list[NcclConnection]]:
    pairs: dict[tuple[int, int], list[NcclConnection]] = {}
    for conn in run.connections:
        if conn.src_rank == conn.dst_rank:
            continue
        key = (min(conn.src_rank, conn.dst_rank), max(conn.src_rank, conn.dst_rank))
        pairs.setdefault(key, []).append(conn)
    return pairs


def _env_is(run: NcclRun, name: str, *values: str) -> bool:
    value = run.env.get(name)
    return value is not None and value.strip().upper() in values


def _env_evidence(run: NcclRun, *names: str) -> list[SourceRef]:
    return [run.env_sources[n] for n in names if n in run.env_sources]


def _run_label(run: NcclRun) -> str:
    if run.comm_id:
        return f"comm {run.comm_id}"
    return f"{run.nranks}-rank communicator" if run.nranks else "NCCL communicator"


def _subject_run(run: NcclRun) -> str:
    if run.comm_id:
        return f"comm:{run.comm_id}"
    return (run.input or "nccl-log").replace("\\", "/").rsplit("/", 1)[-1]


# -- nccl-same-host-pair-not-p2p ---------------------------------------------------------------


def check_same_host_pair_not_p2p(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    emitted = 0
    for run in machine.nccl:
        pairs = _pair_connections(run)
        same_host: dict[str, dict[tuple[int, int], list[NcclConnection]]] = {}
        for (a, b), conns in pairs.items():
            host_a, host_b = run.host_of(a), run.host_of(b)
            if host_a is None or host_a != host_b:
                continue
            same_host.setdefault(host_a, {})[(a, b)] = conns
        hostnames_unique = not (run.nodes_reported and run.nodes_reported > len(run.hosts))
        for host, host_pairs in sorted(same_host.items()):
            p2p_pairs = {p for p, conns in host_pairs.items() if any(c.transport == "P2P" for c in conns)}
            for (a, b), conns in sorted(host_pairs.items()):
                bad = [c for c in conns if c.transport in ("SHM", "NET")]
                if not bad or (a, b) in p2p_pairs:
                    continue
                if all(c.transport == "NET" for c in bad) and not _net_explained(run, a, b, hostnames_unique):
                    continue  # two machines sharing a hostname, not one machine's pair
                finding = _pair_finding(machine, run, host, a, b, bad, len(p2p_pairs), len(host_pairs), earlier)
                emitted += 1
                yield finding
                if emitted >= 64:
                    return


def _net_explained(run: NcclRun, a: int, b: int, hostnames_unique: bool) -> bool:
    """NET between two ranks of one host is real only when something forced it (P2P and SHM off)
    or both ranks are one process; otherwise the 'host' is two machines with one name."""
    if not hostnames_unique:
        return False
    ia, ib = run.rank_info(a), run.rank_info(b)
    same_process = ia is not None and ib is not None and ia.pid is not None and ia.pid == ib.pid
    forced = _env_is(run, "NCCL_SHM_DISABLE", "1") or _env_is(run, "NCCL_P2P_DISABLE", "1") or \
        _env_is(run, "NCCL_P2P_LEVEL", "LOC", "0")
    return same_process or forced


def _design_refusal(earlier: list[Finding], la: str, lb: str) -> str | None:
    """The key of the design advisory that explains why this pair has no P2P: its pairs are in the
    advisory's aliases (`gpu-pair-sys@GPU0,GPU4` across sockets, `p2p-not-supported@GPU0,GPU1` for a
    refusal by design such as GeForce's GNS); None when nothing by design explains it."""
    for alias in (f"p2p-not-supported@{la},{lb}", f"gpu-pair-sys@{la},{lb}"):
        for finding in earlier:
            if alias in finding.aliases:
                return finding.key
    return None


def _pair_finding(machine: Machine, run: NcclRun, host: str, a: int, b: int, bad: list[NcclConnection],
                  p2p_pair_count: int, pair_count: int, earlier: list[Finding]) -> Finding:
    transport = "SHM" if any(c.transport == "SHM" for c in bad) else "NET"
    first = min(bad, key=lambda c: (c.channel if c.channel is not None else 999))
    medium = "host memory (SHM)" if transport == "SHM" else f"the network ({first.via})"
    gpu_a, basis_a = rank_gpu(machine, run, a)
    gpu_b, basis_b = rank_gpu(machine, run, b)
    causes: list[str] = []
    reasons: list[str] = []
    evidence: list[SourceRef] = [c.source for c in bad[:2] if c.source is not None]
    # settings first: they override everything the hardware allows
    for name, values, why in (
        ("NCCL_P2P_DISABLE", ("1",), "NCCL_P2P_DISABLE=1 turns P2P off"),
        ("NCCL_P2P_LEVEL", ("LOC", "0"), "NCCL_P2P_LEVEL=LOC allows P2P for no pair"),
        ("NCCL_SHM_DISABLE", ("1",), "NCCL_SHM_DISABLE=1 leaves the network as the only way left"),
    ):
        if _env_is(run, name, *values) and (name != "NCCL_SHM_DISABLE" or transport == "NET"):
            causes.append(f"nccl-env-disables-transport@{name}")
            reasons.append(why)
            evidence.extend(_env_evidence(run, name))
    gpus_known = gpu_a is not None and gpu_b is not None and gpu_a != gpu_b
    consumer = False
    if gpus_known:
        ga, gb = sorted((gpu_a, gpu_b))
        la, lb = f"GPU{ga}", f"GPU{gb}"
        link = machine.link(la, lb)
        if link is not None and link.path in ("SYS", "SOC"):
            causes.append(f"gpu-pair-sys@{la},{lb}")
            reasons.append(f"the pair crosses CPU sockets ({link.path} in the topology)")
            if link.source:
                evidence.append(link.source)
        elif link is not None and link.path in ("PHB", "NODE"):
            causes.append(f"gpu-pair-phb@{la},{lb}")
            reasons.append(f"the pair meets only at the CPU's host bridge ({link.path}), beyond NCCL's default P2P level")
            if link.source:
                evidence.append(link.source)
        statuses = [s for s in machine.p2p if {s.src, s.dst} == {la, lb} and s.status in _P2P_BAD
                    and s.capability in ("read", "write", "pcie", "unknown")]
        if statuses:
            causes.append(f"p2p-not-supported@{la},{lb}")
            reasons.append(f"the driver reports P2P {statuses[0].status} for this pair")
            if statuses[0].source:
                evidence.append(statuses[0].source)
        for item in run.p2p_disabled:
            if {item.gpu_a, item.gpu_b} == {ga, gb} and (item.host is None or _short(item.host) == _short(host)):
                causes.append(f"nccl-p2p-disabled-between-connected@{item.host or 'log'}")
                reasons.append("NCCL logged that P2P is disabled between these GPUs")
                if item.source:
                    evidence.append(item.source)
                break
        names = {machine.gpus[g].name for g in (ga, gb) if g in machine.gpus and machine.gpus[g].name}
        consumer = not statuses and any(any(tag in n for tag in _CONSUMER) for n in names)
        if consumer:
            reasons.append("these are consumer GPUs, on which the stock driver refuses P2P")
    # NCCL's own classification of the path between the two GPUs
    path = _nccl_path_between(run, a, b)
    if path is not None and path.path_type in _SLOW_PATHS and not any("topology" in r for r in reasons):
        reasons.append(f"NCCL classified their path as {path.path_type}")
        if path.source:
            evidence.append(path.source)
    # SHM is NCCL's best path where the machine refuses P2P by design (GeForce; across sockets): advice with
    # the design finding as its cause, not a fault (docs/findings/README.md). A setting that turned P2P off
    # is still the user's to fix, and SHM where P2P should work stays a warning.
    design = (_design_refusal(earlier, f"GPU{min(gpu_a, gpu_b)}", f"GPU{max(gpu_a, gpu_b)}")
              if gpus_known and transport == "SHM" and not any(c.startswith("nccl-env") for c in causes) else None)
    where = f"GPU{gpu_a} and GPU{gpu_b} ({basis_a})" if gpus_known else "GPUs k3diag could not map"
    others = (
        f"while {counted(p2p_pair_count, 'other pair')} on this host {'uses' if p2p_pair_count == 1 else 'use'} P2P"
        if p2p_pair_count
        else "and no pair on this host uses P2P"
    )
    channel = f"on channel {first.channel}" if first.channel is not None else ""
    cause_text = ("; likely cause: " + "; ".join(dict.fromkeys(reasons))) if reasons else ""
    subjects = [f"{host}:rank{a}", f"{host}:rank{b}"]
    if design is not None:
        causes = [design] + [c for c in causes if c != design]
    expected = (" This is expected on this machine: P2P is refused by design between these GPUs, so host memory is "
                "the best path NCCL has; it only matters if a tensor-parallel group spans them." if design else "")
    return Finding(
        id="nccl-same-host-pair-not-p2p",
        severity="info" if design else "warn",
        kind="info" if design else "",
        subjects=subjects,
        title=f"ranks {a} and {b} on {host} talk through {transport} {channel} {others}".replace("  ", " "),
        explanation=(
            f"In {_run_label(run)}, ranks {a} and {b} run on the same host ({host}, {where}) but NCCL moves their "
            f"data through {medium} ({first.via}) instead of GPU peer-to-peer{cause_text}. Host-memory staging "
            "costs two PCIe crossings and CPU memory bandwidth per transfer; in a ring or tree every step waits "
            "for the slowest pair, so this pair sets the pace of every collective of the communicator." + expected
        ),
        evidence=list(dict.fromkeys(evidence))[:6],
        remedy=(
            "Nothing to repair on the node: keep tensor-parallel peers on GPUs that have P2P (behind one PCIe switch "
            "or socket) and put pipeline or data parallelism across these pairs." if design else
            # consumer cards: the likely cause is the driver's own refusal, which no NCCL setting changes
            "Run `nvidia-smi topo -p2p r`: GNS there means the stock driver refuses P2P on these cards and SHM is the "
            "best path NCCL has (pass --disable-custom-all-reduce to vLLM/SGLang); only if it shows OK, look for "
            "NCCL_P2P_DISABLE / NCCL_P2P_LEVEL settings and ACS/IOMMU on the bridges above both GPUs."
            if consumer and not causes else
            "Remove NCCL_P2P_DISABLE / restrictive NCCL_P2P_LEVEL settings unless they work around a known hang; "
            "keep tensor-parallel peers on GPUs behind one PCIe switch or socket; if the driver refuses P2P "
            "(topo -p2p not OK) look at ACS/IOMMU on the bridges above both GPUs."
        ),
        causes=causes,
        confirm_with=(
            f"nvidia-smi topo -p2p r; nvidia-smi topo -p -i {gpu_a},{gpu_b}" if gpus_known
            else f"{NCCL_DEBUG_HINT} all_reduce_perf -b 1G -e 1G -g 2"
        ),
        data={"ranks": [a, b], "host": host, "transport": transport, "via": first.via,
              "gpus": sorted([gpu_a, gpu_b]) if gpus_known else None, "gpu_basis": basis_a if gpus_known else None},
    )


def _nccl_path_between(run: NcclRun, a: int, b: int):
    ia, ib = run.rank_info(a), run.rank_info(b)
    if not ia or not ib or not ia.bus_id or not ib.bus_id:
        return None
    for path in run.paths:
        if {path.src_bus_id, path.dst_bus_id} == {ia.bus_id, ib.bus_id}:
            return path
    return None


# -- nccl-env-disables-transport ---------------------------------------------------------------

_ENV_EFFECTS = (
    ("NCCL_P2P_DISABLE", ("1",), "warn", "GPU peer-to-peer is off: every same-host transfer goes through host memory "
     "(SHM) or, with SHM off too, the network"),
    ("NCCL_P2P_LEVEL", ("LOC", "0"), "warn", "P2P is allowed for no GPU pair (LOC): same as NCCL_P2P_DISABLE=1"),
    ("NCCL_P2P_LEVEL", ("NVL", "1"), "info", "P2P is allowed only over NVLink; PCIe-only pairs go through host memory"),
    ("NCCL_P2P_LEVEL", ("PIX", "PXB", "2", "3"), "info",
     "P2P is allowed only within a PCIe switch; pairs through the CPU use host memory"),
    ("NCCL_SHM_DISABLE", ("1",), "warn", "host-memory transport is off: pairs without P2P go through the network "
     "(NIC loopback or sockets), usually slower"),
    ("NCCL_IB_DISABLE", ("1",), "warn", "InfiniBand/RoCE is off: traffic between nodes uses TCP sockets"),
    ("NCCL_NET_GDR_LEVEL", ("LOC", "0"), "info", "GPUDirect RDMA is off: NIC traffic is staged in host memory"),
    ("NCCL_NVLS_ENABLE", ("0",), "info", "NVLink SHARP is off: all-reduce on NVSwitch systems peaks lower"),
)


def check_env_disables_transport(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    seen: set[str] = set()
    for run in machine.nccl:
        multinode = (run.nodes or 0) > 1 or any(c.transport == "NET" for c in run.connections)
        for name, values, severity, effect in _ENV_EFFECTS:
            if name in seen or not _env_is(run, name, *values):
                continue
            if name == "NCCL_IB_DISABLE" and not multinode:
                severity = "info"
            value = run.env[name]
            used = run.transport_counts()
            seen_effect = ""
            if name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL") and used.get("P2P", 0) == 0 and used.get("SHM", 0):
                seen_effect = (f" The log confirms it: {counted(used['SHM'], 'connection line')} "
                               f"{'uses' if used['SHM'] == 1 else 'use'} SHM and none P2P.")
            seen.add(name)
            yield Finding(
                id="nccl-env-disables-transport",
                severity=severity,
                subjects=[name],
                title=f"{name}={value} is set: {effect.split(':')[0]}",
                explanation=(
                    (f"The command line pasted with the log sets {name}={value} ({_run_label(run)}): "
                     if run.env_origin.get(name) == "command-line" else
                     f"NCCL read {name}={value} from the environment ({_run_label(run)}): ")
                    + f"{effect}.{seen_effect} "
                    "Such settings are often left over from working around a hang on another machine and silently "
                    "cost bandwidth on every job."
                ),
                evidence=_env_evidence(run, name),
                remedy=(
                    f"Unset {name} (check the job script, container image, /etc/nccl.conf and ~/.nccl.conf) and rerun "
                    f"with {NCCL_DEBUG_HINT}; if it was set to avoid a hang, fix the cause (ACS/IOMMU for P2P hangs, "
                    "the NIC/driver for IB) instead."
                ),
                confirm_with=f"grep -H {name} /etc/nccl.conf ~/.nccl.conf 2>/dev/null; env | grep NCCL_",
                data={"name": name, "value": value},
            )


# -- nccl-p2p-disabled-between-connected -------------------------------------------------------


def check_p2p_disabled_between_connected(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    groups: dict[tuple[str | None, bool], list] = {}
    for run in machine.nccl:
        for item in run.p2p_disabled:
            bucket = groups.setdefault((item.host, item.nvlink), [])
            if all({x.gpu_a, x.gpu_b} != {item.gpu_a, item.gpu_b} for x in bucket):
                bucket.append(item)
    for (host, nvlink), items in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        pairs = sorted({tuple(sorted((x.gpu_a, x.gpu_b))) for x in items})
        pair_text = ", ".join(f"{a}-{b}" for a, b in pairs[:12]) + (" ..." if len(pairs) > 12 else "")
        causes = []
        for a, b in pairs:
            la, lb = f"GPU{a}", f"GPU{b}"
            causes.append(f"p2p-not-supported@{la},{lb}")
        if nvlink:
            explanation = (
                f"NCCL found NVLink between GPU pairs {pair_text} on {host or 'this host'}, yet the driver reports peer "
                "access as not OK. NCCL treats this as a hardware fault and aborts communicator init (unhandled cuda "
                "error) unless NCCL_IGNORE_DISABLED_P2P=1. Known causes: a failed NVLink or NVSwitch, Fabric Manager "
                "not running on HGX systems, or on GB200 a fabric that was not provisioned."
            )
            severity = "fail"
            remedy = ("Check `nvidia-smi nvlink -s`, `nvidia-smi -q | grep -i fabric` and "
                      "`systemctl status nvidia-fabricmanager`; reseat or replace the failing part.")
        else:
            explanation = (
                f"NCCL wanted P2P between GPU pairs {pair_text} on {host or 'this host'} (their PCIe path allows it) "
                "but the driver says peer access is not possible, so NCCL uses host memory for them. This is the "
                "normal state of consumer GPUs (GeForce) on stock drivers; on data-center GPUs it points at "
                "ACS/IOMMU on the PCIe bridges or a virtual machine without P2P."
            )
            severity = "warn"
            remedy = ("Confirm with `nvidia-smi topo -p2p r`. Consumer cards: no supported fix (use SHM, or a "
                      "data-center SKU). Data-center cards: disable ACS on the switches/root ports or boot with "
                      "iommu=pt; in a VM, ask for P2P-capable passthrough.")
        yield Finding(
            id="nccl-p2p-disabled-between-connected",
            severity=severity,
            subjects=[host or "log"],
            title=(f"NCCL: P2P is disabled between {'NVLink-' if nvlink else ''}connected GPUs {pair_text}"),
            explanation=explanation,
            evidence=[x.source for x in items[:4] if x.source is not None],
            remedy=remedy,
            causes=causes,
            confirm_with="nvidia-smi topo -p2p r",
            data={"pairs": [list(p) for p in pairs], "nvlink": nvlink, "host": host},
        )


# -- nccl-multinode-socket ---------------------------------------------------------------------


def check_multinode_socket(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for run in machine.nccl:
        socket_conns = [c for c in run.connections if c.transport == "NET" and (c.net_name or "").lower() == "socket"]
        forced_local = (_env_is(run, "NCCL_P2P_DISABLE", "1") or _env_is(run, "NCCL_P2P_LEVEL", "LOC", "0")) and \
            _env_is(run, "NCCL_SHM_DISABLE", "1")
        # NET is only chosen between nodes unless P2P and SHM are both switched off
        multinode = (run.nodes or 0) > 1 or (bool(socket_conns) and not forced_local)
        uses_socket = bool(socket_conns) or (run.net.network or "").lower() == "socket"
        if not (multinode and uses_socket):
            continue
        why = []
        evidence = [c.source for c in socket_conns[:2] if c.source is not None]
        causes = []
        if run.net.ib_not_found:
            why.append("NCCL found no InfiniBand/RoCE device (`NET/IB : No device found.`)")
        if run.net.ibverbs_missing:
            why.append("libibverbs could not be loaded (rdma-core missing in the container?)")
        if _env_is(run, "NCCL_IB_DISABLE", "1"):
            why.append("NCCL_IB_DISABLE=1 is set")
            causes.append("nccl-env-disables-transport@NCCL_IB_DISABLE")
            evidence.extend(_env_evidence(run, "NCCL_IB_DISABLE"))
        evidence.extend(s for s in run.net.sources[:2] if s not in evidence)
        because = ": " + "; ".join(why) if why else ""
        nodes = run.nodes or len(run.hosts)
        # A log saved on one host shows only its own ranks; a NET connection proves the other node exists.
        spans = (f"spans {nodes} nodes" if nodes > 1 else
                 "spans more than one node (this log shows the ranks of 1 host; its NET connections reach ranks on "
                 "another)" if nodes == 1 else
                 "spans more than one node (its NET connections reach ranks on another host)")
        yield Finding(
            id="nccl-multinode-socket",
            severity="warn",
            subjects=[_subject_run(run)],
            title=f"traffic between nodes uses NET/Socket (TCP){because.split(';')[0] if why else ''}",
            explanation=(
                f"{_run_label(run)} {spans} and NCCL sends inter-node data over TCP "
                f"sockets{because}. Sockets reach a few GB/s at best and load the CPUs; RDMA (InfiniBand/RoCE, or a "
                "cloud plugin such as EFA) is what multi-node training and serving need."
            ),
            evidence=list(dict.fromkeys(evidence))[:6],
            remedy=(
                "Make the RDMA NICs visible to the job: install rdma-core/libibverbs in the image, pass /dev/infiniband "
                "into the container, unset NCCL_IB_DISABLE, check `ibv_devinfo` shows ports ACTIVE; on AWS/GCP load "
                "the provider's NCCL net plugin (aws-ofi-nccl, gIB/TCPXO)."
            ),
            causes=causes,
            confirm_with="ibv_devinfo; ls /dev/infiniband; " + NCCL_DEBUG_HINT + " all_reduce_perf (look for NET/IB)",
            data={"nodes": run.nodes, "socket_connections": len(socket_conns)},
        )


# -- nccl-gdrdma-not-used ----------------------------------------------------------------------


def check_gdrdma_not_used(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    for run in machine.nccl:
        ib = [c for c in run.connections if c.transport == "NET" and (c.net_name or "").lower().startswith("ib")]
        if not ib or any(c.gdrdma for c in ib):
            continue
        reasons = []
        evidence = [c.source for c in ib[:2] if c.source is not None]
        no_module = [g for g in run.gdr if not g.enabled and g.reason and "module" in g.reason]
        if no_module:
            reasons.append("NCCL says the GPUDirect RDMA kernel module is not loaded (nvidia-peermem)")
            evidence.extend(g.source for g in no_module[:2] if g.source)
        near_paths = [p for p in run.paths if p.path_type in ("PIX", "PXB")
                      and {p.src.split("/")[0], p.dst.split("/")[0]} == {"GPU", "NET"}]
        if near_paths:
            reasons.append(f"NCCL rates a GPU-NIC path {near_paths[0].path_type} (behind one PCIe switch)")
            if near_paths[0].source:
                evidence.append(near_paths[0].source)
        near_links = [l for l in machine.links if l.path in ("PIX", "PXB")
                      and (l.a.startswith("GPU") != l.b.startswith("GPU"))]
        if near_links:
            reasons.append(f"{near_links[0].a} and {near_links[0].b} share a PCIe switch ({near_links[0].path})")
            if near_links[0].source:
                evidence.append(near_links[0].source)
        if _env_is(run, "NCCL_NET_GDR_LEVEL", "LOC", "0"):
            reasons.append("NCCL_NET_GDR_LEVEL disables it")
        if not reasons:
            continue
        yield Finding(
            id="nccl-gdrdma-not-used",
            severity="warn",
            subjects=[_subject_run(run)],
            title="InfiniBand/RoCE traffic is staged through host memory (no GDRDMA) although a NIC is near the GPUs",
            explanation=(
                f"{counted(len(ib), 'NET/IB connection')} of {_run_label(run)} {'lacks' if len(ib) == 1 else 'lack'} `/GDRDMA`: every transfer is copied GPU -> "
                "host memory -> NIC. " + "; ".join(reasons) + ". With the NIC behind the same PCIe switch as the "
                "GPU, GPUDirect RDMA avoids the host round trip and typically doubles inter-node bandwidth."
            ),
            evidence=list(dict.fromkeys(evidence))[:6],
            remedy=("Load the peer-memory module (`modprobe nvidia-peermem`, or use DMA-BUF with a recent kernel and "
                    "driver), check ACS is off on the switch between GPU and NIC, and remove NCCL_NET_GDR_LEVEL "
                    "overrides; then look for `via NET/IB/x/GDRDMA` in the log."),
            confirm_with="lsmod | grep -E 'nvidia_peermem|nv_peer_mem'; " + NCCL_DEBUG_HINT + " all_reduce_perf",
            data={"ib_connections": len(ib)},
        )


# -- nccl-warnings -----------------------------------------------------------------------------



def _warnings_and_traces(warnings: int, traces: int) -> str:
    """`3 distinct warnings and 1 error trace`; a trace is not a warning, and a count of none is not said."""
    parts = ([counted(warnings, "distinct warning")] if warnings else []) + \
        ([counted(traces, "error trace")] if traces else [])
    return " and ".join(parts)


def check_warnings(machine: Machine, earlier: list[Finding]) -> Iterable[Finding]:
    reported: set[tuple] = set()
    for run in machine.nccl:
        # root causes with a finding of their own (nccl_causes, the AMD IOMMU rule) are not listed again
        messages = [m for m in run.messages if (m.level, m.file, m.line_no, m.text) not in reported
                    and not claimed(m, run)]
        if not messages:
            continue
        for m in messages:
            reported.add((m.level, m.file, m.line_no, m.text))
        errors = [m for m in messages if m.level == "ERROR"]
        listing = "; ".join(
            f"{(m.file + ':' + str(m.line_no) + ' ') if m.file else ''}{m.text}" + (f" (x{m.count})" if m.count > 1 else "")
            for m in messages[:6]
        )
        more = f" and {len(messages) - 6} more" if len(messages) > 6 else ""
        yield Finding(
            id="nccl-warnings",
            severity="warn",
            subjects=[_subject_run(run)],
            title="NCCL printed " + _warnings_and_traces(len(messages) - len(errors), len(errors)),
            explanation=(
                f"{_run_label(run)}: {listing}{more}. NCCL WARN lines mark conditions NCCL could work around only "
                "partly (or not at all); error traces (`file.cc:line -> code`) show where an init or transfer failed."
            ),
            evidence=[m.source for m in messages[:6] if m.source is not None],
            remedy=("Read each warning with its NCCL source location; the usual ones: IB completion errors (link or "
                    "switch problem), socket connection closed (a peer died or a firewall), missing iommu=pt or "
                    "HSA_FORCE_FINE_GRAIN_PCIE (RCCL), 'Could not find a path' (topology NCCL cannot use)."),
            confirm_with=f"grep -n 'NCCL WARN' {run.input or 'job.log'} | sort | uniq -c | sort -rn | head",
            data={"messages": [m.to_json() for m in messages[:50]]},
        )


RULES = (
    Rule("nccl-env-disables-transport", "warn", "An NCCL setting turns a transport off", check_env_disables_transport,
         kind="misconfiguration"),
    Rule("nccl-p2p-disabled-between-connected", "warn", "NCCL: P2P disabled between connected GPUs",
         check_p2p_disabled_between_connected, kind="misconfiguration"),
    Rule("nccl-same-host-pair-not-p2p", "warn", "Two GPUs of one host do not use P2P", check_same_host_pair_not_p2p,
         kind="fault"),
    Rule("nccl-multinode-socket", "warn", "Multi-node NCCL traffic over TCP sockets", check_multinode_socket,
         kind="misconfiguration"),
    Rule("nccl-gdrdma-not-used", "warn", "InfiniBand without GPUDirect RDMA", check_gdrdma_not_used,
         kind="misconfiguration"),
    Rule("nccl-warnings", "warn", "NCCL warnings and errors", check_warnings, kind="fault"),
)
