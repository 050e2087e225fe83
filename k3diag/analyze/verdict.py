"""The one line a user reads first, and the exit code CI gates on.

Three values throughout: a path, a P2P status, a TP size is known good, known bad, or unknown, and unknown
never reads as slow. The verdict leads with the most important problem when there is one (a fault is named
before any advice), then says what the machine is good for, and when it cannot tell, what is missing and the
exact command that would settle it (`missing`). The exit code follows `k3diag.exit_codes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k3diag.analyze.finding import SEVERITY_ORDER, Finding
from k3diag.exit_codes import EXIT_FAIL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARN
from k3diag.model.machine import Machine
from k3diag.model.source import quoted_aside
from k3diag.model.words import counted
from k3diag.model.topology import nvlink_count

EXIT_NOTHING = EXIT_UNKNOWN  # the name earlier callers imported
STATUS_BY_EXIT = {EXIT_OK: "ok", EXIT_WARN: "warn", EXIT_FAIL: "fail", EXIT_UNKNOWN: "unknown"}

# Path classes, as the verdict speaks of them. "fast": TP inside the group costs little.
FAST, FAIR, SLOW, UNKNOWN = "fast", "fair", "slow", "unknown"
_FAST_PATHS = {"PIX", "PSB", "PXB", "XGMI"}
_FAIR_PATHS = {"PHB", "NODE", "PCIE"}
_SLOW_PATHS = {"SYS", "SOC"}

TOPO_COMMAND = "nvidia-smi topo -m"
AMD_TOPO_COMMAND = "amd-smi topology || rocm-smi --showtopo"  # one runnable line: older ROCm has only rocm-smi


@dataclass
class Verdict:
    """The one-line answer of a report: how good the machine is, its exit status, what is missing."""

    level: str  # good | usable | poor | faulty | unknown | none
    text: str
    best_tp: int | None
    status: str = "ok"  # ok | warn | fail | unknown: the default exit code in words
    lead: str | None = None  # key of the finding the verdict names first
    missing: list[dict] = field(default_factory=list)  # [{what, command}]: what it cannot know, how to learn it
    plan: dict | None = None  # {tp, groups, replicas, path}: the grouping the verdict recommends

    def to_json(self) -> dict:
        return {"level": self.level, "text": self.text, "best_tp": self.best_tp, "status": self.status,
                "lead": self.lead, "missing": list(self.missing), "plan": self.plan}


# -- the exit code --------------------------------------------------------------------------------------


def exit_code_for(machine: Machine, findings: list[Finding], fail_on: str = "warn") -> int:
    """0 ok, 1 warnings, 2 failures, 3 cannot be judged (k3diag.exit_codes). A machine on which GPUs were
    looked for and none was found cannot pass: it is unknown unless a failure (a hung nvidia-smi) explains it."""
    if not machine.analyzable:
        return EXIT_UNKNOWN
    if fail_on == "never":
        return EXIT_OK
    if any(f.severity == "fail" for f in findings):
        return EXIT_FAIL
    if any(f.id == "no-gpu-found" for f in findings):
        return EXIT_UNKNOWN
    if fail_on == "warn" and any(f.severity == "warn" for f in findings):
        return EXIT_WARN
    return EXIT_OK


# -- which finding leads -------------------------------------------------------------------------------


def lead_finding(findings: list[Finding]) -> Finding | None:
    """The most important problem: failures before warnings, a root cause (one that explains others and is
    explained by none) before its effects, then the one that explains the most."""
    problems = [f for f in findings if f.severity in ("fail", "warn")]
    if not problems:
        return None
    explained = {cause for f in findings for cause in f.causes}
    explains: dict[str, int] = {}
    for f in findings:
        for cause in f.causes:
            explains[cause] = explains.get(cause, 0) + 1

    def rank(item: tuple[int, Finding]) -> tuple:
        order, finding = item
        is_effect = finding.key in explained and any(
            c.key == cause and c.severity in ("fail", "warn") for c in problems for cause in finding.causes)
        return (SEVERITY_ORDER.get(finding.severity, 9), is_effect, -explains.get(finding.key, 0), order)

    return min(enumerate(problems), key=rank)[1]


def problem_tally(findings: list[Finding]) -> str:
    """Counts problems, not pairs: one line per kind of problem (a rule id), at its worst severity."""
    worst: dict[str, str] = {}
    for f in findings:
        if f.severity in ("fail", "warn"):
            held = worst.get(f.id)
            if held is None or SEVERITY_ORDER[f.severity] < SEVERITY_ORDER[held]:
                worst[f.id] = f.severity
    fails = sum(1 for s in worst.values() if s == "fail")
    warns = sum(1 for s in worst.values() if s == "warn")
    if not worst:
        return "no problems found"
    parts = [counted(n, word) for n, word in ((fails, "failure"), (warns, "warning")) if n]
    return " and ".join(parts)


# -- path classes ----------------------------------------------------------------------------------------


def path_class(path: str | None, p2p_ok: bool | None = None, same_numa: bool | None = None,
               nvlink_unknown: bool = False) -> str:
    if path is None or nvlink_unknown:
        return UNKNOWN
    if (nvlink_count(path) or 0) > 0 or path in _FAST_PATHS:
        return FAST if p2p_ok is not False or (nvlink_count(path) or 0) > 0 else SLOW
    if p2p_ok is False:
        return SLOW
    if path == "PCIE" and same_numa is False:
        return SLOW
    if path in _FAIR_PATHS:
        return FAIR
    if path in _SLOW_PATHS:
        return SLOW
    return UNKNOWN


_CLASS_ORDER = {FAST: 0, FAIR: 1, SLOW: 2, UNKNOWN: 3}


def _group_view(rec: Any, size: int, index: int, group: list[int]) -> tuple[str, str | None, tuple[int, int] | None]:
    """A group's class and the path that decides it. An all-NVLink ring (DGX-1 hybrid cube mesh) decides by
    the ring all-reduce's slowest link, not by the group's worst pair."""
    pairs = [(min(a, b), max(a, b)) for x, a in enumerate(group) for b in group[x + 1:]]
    qualities = [(pair, rec.pairs[pair]) for pair in pairs if pair in rec.pairs]
    if not qualities:
        return UNKNOWN, None, None
    if any(pq.path is None and not pq.measured for _, pq in qualities):
        unknown_pair = next(pair for pair, pq in qualities if pq.path is None and not pq.measured)
        return UNKNOWN, None, unknown_pair
    if any(pq.nvlink_unknown for _, pq in qualities):
        pair, pq = next((pair, pq) for pair, pq in qualities if pq.nvlink_unknown)
        return UNKNOWN, pq.path, pair
    rings = (getattr(rec, "group_ring", {}) or {}).get(size) or []
    if index < len(rings) and rings[index][0] is not None and (nvlink_count(rings[index][0]) or 0) > 0:
        return FAST, rings[index][0], None
    worst_pair, worst = max(qualities, key=lambda item: (
        _CLASS_ORDER[path_class(item[1].path, item[1].p2p_ok, item[1].same_numa)], -(item[1].bandwidth_gbs or 0)))
    return path_class(worst.path, worst.p2p_ok, worst.same_numa), worst.path, worst_pair


def _size_view(rec: Any, size: int) -> tuple[str, str | None, tuple[int, int] | None, list[str]]:
    groups = rec.groups.get(size) or []
    views = [_group_view(rec, size, i, g) for i, g in enumerate(groups)]
    if not views:
        return UNKNOWN, None, None, []
    worst = max(views, key=lambda v: _CLASS_ORDER[v[0]])
    return worst[0], worst[1], worst[2], [v[0] for v in views]


# -- the sentence ------------------------------------------------------------------------------------------


def _fmt_group(group: list[int]) -> str:
    return "{" + ",".join(str(i) for i in group) + "}"


def _fmt_groups(groups: list[list[int]]) -> str:
    return " ".join(_fmt_group(g) for g in groups)


def _gpu_list(indices: list[int]) -> str:
    names = [f"GPU{i}" for i in indices]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _replicas(leftover: list[int]) -> str:
    if not leftover:
        return ""
    return f", {_gpu_list(leftover)} as {'a replica' if len(leftover) == 1 else 'replicas'} (data parallelism)"


def _plan(rec: Any, size: int, path: str | None) -> dict:
    return {"tp": size, "groups": rec.groups.get(size) or [], "replicas": (rec.leftover or {}).get(size) or [],
            "path": path}


def _amd(machine: Machine) -> bool:
    vendors = {(gpu.vendor or "").upper() for gpu in machine.gpus.values()}
    return "AMD" in vendors and "NVIDIA" not in vendors


def _p2p_summary(machine: Machine) -> str:
    data = [s for s in machine.p2p if s.capability in ("read", "write", "unknown", "pcie") and s.src != s.dst]
    if not data:
        return ""
    if all(s.status == "OK" for s in data):
        return " P2P works between every pair the P2P matrix shows."
    return ""


def _tp_judgement(machine: Machine, rec: Any) -> tuple[str, str, int | None, list[dict], dict | None]:
    """(level, sentence, best TP size, missing, plan) from the planner's recommendation."""
    count = len(rec.gpus)
    topo = AMD_TOPO_COMMAND if _amd(machine) else TOPO_COMMAND
    missing: list[dict] = []
    sizes = sorted(rec.groups)
    if rec.unknown_pairs and len(rec.unknown_pairs) == len(rec.pairs):
        missing.append({"what": f"the paths between the {count:,} GPUs", "command": topo})
        return (UNKNOWN, f"{count:,} GPUs, but the paths between them are not in these inputs, so no TP size can be "
                f"judged: `{topo}` shows them.{_p2p_summary(machine)}", None, missing, None)
    if rec.unknown_pairs:
        gpus = sorted({i for pair in rec.unknown_pairs for i in pair})
        missing.append({"what": f"the paths of {counted(len(rec.unknown_pairs), 'GPU pair')} (involving {_gpu_list(gpus)})",
                        "command": topo})
        seen = getattr(rec, "seen", None)
        if seen is not None:  # advise on what was seen only
            level, sentence, best, _, plan = _tp_judgement(machine, seen)
            unseen = [i for i in rec.gpus if i not in seen.gpus]
            sentence = (f"Of the GPUs whose links to each other were all seen ({_gpu_list(seen.gpus)}): {sentence[0].lower()}"
                        f"{sentence[1:]} {_gpu_list(unseen)}: links not fully seen.")
            return level, sentence, best, missing, plan
    if rec.nvlink_unknown:
        missing.append({"what": "whether NVLink joins the GPUs (`nvidia-smi topo -mp` prints PCIe paths only)",
                        "command": "nvidia-smi topo -m; nvidia-smi nvlink --status"})
        if all(pq.nvlink_unknown or pq.path is None for pq in rec.pairs.values()):
            return (UNKNOWN, f"{count} GPUs; these inputs show only their PCIe paths (`nvidia-smi topo -mp` hides "
                    "NVLink by design), so whether TP is NVLink-fast or PCIe-bound is unknown: `nvidia-smi topo -m` "
                    "or `nvidia-smi nvlink --status` tells.", None, missing, None)
    views = {size: _size_view(rec, size) for size in sizes}
    if rec.uniform:
        size = max(sizes)
        return ("good", f"Good for tensor parallelism up to TP{size}: every GPU pair is joined by {rec.uniform} "
                "(NVSwitch or a full mesh), so any grouping is as fast; choose the TP size by memory.",
                size, missing, _plan(rec, size, rec.uniform))
    fast_sizes = [s for s in sizes if all(c == FAST for c in views[s][3])]
    full = [s for s in fast_sizes if not (rec.leftover or {}).get(s)]
    if fast_sizes:
        best = max(fast_sizes)
        cls, path, _, _ = views[best]
        groups = rec.groups[best]
        ring = (getattr(rec, "group_ring", {}) or {}).get(best) or []
        ring_text = ""
        worst_pair_path = _worst_pair_path(rec, best)
        if ring and best > 2 and ring[0][0] and nvlink_count(ring[0][0]) and not nvlink_count(worst_pair_path):
            ring_text = (f" (all-reduce rings run over NVLink, slowest ring link {ring[0][0]}, although some GPU "
                         f"pairs in a group are {worst_pair_path})")
        larger = [s for s in sizes if s > best]
        if best == max(sizes) and best in full:
            body = (f"{_fmt_groups(groups)} all-reduce over NVLink{ring_text}" if ring_text else
                    f"{_fmt_groups(groups)} keep every all-reduce on {path or 'fast'} links")
            return ("good", f"Good for tensor parallelism up to TP{best}: {body}.", best, missing,
                    _plan(rec, best, path))
        beyond = ""
        if larger:
            cls_l, path_l, pair_l, _ = views[larger[0]]
            if cls_l == UNKNOWN:
                beyond = f"; TP{larger[0]} cannot be judged (a path inside its groups is unknown)"
            else:
                between = f" between GPU{pair_l[0]} and GPU{pair_l[1]}" if pair_l else ""
                beyond = f"; TP{larger[0]} would cross {path_l}{between} and be paced by it"
        return ("usable", f"Serve with TP{best} on {_fmt_groups(groups)}{_replicas(rec.leftover.get(best) or [])}"
                f"{ring_text}{beyond}.", best, missing, _plan(rec, best, path))
    smallest = sizes[0]
    cls, path, pair, classes = views[smallest]
    groups = rec.groups[smallest]
    good = [g for g, c in zip(groups, classes) if c == FAST]
    if smallest == 2:  # fast pairs the partition of all GPUs had to break up still make TP2 groups
        used = {i for g in good for i in g}
        fast_pairs = sorted(((pair, pq) for pair, pq in rec.pairs.items()
                             if path_class(pq.path, pq.p2p_ok, pq.same_numa, pq.nvlink_unknown) == FAST),
                            key=lambda item: -(item[1].bandwidth_gbs or 0))
        for (a, b), _ in fast_pairs:
            if a not in used and b not in used:
                good.append([a, b])
                used |= {a, b}
        good.sort()
    if good:
        replicas = sorted(set(rec.gpus) - {i for g in good for i in g})
        return ("usable", f"Only part of this host pairs well: TP{smallest} on {_fmt_groups(good)}"
                f"{_replicas(replicas)}.", smallest,
                missing, {"tp": smallest, "groups": good, "replicas": replicas, "path": None})
    if cls == UNKNOWN:
        return (UNKNOWN, f"{count} GPUs; the links inside every TP{smallest} grouping include a pair these inputs do "
                f"not show, so no TP size can be judged: `{topo}` shows them.", None, missing, None)
    fair_sizes = [s for s in sizes if all(c in (FAST, FAIR) for c in views[s][3])]
    if fair_sizes:
        size = max(fair_sizes)
        worst = views[size][1]
        return ("usable", f"Tensor parallelism up to TP{size} works but goes through the CPU's PCIe root complex "
                f"({worst}): all-reduces are PCIe-bound, so prefer the smallest TP size the model fits and replicas "
                f"for the rest.", size, missing, _plan(rec, size, worst))
    between = f" (GPU{pair[0]}-GPU{pair[1]})" if pair else ""
    return ("poor", f"Tensor parallelism will be slow here: even TP{smallest} groups cross {path}{between}; prefer "
            "replicas (DP) or pipeline parallelism.", None, missing, None)


