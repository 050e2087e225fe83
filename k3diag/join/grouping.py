"""Which inputs describe the same machine: grouping by identity keys, with the reason for each.

Rules, in the order a reader would check them by hand:
- keys that are unique to one machine join inputs when they are shared (GPU UUIDs and serials,
  host names) and separate them when both inputs carry them and none is shared;
- GPU models, GPU vendors (from a tool of one vendor: nvidia-smi, rocm-smi, an RCCL log), bus ids,
  the GPU count and the driver/CUDA/ROCm versions cannot prove two inputs are one machine (identical
  servers print identical values), but when they differ the inputs are not one machine and are never
  merged;
- the files of one bundle (one host's collection) that contradict each other in nothing stay one
  machine, whatever else is given with them, and its files with no key follow it;
- an input with no key at all joins the only machine there is, or stands alone with a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k3diag.model.identity import IdentityFact, InputIdentity
from k3diag.model.ids import strict_cpulist
from k3diag.model.words import counted

# How strongly a shared key says "same machine": an exact unique key beats a host name, which beats
# a consistent set of bus ids and models.
_UNIQUE, _HOST, _SHAPE = 100, 50, 1


@dataclass
class Member:
    """One parsed input waiting to be placed: its position, display name and keys."""

    position: int
    name: str
    identity: InputIdentity
    reason: str = ""
    path: str = ""  # the file it came from: sections of one file with no key follow the rest of the file
    # The bundle it came from, when it did: a bundle is one host's collection, so its members that contradict
    # each other in nothing are one machine before any other input is placed (never split by an input of
    # another machine given first).
    bundle: str = ""


@dataclass
class Group:
    """The inputs placed on one machine, and what they say about its identity together."""

    members: list[Member] = field(default_factory=list)
    identity: InputIdentity = field(default_factory=InputIdentity)

    def add(self, member: Member) -> None:
        self.members.append(member)
        self.identity.update(member.identity)

    def names(self) -> str:
        return _join_names([m.name for m in self.members[:_NAMES_SHOWN]], len(self.members))


def group_inputs(members: list[Member]) -> list[Group]:
    """Machines from inputs, each member with the reason it went where it went.

    First, inputs that share a unique key (a GPU UUID or serial, a host name) and contradict each other
    in nothing are linked into clusters; then clusters are placed in input order, each joining the
    machine it matches best among those it does not contradict, or starting a new one. Clustering
    first means that a log naming its host and a benchmark naming the same host stay together even
    when an input without a host name (consistent with either) came before them. Inputs with no key
    come last: with one machine they join it, with several they stand alone.
    """
    keyed = [member for member in members if not member.identity.empty]
    keyless = [member for member in members if member.identity.empty]
    groups: list[Group] = []
    machines = _Machines(groups)
    for cluster in _clusters(keyed, _consistent_bundles(keyed)):
        _place(cluster, machines)
    # file -> the groups holding one of its sections, kept as members are added (a scan of every member for
    # every keyless one grew with the square of the sections)
    by_path: dict[str, dict[int, Group]] = {}
    for group in groups:
        for placed in group.members:
            if placed.path:
                by_path.setdefault(placed.path, {})[id(group)] = group
    for member in keyless:
        if not groups:
            groups.append(Group())
        siblings = list(by_path.get(member.path, {}).values()) if member.path else []
        if len(siblings) == 1 and len(groups) > 1:
            member.reason = f"it names no host or GPU; the rest of {member.path} went to this machine"
            home = siblings[0]
        elif len(groups) == 1:
            member.reason = ("it names no host or GPU, so it was read with the inputs of the only machine"
                             if groups[0].members else "it names no host or GPU")
            home = groups[0]
        else:
            member.reason = (f"it names no host or GPU, so nothing ties it to one of the {len(groups)} machines "
                             "the other inputs describe; it is reported on its own")
            home = Group()
            groups.append(home)
        home.add(member)
        if member.path:
            by_path.setdefault(member.path, {})[id(home)] = home
    return groups


def _consistent_bundles(members: list[Member]) -> set[str]:
    """Bundles whose files contradict each other in nothing: one host's collection, as `k3diag collect` writes
    it. A bundle assembled by hand from several machines' outputs is grouped file by file like loose files."""
    together: dict[str, InputIdentity] = {}
    broken: set[str] = set()
    for member in members:
        if not member.bundle or member.bundle in broken:
            continue
        keys = together.setdefault(member.bundle, InputIdentity())
        if conflicts_between(keys, member.identity):
            broken.add(member.bundle)
        else:
            keys.update(member.identity)
    return set(together) - broken


