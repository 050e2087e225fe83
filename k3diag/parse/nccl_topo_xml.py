"""NCCL topology XML (`NCCL_TOPO_DUMP_FILE` output, or a `NCCL_TOPO_FILE` a cloud image ships).

    <system version="1">
      <cpu numaid="0" affinity="..." arch="x86_64" vendor="AuthenticAMD" ...>
        <pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16">
          <gpu dev="0" sm="80" rank="0" gdr="1">
            <nvlink target="0002:00:00.0" count="12" tclass="0x030200"/>
          </gpu>
        </pci>
        <nic><net name="mlx5_0" dev="0" speed="200000" port="1" gdr="1"/></nic>
      </cpu>
    </system>

NCCL records the *maximum* link speed and width of each PCI device, not the current one, so
they are kept as such. A `<pci>` with a GPU class (0x0302xx/0x0300xx) but no `<gpu>` child is
a GPU NCCL was told about by bus id only (cloud images ship such files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k3diag.model.source import SourceRef
from k3diag.parse.ids import normalize_bdf

START_RE = re.compile(r"^\s*<system version=")
_GEN_BY_SPEED = {"2.5": 1, "5": 2, "5.0": 2, "8": 3, "8.0": 3, "16": 4, "16.0": 4, "32": 5, "32.0": 5, "64": 6, "64.0": 6}


@dataclass
class TopoGpu:
    dev: int | None
    bus_id: str | None
    numa: int | None
    rank: int | None = None
    sm: int | None = None
    gdr: bool | None = None
    link_gen: int | None = None  # from the max link speed NCCL recorded
    link_width: int | None = None
    nvlinks: list[tuple[str, int]] = field(default_factory=list)  # (target bus id, count)
    source: SourceRef | None = None
    # The PCI bridges (switch ports) NCCL placed above the GPU, from the CPU down: two GPUs under one CPU
    # with no bridge in common meet at the host bridge (PHB).
    pci_path: list[str] = field(default_factory=list)
    # What a hypervisor shows instead of a link: `link_width="0"`, `link_speed=""` (as printed), and
    # `numaid="-1"` on the CPU above it.
    hidden_link: bool = False
    numa_unknown: bool = False
    link_source: SourceRef | None = None  # the `<pci ... link_width=...>` line above the GPU


@dataclass
class TopoNic:
    name: str
    dev: int | None
    numa: int | None
    speed_mbps: int | None
    gdr: bool | None
    bus_id: str | None
    source: SourceRef | None = None


@dataclass
class NcclTopoXmlResult:
    gpus: list[TopoGpu] = field(default_factory=list)
    nics: list[TopoNic] = field(default_factory=list)
    cpus: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sniff(text: str) -> float:
    head = text[:100_000]
    if "<system" in head and ("<cpu" in head or "<pci busid" in head) and "version=" in head:
        return 0.95
    return 0.0


def parse(section, input_name: str) -> NcclTopoXmlResult:
    import xml.etree.ElementTree as ElementTree

    result = NcclTopoXmlResult()
    text = section.text
    start = text.find("<system")
    end = text.rfind("</system>")
    if start < 0 or end < 0:
        result.warnings.append("no <system> ... </system> element found; the XML is incomplete")
        return result
    body = text[start : end + len("</system>")]
    first_line = section.first_line + text[:start].count("\n")
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        result.warnings.append(f"the topology XML does not parse ({exc}); nothing was read from it")
        return result
    lines = body.split("\n")

    def source_for(tag: str, attr: str, value: str) -> SourceRef | None:
        needle = f'{attr}="{value}"'
        for index, line in enumerate(lines):
            if f"<{tag}" in line and needle in line:
                return SourceRef(input_name, first_line + index, line.strip())
        return None

    def walk(node, numa: int | None, pci: dict | None, chain: tuple[str, ...] = ()) -> None:
        for child in node:
            if child.tag == "cpu":
                cpu_numa = _int(child.get("numaid"))
                result.cpus.append({"numa": cpu_numa, "affinity": child.get("affinity"),
                                    "vendor": child.get("vendor"), "arch": child.get("arch")})
                walk(child, cpu_numa, None, ())
            elif child.tag == "pci":
                info = {"busid": child.get("busid"), "class": child.get("class") or "",
                        "speed": child.get("link_speed"), "width": child.get("link_width")}
                has_gpu = any(grand.tag == "gpu" for grand in child)
                if not has_gpu and info["class"].startswith(("0x0302", "0x0300")) and info["busid"]:
                    bdf = normalize_bdf(info["busid"])
                    result.gpus.append(TopoGpu(dev=None, bus_id=bdf, numa=numa, link_gen=_gen(info["speed"]),
                                               link_width=_int(info["width"]) or None,
                                               source=source_for("pci", "busid", info["busid"]),
                                               pci_path=list(chain), hidden_link=_hidden(info),
                                               numa_unknown=numa is not None and numa < 0))
                below = chain + (normalize_bdf(info["busid"]),) if info["busid"] and not has_gpu else chain
                walk(child, numa, info, below)
            elif child.tag == "gpu":
                bus = pci.get("busid") if pci else None
                gpu = TopoGpu(
                    dev=_int(child.get("dev")),
                    bus_id=normalize_bdf(bus) if bus else None,
                    numa=numa,
                    rank=_int(child.get("rank")),
                    sm=_int(child.get("sm")),
                    gdr=child.get("gdr") == "1" if child.get("gdr") is not None else None,
                    link_gen=_gen(pci.get("speed")) if pci else None,
                    link_width=(_int(pci.get("width")) or None) if pci else None,
                    source=source_for("gpu", "dev", child.get("dev", "")),
                    pci_path=list(chain),
                    hidden_link=_hidden(pci) if pci else False,
                    numa_unknown=numa is not None and numa < 0,
                    link_source=source_for("pci", "busid", bus) if bus else None,
                )
                for link in child:
                    if link.tag == "nvlink" and link.get("target"):
                        gpu.nvlinks.append((normalize_bdf(link.get("target")), _int(link.get("count")) or 0))
                result.gpus.append(gpu)
            elif child.tag == "nic":
                for net in child:
                    if net.tag != "net":
                        continue
                    result.nics.append(TopoNic(
                        name=net.get("name") or "",
                        dev=_int(net.get("dev")),
                        numa=numa,
                        speed_mbps=_int(net.get("speed")),
                        gdr=net.get("gdr") == "1" if net.get("gdr") is not None else None,
                        bus_id=normalize_bdf(pci["busid"]) if pci and pci.get("busid") else None,
                        source=source_for("net", "name", net.get("name", "")),
                    ))
            else:
                walk(child, numa, pci, chain)

    walk(root, None, None)
    if not result.gpus and not result.nics:
        result.warnings.append("the topology XML names no GPU and no NIC")
    return result


def _int(value) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(str(value), 0)
    except ValueError:
        return None


def _gen(speed: str | None) -> int | None:
    if not speed:
        return None
    match = re.match(r"\s*([\d.]+)\s*GT/s", speed)
    return _GEN_BY_SPEED.get(match.group(1)) if match else None


def _hidden(pci: dict) -> bool:
    """`link_width="0"` or an empty `link_speed`: the hypervisor hides the link NCCL would read."""
    return (pci.get("width") or "").strip() == "0" or (pci.get("speed") is not None and not pci.get("speed").strip())
