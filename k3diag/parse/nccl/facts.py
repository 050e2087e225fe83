"""The handlers of NCCL lines that state a fact of the whole log (not of one communicator instance):
environment, network, GPU Direct RDMA, DMA-BUF, disabled P2P, graph patterns, channel counts, MNNVL
health, NVLS support, topology paths, warnings.
"""

from __future__ import annotations

from k3diag.model.nccl import (
    NcclChannelCounts,
    NcclCollNetConnection,
    NcclDmaBuf,
    NcclGdr,
    NcclGraph,
    NcclMessage,
    NcclMnnvlHealth,
    NcclNvlsSupport,
    NcclP2PDisabled,
    NcclPath,
)
from k3diag.parse.ids import bdf_from_nccl_busid
from k3diag.parse.nccl import patterns as P


class FactHandlers:
    """Mixin of `NcclLogParser`: one handler per kind of log-wide fact line."""

    def _env(self, raw: str, body: str, lineno: int) -> None:
        match = P.ENV_RE.match(body)
        if not match:
            return
        name = match.group("name")
        value = match.group("value").strip()
        if value.endswith(".") and value[:-1].replace("-", "").isdigit():
            value = value[:-1]
        if name in self.env:
            if self.env[name] != value:
                self.env_conflicts.setdefault(name, {self.env[name]}).add(value)
            return
        if not self._room(self.env, P.MAX_ENV, "env", name):
            return
        self.env[name] = value
        self.env_sources[name] = self._source(lineno, raw)

    def _net(self, raw: str, body: str, pre: str, lineno: int) -> None:
        net = self.net
        if body.startswith("Failed to open libibverbs") or "Failed to open libibverbs" in body[:40]:
            net.ibverbs_missing = True
            self._net_source(lineno, raw)
            return
        if "No device found" in body and body.startswith("NET/IB"):
            net.ib_not_found = True
            self._net_source(lineno, raw)
            return
        match = P.USING_NETWORK_RE.match(body)
        if match:
            if net.network is None:
                net.network = match.group("name")
                # the first such line is the evidence; kept apart from the lines each occurrence adds so
                # that a part of a file cut for parallel parsing can be merged as one pass reads it
                self.net_first["network"] = self._source(lineno, raw)
            return
        match = P.NET_USING_RE.match(body)
        if match:
            bucket = net.ib_devices if match.group("kind") == "IB" else net.socket_devices
            for dev in P.NET_DEVICE_RE.findall(match.group("devs")):
                if dev not in bucket and self._room(bucket, P.MAX_NET_DEVICES, "net_devices",
                                                    (match.group("kind"), dev)):
                    bucket.append(dev)
            return
        if body.startswith("NET/Plugin"):
            loaded = P.NET_PLUGIN_LOADED_RE.search(body)
            if loaded and net.plugin is None and loaded.group("name").strip():
                net.plugin = loaded.group("name").strip()
                self.net_first["plugin"] = self._source(lineno, raw)
            return
        if "GPU Direct RDMA" in body:
            self._gdr(raw, body, pre, lineno)

    def _net_source(self, lineno: int, raw: str) -> None:
        if len(self.net.sources) < 20:
            self.net.sources.append(self._source(lineno, raw))

    def _gdr(self, raw: str, body: str, pre: str, lineno: int) -> None:
        host = self._thread(pre).host
        match = P.GDR_GPU_RE.search(body)
        if match:
            key = (host, match.group("gpu").lower(), match.group("hca"), match.group("state"))
            if key not in self.gdr and self._room(self.gdr, P.MAX_GDR, "gdr", key):
                self.gdr[key] = NcclGdr(enabled=match.group("state") == "Enabled",
                                        gpu_bus_id=bdf_from_nccl_busid(match.group("gpu")), hca=match.group("hca"),
                                        reason=match.group("why"), host=host, source=self._source(lineno, raw))
            return
        match = P.GDR_HCA_RE.search(body)
        if match:
            key = (host, None, match.group("name"), match.group("state"))
            if key not in self.gdr and self._room(self.gdr, P.MAX_GDR, "gdr", key):
                self.gdr[key] = NcclGdr(enabled=match.group("state") == "Enabled", gpu_bus_id=None,
                                        hca=match.group("name"), reason=match.group("why"), host=host,
                                        source=self._source(lineno, raw), hca_index=int(match.group("hca")))

    def _dmabuf(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.DMABUF_RE.search(body)
        if not match:
            return
        host = self._thread(pre).host
        state = match.group("state").lower()
        key = (host, match.group("gpu"), match.group("name"), state)
        if key not in self.dmabuf and self._room(self.dmabuf, P.MAX_DMABUF, "dmabuf", key):
            self.dmabuf[key] = NcclDmaBuf(
                enabled=not state.startswith("not") and state != "disabled",
                hca=match.group("name"), gpu=int(match.group("gpu")) if match.group("gpu") else None,
                host=host, source=self._source(lineno, raw))

    def _p2p_disabled(self, raw: str, body: str, pre: str, lineno: int, nvlink: bool) -> None:
        match = P.P2P_DISABLED_RE.search(body)
        if not match:
            return
        host = self._thread(pre).host
        a, b = int(match.group("a")), int(match.group("b"))
        key = (host, min(a, b), max(a, b), bool(match.group("nvl")) or nvlink)
        if key not in self.p2p_disabled and self._room(self.p2p_disabled, P.MAX_P2P_DISABLED, "p2p_disabled", key):
            self.p2p_disabled[key] = NcclP2PDisabled(a, b, key[3], host, self._source(lineno, raw))

    def _pattern(self, raw: str, body: str, lineno: int) -> None:
        match = P.PATTERN_RE.match(body)
        if not match:
            return
        key = match.groups()
        if key in self.graphs or not self._room(self.graphs, P.MAX_GRAPHS, "graphs", key):
            return
        self.graphs[key] = NcclGraph(
            pattern=int(match.group("pattern")), cross_nic=int(match.group("cross")),
            n_channels=int(match.group("nch")), bw_intra=float(match.group("bw1")),
            bw_inter=float(match.group("bw2")), type_intra=match.group("t1"), type_inter=match.group("t2"),
            same_channels=int(match.group("same")), source=self._source(lineno, raw))

    def _channel_counts(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.CHANNEL_COUNTS_RE.match(body)
        if not match:
            return
        host = self._thread(pre).host
        nvls = int(match.group("nvls")) if match.group("nvls") is not None else None
        collnet = int(match.group("collnet")) if match.group("collnet") is not None else None
        key = (host, int(match.group("coll")), collnet, nvls, int(match.group("p2p")))
        if key not in self.channel_counts and self._room(self.channel_counts, P.MAX_SMALL_TABLE, "channel_counts", key):
            self.channel_counts[key] = NcclChannelCounts(coll=key[1], collnet=collnet, nvls=nvls, p2p=key[4],
                                                         host=host, source=self._source(lineno, raw))

    def _mnnvl_health(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.HEALTH_MASK_RE.search(body)
        if not match:
            return
        host = self._thread(pre).host
        key = (host, match.group("mask").lower())
        if key not in self.mnnvl_health and self._room(self.mnnvl_health, P.MAX_SMALL_TABLE, "mnnvl_health", key):
            self.mnnvl_health[key] = NcclMnnvlHealth(mask=key[1], host=host, source=self._source(lineno, raw))

    def _nvls_support(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.NVLS_SUPPORT_RE.match(body)
        if not match:
            return
        host = self._thread(pre).host
        key = (host, match.group("dev"), match.group("not") is None)
        if key not in self.nvls_support and self._room(self.nvls_support, P.MAX_SMALL_TABLE, "nvls_support", key):
            self.nvls_support[key] = NcclNvlsSupport(available=key[2], gpu=int(key[1]) if key[1].isdigit() else None,
                                                     host=host, source=self._source(lineno, raw))

    def _collnet(self, raw: str, body: str, pre: str, lineno: int) -> None:
        match = P.COLLNET_RE.match(body)
        if not match:
            return
        host = self._thread(pre).host
        key = (host, int(match.group("ch")), int(match.group("rank")), match.group("dir"), match.group("via"))
        if key not in self.collnet and self._room(self.collnet, P.MAX_SMALL_TABLE, "collnet", key):
            self.collnet[key] = NcclCollNetConnection(channel=key[1], rank=key[2], direction=key[3], via=key[4],
                                                      host=host, source=self._source(lineno, raw))

    def _path(self, raw: str, body: str, pre: str, lineno: int) -> None:
        head = P.PATH_HEAD_RE.match(body)
        if not head:
            return
        host = self._thread(pre).host
        src = head.group("node")
        source = None
        for item in P.PATH_ITEM_RE.finditer(head.group("rest")):
            dst = item.group("node")
            if dst == src:
                continue
            key = (host, src, dst)
            if key in self.paths or not self._room(self.paths, P.MAX_PATHS, "paths", key):
                continue
            if source is None:
                source = self._source(lineno, raw)
            self.paths[key] = NcclPath(src=src, dst=dst, hops=int(item.group("hops")), bw=float(item.group("bw")),
                                       path_type=item.group("type"), src_bus_id=_node_bus_id(src),
                                       dst_bus_id=_node_bus_id(dst), host=host, source=source)

    def _warn(self, raw: str, body: str, pre: str, lineno: int) -> None:
        header = pre[-P.MAX_HEADER_CHARS:]
        match = P.PREFIX_RE.search(header) or P.PREFIX_NOPID_RE.search(header)
        src_file = match.group("file") if match else None
        src_line = int(match.group("fline")) if match and match.group("fline") else None
        if src_file and ("rccl" in src_file or "hipify" in src_file):
            self.rccl_hints += 1
        if body.startswith("P2P is disabled"):
            self._p2p_disabled(raw, body, pre, lineno, nvlink=True)
        if "Failed to open libibverbs" in body:
            self.net.ibverbs_missing = True
            self._net_source(lineno, raw)
        self._message("WARN", body, src_file, src_line, raw, lineno)

    def _message(self, level: str, text: str, src_file: str | None, src_line: int | None, raw: str,
                 lineno: int) -> None:
        key = (level, src_file, src_line, text)
        msg = self.messages.get(key)
        if msg is not None:
            msg.count += 1
            return
        if not self._room(self.messages, P.MAX_MESSAGES, "messages", key):
            return
        self.messages[key] = NcclMessage(level, text, src_file, src_line, 1, self._source(lineno, raw))


def _node_bus_id(node: str) -> str | None:
    kind, _, ident = node.partition("/")
    if kind != "GPU":
        return None
    if "-" in ident:
        ident = ident.split("-", 1)[1]
    return bdf_from_nccl_busid(ident)