# The keys whose sharing alone reaches `_HOST`: a cluster can take a member only when they share one (or the
# member's whole bundle), so `_clusters` looks only at the clusters that hold one of the member's.
_JOINING_KEYS = ("gpu_uuids", "gpu_serials", "hostnames")


def _clusters(members: list[Member], whole_bundles: set[str] = frozenset()) -> list[Group]:
    clusters: list[Group] = []
    # (key, value) and ("bundle", name) -> the clusters holding it, in the order they were made: a member is
    # checked against those alone, first made first, as a scan of every cluster would (the others can score
    # at most `_SHAPE` on each of three keys and share no whole bundle). Without it 10,000 sections that name
    # no host took minutes: every section was scored against every cluster before it.
    holding: dict[tuple[str, str], set[int]] = {}
    for member in members:
        keys = [(attr, value) for attr in _JOINING_KEYS for value in member.identity.values(attr)]
        if member.bundle:
            keys.append(("bundle", member.bundle))
        home: int | None = None
        for index in sorted({index for key in keys for index in holding.get(key, ())}):
            cluster = clusters[index]
            score, reasons = matches_between(cluster.identity, member.identity)
            if score >= _HOST and not conflicts_between(cluster.identity, member.identity):
                member.reason = f"same machine as {cluster.names()}: {reasons[0]}"
                home = index
                break
            if member.bundle in whole_bundles and any(m.bundle == member.bundle for m in cluster.members) \
                    and not conflicts_between(cluster.identity, member.identity):
                member.reason = (f"from the bundle {member.bundle}, one host's collection, and nothing in it "
                                 "contradicts the bundle's other files")
                home = index
                break
        if home is None:
            clusters.append(Group())
            home = len(clusters) - 1
        clusters[home].add(member)
        for key in keys:
            holding.setdefault(key, set()).add(home)
    return clusters