def _worst_pair_path(rec: Any, size: int) -> str | None:
    pair = (rec.worst_pairs or {}).get(size)
    return rec.pairs[pair].path if pair in rec.pairs else None


def _partial_inventory(machine: Machine, lead: Finding | None, status: str, tally: str,
                       lead_key: str | None) -> Verdict | None:
    """The verdict when the inputs show only some of the machine's GPUs: a filtered `nvidia-smi -q -i 0` under
    `Attached GPUs : 8`, or a GPU list cut short in the paste (`GPU0  GPU1  GPU2  ...`). A TP size judged on the
    GPUs shown would be a verdict on a machine nobody has; None when the inputs show them all (as far as they say)."""
    gpus = len(machine.gpus)
    unseen = machine.unseen_attached_gpus()
    if not gpus or not (unseen or machine.gpu_count_is_a_floor()):
        return None
    head = f"{lead.title}. " if lead is not None else ""
    level = "faulty" if status == "fail" else "unknown"
    if unseen:
        shown = f"{gpus} of the {machine.attached_gpu_count()} attached GPUs {'is' if gpus == 1 else 'are'}"
        return Verdict(level, f"{head}{shown} in these inputs{quoted_aside(machine.attached_count_source())}: the output was filtered (`-i`), so no TP size "
                       f"can be judged; `nvidia-smi -q` without `-i` and `{TOPO_COMMAND}` show them all ({tally}).",
                       None, status, lead_key,
                       [{"what": ("the other attached GPU" if unseen == 1 else f"the other {unseen} attached GPUs")
                                 + " and the paths between them", "command": f"nvidia-smi -q; {TOPO_COMMAND}"}])
    cut = machine.gpu_list_cuts[0]
    return Verdict(level, f"{head}At least {counted(gpus, 'GPU')}: the GPU list was cut short in the paste "
                   f"({cut.quoted()}), so the GPUs left out and the paths to them are unknown and no TP size can "
                   f"be judged; `{TOPO_COMMAND}` in full shows them all ({tally}).", None, status, lead_key,
                   [{"what": "the GPUs the cut list left out and the paths to them", "command": TOPO_COMMAND}])