class _Machines:
    """The machines placed so far, indexed by their unique keys (host names, GPU UUIDs and serials): a cluster
    that carries one contradicts every machine that carries that key with none of its values
    (`conflicts_between`), so only the machines that share a value or lack the key are scored. Scoring every
    machine made a paste of 2,000 hosts' outputs take minutes."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self.holding: dict[str, dict[str, set[int]]] = {attr: {} for attr in _JOINING_KEYS}
        self.lacking: dict[str, set[int]] = {attr: set() for attr in _JOINING_KEYS}

    def note(self, index: int) -> None:
        """Index machine `index` again after it took new inputs (it may carry new keys now)."""
        identity = self.groups[index].identity
        for attr in _JOINING_KEYS:
            values = identity.values(attr)
            if values:
                self.lacking[attr].discard(index)
                for value in values:
                    self.holding[attr].setdefault(value, set()).add(index)
            else:
                self.lacking[attr].add(index)

    def may_take(self, cluster: Group) -> list[int] | None:
        """The machines, in the order they were made, that no unique key of `cluster` rules out; None for
        all of them (the cluster carries no unique key)."""
        allowed: list[tuple[set[int], set[int]]] = []  # per key the cluster carries: (lacking it, sharing a value)
        for attr in _JOINING_KEYS:
            values = cluster.identity.values(attr)
            if values:
                sharing: set[int] = set()
                for value in values:
                    sharing |= self.holding[attr].get(value, set())
                allowed.append((self.lacking[attr], sharing))
        if not allowed:
            return None
        allowed.sort(key=lambda pair: len(pair[0]) + len(pair[1]))
        lacking, sharing = allowed[0]
        return sorted(index for index in lacking | sharing
                      if all(index in other_lacking or index in other_sharing
                             for other_lacking, other_sharing in allowed[1:]))


# how many machines a new machine's reason names as contradicting it; the rest are counted
_REFUSALS_SHOWN = 3


def _place(cluster: Group, machines: _Machines) -> None:
    groups = machines.groups
    best: tuple[int, int, list[str]] | None = None  # (score, group index, reasons)
    scored = machines.may_take(cluster)
    conflicts_of: dict[int, list[str]] = {}  # the scored machines that contradict the cluster
    for index in range(len(groups)) if scored is None else scored:
        group = groups[index]
        conflicts = conflicts_between(group.identity, cluster.identity)
        if conflicts:
            conflicts_of[index] = conflicts
            continue
        score, reasons = matches_between(group.identity, cluster.identity)
        if best is None or score > best[0]:
            best = (score, index, reasons)
    first = cluster.members[0]
    if best is not None:
        score, index, reasons = best
        group = groups[index]
        first.reason = (f"same machine as {group.names()}: {reasons[0]}" if reasons
                        else f"nothing in it contradicts {group.names()}")
        for member in cluster.members:
            group.add(member)
        machines.note(index)
        return
    # every machine contradicts it: those not scored (a unique key rules them out) and the scored ones
    outside: list[int] = []  # the first few machines not scored, found without a pass over all of them
    if scored is not None:
        taken = set(scored)
        index = 0
        while len(outside) < _REFUSALS_SHOWN and index < len(groups):
            if index not in taken:
                outside.append(index)
            index += 1
    refused = len(groups)
    if refused:
        shown = [f"not with {groups[index].names()}: "
                 f"{(conflicts_of.get(index) or conflicts_between(groups[index].identity, cluster.identity))[0]}"
                 for index in sorted(outside + list(conflicts_of))[:_REFUSALS_SHOWN]]
        if refused > _REFUSALS_SHOWN:
            more = refused - _REFUSALS_SHOWN
            shown.append(f"nor with the {counted(more, 'other machine')}, which "
                         f"{'contradicts' if more == 1 else 'contradict'} it too")
        first.reason = "; ".join(shown)
    else:
        first.reason = f"the first input that names its machine ({describe(cluster.identity)})"
    groups.append(cluster)
    machines.note(len(groups) - 1)


def conflicts_between(a: InputIdentity, b: InputIdentity) -> list[str]:
    """Why the two sets of keys cannot be one machine; empty when nothing contradicts."""
    reasons: list[str] = []
    for attr, what in (("gpu_uuids", "no GPU UUID in common"), ("gpu_serials", "no GPU serial number in common")):
        if a.values(attr) and b.values(attr) and not a.values(attr) & b.values(attr):
            reasons.append(f"{what} ({_cite(getattr(a, attr))} vs {_cite(getattr(b, attr))})")
    if a.hostnames and b.hostnames and not a.values("hostnames") & b.values("hostnames"):
        reasons.append(f"different host names ({_values(a.hostnames)} vs {_values(b.hostnames)})")
    if a.gpu_vendors and b.gpu_vendors and not a.values("gpu_vendors") & b.values("gpu_vendors"):
        reasons.append(f"GPUs of different vendors ({_cite(a.gpu_vendors)} vs {_cite(b.gpu_vendors)})")
    if a.gpu_names and b.gpu_names and not _names_overlap(a, b):
        reasons.append(f"different GPU models ({_cite(a.gpu_names)} vs {_cite(b.gpu_names)})")
    bus_reason = _bus_conflict(a, b)
    if bus_reason:
        reasons.append(bus_reason)
    count_reason = _count_conflict(a, b) or _count_conflict(b, a)
    if count_reason:
        reasons.append(count_reason)
    affinity_reason = _affinity_conflict(a.gpu_numa_affinities, b.gpu_numa_affinities, "NUMA") or \
        _cpu_wiring_conflict(a.gpu_cpu_affinities, b.gpu_cpu_affinities)
    if affinity_reason:
        reasons.append(affinity_reason)
    for attr, what in (("driver_version", "driver"), ("cuda_version", "CUDA"), ("rocm_version", "ROCm")):
        fa, fb = getattr(a, attr), getattr(b, attr)
        if fa is not None and fb is not None and fa.value != fb.value:
            reasons.append(f"different {what} versions ({fa.cite()} vs {fb.cite()})")
    return reasons


def matches_between(a: InputIdentity, b: InputIdentity) -> tuple[int, list[str]]:
    """How strongly the keys say "one machine", and the sentences that say why (strongest first)."""
    score = 0
    reasons: list[str] = []
    for attr, what in (("gpu_uuids", "GPU UUID"), ("gpu_serials", "GPU serial number")):
        shared = sorted(a.values(attr) & b.values(attr))
        if shared:
            score += _UNIQUE
            shown = next(fact.text for fact in getattr(b, attr) if fact.value == shared[0])  # as printed
            reasons.append(f"the same {what} {shown}" + (f" and {len(shared) - 1} more" if len(shared) > 1 else ""))
    shared_hosts = sorted(a.values("hostnames") & b.values("hostnames"))
    if shared_hosts:
        score += _HOST
        reasons.append(f"the same host name {next(f.text for f in b.hostnames if f.value == shared_hosts[0])}")
    shared_buses = _buses(a) & _buses(b)
    if shared_buses:
        score += _SHAPE
        reasons.append(f"{counted(len(shared_buses), 'GPU bus id')} in common")
    if a.gpu_names and b.gpu_names and _names_overlap(a, b):
        score += _SHAPE
        reasons.append(f"the same GPU model ({b.gpu_names[0].text})")
    if a.gpu_count is not None and b.gpu_count is not None and a.gpu_count.value == b.gpu_count.value:
        score += _SHAPE
        reasons.append(f"the same GPU count ({a.gpu_count.value})")
    return score, reasons


def describe(identity: InputIdentity) -> str:
    """The keys in a few words: `host node1, 8 GPUs, NVIDIA L40S`."""
    parts: list[str] = []
    if identity.hostnames:
        parts.append("host " + _values(identity.hostnames))
    if identity.gpu_count is not None:
        parts.append(f"{identity.gpu_count.value} GPU{'' if str(identity.gpu_count.value) == '1' else 's'}")
    else:
        seen = max(identity.gpus_seen, len(identity.gpu_bus_ids) if len(identity.hostnames) <= 1 else 0)
        if seen:
            parts.append(f"{counted(seen, 'GPU')} seen")
    if identity.gpu_names:
        parts.append(_values(identity.gpu_names))
    elif identity.gpu_vendors:  # `8 GPUs, AMD` beside `8 GPUs, NVIDIA`: two labels a reader can tell apart
        parts.append(_values(identity.gpu_vendors))
    if identity.gpu_bus_ids and not identity.gpu_names:
        parts.append("bus ids " + _bus_list(identity))
    if identity.driver_version is not None:
        parts.append(f"driver {identity.driver_version.value}")
    return ", ".join(parts) if parts else "no machine keys"


# -- helpers ------------------------------------------------------------------------------------


def _names_overlap(a: InputIdentity, b: InputIdentity) -> bool:
    """`h100 80gb hbm3` and `h100` are one model; `mi300a` and `mi300x` are not."""
    return any(x == y or x in y or y in x for x in a.values("gpu_names") for y in b.values("gpu_names"))


def _buses(identity: InputIdentity) -> set[str]:
    """`dddd:bb`: some sources print only the bus number, and a GPU is the only function on its bus."""
    return {fact.value.rsplit(":", 1)[0] if fact.value.count(":") == 2 else fact.value for fact in identity.gpu_bus_ids}


def _bus_conflict(a: InputIdentity, b: InputIdentity) -> str | None:
    """Bus ids differ between machines only as far as an inventory shows: a benchmark on GPUs 0-3 and
    another on GPUs 4-7 of one host share no bus id, but neither may name a GPU an inventory lacks."""
    buses_a, buses_b = _buses(a), _buses(b)
    if not buses_a or not buses_b:
        return None
    if a.gpu_count is not None and b.gpu_count is not None:
        if not buses_a & buses_b:
            return f"no GPU bus id in common ({_bus_list(a)} vs {_bus_list(b)})"
        return None
    for full, full_buses, other, other_buses in ((a, buses_a, b, buses_b), (b, buses_b, a, buses_a)):
        if full.gpu_count is not None and other.gpu_count is None and other_buses - full_buses:
            missing = sorted(other_buses - full_buses)[0]
            return (f"a GPU at bus {missing} ({_cite([f for f in other.gpu_bus_ids if f.value.startswith(missing)][:1] or other.gpu_bus_ids)}) "
                    f"is not among the {full.gpu_count.value} GPU{'' if str(full.gpu_count.value) == '1' else 's'} of the other "
                    f"({_bus_list(full)})")
    return None


def _cpu_wiring_conflict(a: list[IdentityFact], b: list[IdentityFact]) -> str | None:
    """A CPU listed near one GPU in one input and near none of the same GPUs in the other: the wiring
    differs. The CPU lists themselves may differ on one machine: nvidia-smi prints them narrowed to the CPU
    set it runs in (a Slurm job given `-c32`, a container), even empty, and SMT on or off changes them; a CPU
    set only narrows the lists, it never moves a CPU to another GPU."""
    owners_a, owners_b = _cpu_owners(a), _cpu_owners(b)
    for cpu in sorted(owners_a.keys() & owners_b.keys()):
        (gpus_a, fact_a), (gpus_b, fact_b) = owners_a[cpu], owners_b[cpu]
        if gpus_a.isdisjoint(gpus_b):
            return (f"different CPU wiring (CPU {cpu}: {fact_a.cite()} vs {fact_b.cite()}): a CPU set narrows "
                    "a GPU's CPU list, it never moves a CPU to another GPU")
    return None


def _cpu_owners(facts: list[IdentityFact]) -> dict[int, tuple[set[str], IdentityFact]]:
    """CPU -> the GPUs whose affinity lists it (and the first such fact, to quote). A list that is not one
    whole (cut, glued, wider than any machine) says nothing of the wiring."""
    owners: dict[int, tuple[set[str], IdentityFact]] = {}
    for fact in facts:
        gpu, _, listed = fact.value.partition("=")
        for cpu in strict_cpulist(listed) or ():
            owners.setdefault(cpu, (set(), fact))[0].add(gpu)
    return owners


def _affinity_conflict(a: list[IdentityFact], b: list[IdentityFact], what: str) -> str | None:
    """A GPU that hangs off other CPUs or another NUMA node in each input: the wiring differs, so the
    inputs are two machines (the same machine read twice prints the same affinities, whatever its links)."""
    theirs: dict[str, set[str]] = {}
    for fact in b:
        theirs.setdefault(fact.value.split("=", 1)[0], set()).add(fact.value)
    for fact in a:
        gpu = fact.value.split("=", 1)[0]
        if gpu in theirs and fact.value not in theirs[gpu]:
            other = next(f for f in b if f.value in theirs[gpu])
            return (f"different {what} affinity ({fact.cite()} vs {other.cite()}): a GPU's affinity is its wiring, "
                    "fixed for a machine")
    return None


def _count_conflict(full: InputIdentity, other: InputIdentity) -> str | None:
    if full.gpu_count is None:
        return None
    count = int(full.gpu_count.value)
    if other.gpu_count is not None and int(other.gpu_count.value) != count:
        return f"different GPU counts ({count} vs {other.gpu_count.value})"
    if other.gpus_seen > count:
        return f"{other.gpus_seen} GPUs in one and {count} in the other"
    return None


def _values(facts: list[IdentityFact], limit: int = 3) -> str:
    shown = [fact.text for fact in facts[:limit]]
    more = f" and {len(facts) - limit} more" if len(facts) > limit else ""
    return ", ".join(shown) + more


def _cite(facts: list[IdentityFact]) -> str:
    more = f" and {len(facts) - 1} more" if len(facts) > 1 else ""
    return f"{facts[0].cite()}{more}"


def _bus_list(identity: InputIdentity) -> str:
    return _values(sorted(identity.gpu_bus_ids, key=lambda fact: fact.value))


_NAMES_SHOWN = 3


def _join_names(names: list[str], total: int | None = None, limit: int = _NAMES_SHOWN) -> str:
    """The first `limit` names, and how many more of the `total` (default: all of `names`) there are."""
    total = len(names) if total is None else total
    more = f" and {total - limit} more" if total > limit else ""
    return ", ".join(names[:limit]) + more