def _no_inventory(machine: Machine, findings: list[Finding], lead: Finding | None) -> tuple[str, str, list[dict]]:
    seen = [name for name, present in (("NCCL logs", machine.nccl), ("benchmarks", machine.benchmarks),
                                       ("PCIe devices", machine.pci)) if present]
    # `command` is quoted whole in the report (`...`): only what to type, the alternative goes in `what`
    missing = [{"what": "a GPU inventory (which GPUs, their links and PCIe state; `k3diag collect` on the host "
                        "gathers it all)",
                "command": "nvidia-smi topo -m; nvidia-smi -q"}]
    lead_text = f"{lead.title}. " if lead is not None else ""
    judged = f"judged from the {', '.join(seen)} alone" if seen else "nothing else was judged"
    return (UNKNOWN, f"{lead_text}These inputs hold no GPU inventory, so no TP size can be judged ({judged}; "
            "`nvidia-smi topo -m` or `k3diag collect` would tell).", missing)


def decide_verdict(machine: Machine, findings: list[Finding], recommendation: Any | None) -> Verdict:
    code = exit_code_for(machine, findings)
    status = STATUS_BY_EXIT.get(code, "unknown")
    lead = lead_finding(findings)
    tally = problem_tally(findings)
    lead_key = lead.key if lead is not None else None
    gpus = len(machine.gpus)
    if not machine.analyzable:
        return Verdict("unknown", "Nothing could be analyzed: no input held a format k3diag reads (see Inputs).",
                       None, status, None, [{"what": "any readable tool output (collected on the host)",
                                             "command": "k3diag collect -o bundle.tar.gz"}])
    if gpus == 0 and recommendation is None:
        no_gpu = next((f for f in findings if f.id == "no-gpu-found"), None)
        if no_gpu is not None:
            first = lead if lead is not None and lead.severity == "fail" else no_gpu
            # the finding's own "No NVIDIA or AMD GPU was found on this host: " would say it twice in one line
            why = first.explanation.rstrip(".").removeprefix("No NVIDIA or AMD GPU was found on this host: ")
            text = (f"No GPU was found, so this machine cannot be assessed: {why}."
                    if first is no_gpu else f"{first.title}; no GPU was found, so this machine cannot be assessed.")
            return Verdict("none", text, None, status, first.key,
                           [{"what": "a GPU", "command": no_gpu.confirm_with or "nvidia-smi -L"}])
        level, text, missing = _no_inventory(machine, findings, lead)
        return Verdict(level, f"{text} ({tally})", None, status, lead_key, missing)
    partial = _partial_inventory(machine, lead, status, tally, lead_key)
    if partial is not None:
        return partial
    if gpus == 1 and (recommendation is None or len(recommendation.gpus) < 2):
        head = f"{lead.title}. " if lead is not None else ""
        return Verdict("faulty" if status == "fail" else "usable",
                       f"{head}One GPU: no tensor parallelism possible; run replicas or a model that fits one GPU "
                       f"({tally}).", 1, status, lead_key)
    if recommendation is None:
        head = f"{lead.title}. " if lead is not None else ""
        return Verdict("unknown", f"{head}The GPUs' links are not in these inputs, so no TP size can be judged: "
                       f"`{TOPO_COMMAND}` shows them ({tally}).", None, status, lead_key,
                       [{"what": "the paths between the GPUs", "command": TOPO_COMMAND}])
    level, sentence, best_tp, missing, plan = _tp_judgement(machine, recommendation)
    if missing and level != UNKNOWN:  # advice on what was seen; say what was not
        sentence += " Not in these inputs: " + "; ".join(f"{m['what']} (`{m['command']}`)" for m in missing) + "."
    if lead is not None and lead.severity == "fail":
        text = f"{lead.title} (fix first). {sentence} ({tally})"
        level = "faulty"
    elif lead is not None:
        text = f"{lead.title}. {sentence} ({tally})"
        if level == "good":
            level = "usable"
    else:
        text = f"{sentence} ({tally})"
    return Verdict(level, text, best_tp, status, lead_key, missing, plan)
