"""Saved inputs in, one `Machine` per machine they describe out: identity before judgement.

Each input is parsed once, merged alone into a scratch machine to read back what it says about
its machine (`join.identity`), grouped (`join.grouping`), and then merged with the other inputs
of its group. Inputs whose keys conflict are never merged, so two machines never get one verdict.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from k3diag.evidence import Evidence
from k3diag.join.build import ParsedInput, finish_machine, merge_parsed, parse_evidence
from k3diag.join.grouping import Member, describe, group_inputs
from k3diag.join.identity import identity_of
from k3diag.model.identity import is_hostname, refused_hostname
from k3diag.model.machine import InputRecord, Machine, MachineSet, Note


def build_machines(evidence: Iterable[Evidence], problems: Iterable[InputRecord] = ()) -> MachineSet:
    """`problems` are inputs already known unreadable (missing paths, bundle warnings): reported, never grouped."""
    problems = list(problems)
    parsed: list[ParsedInput] = []
    # beside `parsed`: the input each piece came from, and its bundle ("" for a file given as it is)
    origins: list[tuple[str, str]] = []
    for item in evidence:
        bundle = _bundle_of(item)
        for piece in parse_evidence(item):
            parsed.append(piece)
            origins.append((bundle or item.name, bundle))
    readable = [(piece, origin) for piece, origin in zip(parsed, origins) if piece.parsed]
    result = MachineSet(inputs=problems + [piece.record for piece in parsed])
    if len(readable) <= 1:
        machine = _one_machine(problems, parsed)
        if readable:  # what the one input says of its machine (`Attached GPUs : 8` above one GPU block)
            machine.identity = identity_of(machine, readable[0][0].record)
        result.machines.append(machine)
        return result

    members: list[Member] = []
    for position, (piece, (origin, bundle)) in enumerate(readable):
        # A throwaway record: the merger's warnings about this input are said once, by the real merge.
        trial = replace(piece.record, warnings=list(piece.record.warnings))
        scratch = Machine()
        merge_parsed(replace(piece, record=trial, note=None), scratch)
        identity = identity_of(scratch, piece.record)
        piece.record.identity = identity
        members.append(Member(position=position, name=_display(piece.record), identity=identity,
                              path=origin, bundle=bundle))
    groups = group_inputs(members)
    if len(groups) == 1:
        machine = _one_machine(problems, parsed)
        machine.identity = groups[0].identity
        result.machines.append(machine)
        return result

    for number, group in enumerate(groups, 1):
        machine = Machine()
        for member in sorted(group.members, key=lambda m: m.position):
            piece = readable[member.position][0]
            piece.record.machine = number
            piece.record.machine_reason = member.reason
            merge_parsed(piece, machine)
        finish_machine(machine)
        machine.identity = group.identity
        machine.label = describe(group.identity)
        result.machines.append(machine)
    for record in problems + [piece.record for piece in parsed if not piece.parsed]:
        record.machine = None
        record.machine_reason = ("a bundle: each file in it was placed on its own" if record.format == "bundle"
                                 else "nothing in it could be read, so it belongs to no machine")
        result.unplaced.append(record)
    for piece in parsed:
        if not piece.parsed and piece.note is not None:
            result.notes.append(piece.note)
    result.notes.insert(0, Note(subject="inputs", level="warn", message=several_machines_sentence(result)))
    return result


def several_machines_sentence(machines: MachineSet) -> str:
    count = len(machines.machines)
    return (f"These inputs describe {count} different machines; each is reported on its own, and no finding or "
            "verdict joins the evidence of two of them. Check that every file comes from the machine you meant.")


def _one_machine(problems: list[InputRecord], parsed: list[ParsedInput]) -> Machine:
    machine = Machine()
    machine.inputs.extend(problems)
    for piece in parsed:
        merge_parsed(piece, machine)
    finish_machine(machine)
    return machine


def _bundle_of(item: Evidence) -> str:
    """The bundle an input came from ("" if none): for the rule that a key-less part follows the rest of its
    file, a bundle's member is of the bundle, which one host collected (its `lspci -vv` or `/proc/cmdline`
    names no GPU, yet it is that host's, not a machine of its own when the bundle is analyzed with another
    machine's files)."""
    member = item.meta.get("bundle_member") if isinstance(item.meta, dict) else None
    if isinstance(member, str) and member and item.name.endswith(":" + member):
        return item.name[: -len(member) - 1]
    return ""


def _display(record: InputRecord) -> str:
    """How a sentence names an input: its path, and the command when one file held several outputs."""
    return record.path if not record.command else f"{record.path} ({record.command})"


# -- which machine a bundle is of ----------------------------------------------------------------------


def _manifest_name(manifest: object) -> str | None:
    """The name a bundle's manifest gives its host (`host` as a string or `{hostname: ...}`), as written, or None
    when it gives none; whether it is a host name at all is `is_hostname`'s to say."""
    info = manifest.get("host") if isinstance(manifest, dict) else None
    if isinstance(info, dict):
        info = info.get("hostname")
    return info if isinstance(info, str) and info.strip() else None


def manifest_hostname(manifest: object) -> str | None:
    """The host a bundle's manifest names, lower case, or None (none, or no host name)."""
    name = _manifest_name(manifest)
    return name.strip().lower() if name is not None and is_hostname(name) else None


def bundle_machine(machines: MachineSet, hostname: str | None) -> tuple[int, str]:
    """The index of the machine a bundle (meant to hold one host) is of, and why, when its inputs describe
    several: the host its manifest names, else the machine with a GPU inventory (the most GPUs counted),
    else the one with the most inputs. `audit`, `check --from` and `fleet` answer for that machine alone."""
    if not machines.several:
        return 0, ""
    if hostname is not None:
        for index, candidate in enumerate(machines.machines):
            names = {str(h).strip().lower() for h in candidate.identity.values("hostnames")}
            if hostname in names:
                return index, f"the bundle's manifest names its host, {hostname}"
    inventories = [(int(candidate.identity.gpu_count.value), -index) for index, candidate in enumerate(machines.machines)
                   if candidate.identity.gpu_count is not None]
    if inventories:
        why = "it is the machine with a GPU inventory"
        if hostname is not None:
            why = f"no input names the manifest's host ({hostname}); " + why
        return -max(inventories)[1], why
    index = max(range(len(machines.machines)), key=lambda i: (len(machines.machines[i].inputs), -i))
    return index, "no input names the manifest's host and none holds a GPU inventory; it has the most inputs"


def machine_of_bundle(machines: MachineSet, manifest: object) -> tuple[int, str]:
    """`bundle_machine` for a bundle's manifest, with the facts only the manifest knows filled into the machine
    chosen (`apply_manifest_host`): what `audit`, `check --from`, `fleet` and `load_machines` need of a
    bundle, in one place."""
    index, why = bundle_machine(machines, manifest_hostname(manifest))
    apply_manifest_host(machines.machines[index], manifest)
    return index, why


def apply_manifest_host(machine: Machine, manifest: object) -> None:
    """Facts only the manifest knows (host name, kernel, OS, driver and CUDA versions) fill what the evidence
    left empty: a bundle assembled by hand, or one whose host reading failed, still names its node."""
    host = machine.host
    if not isinstance(manifest, dict):
        return
    info = manifest.get("host")
    name = _manifest_name(manifest)
    if name is not None and not is_hostname(name):
        # a newline in it forged a second line of the one-line formats (Nagios, a drain list)
        machine.note("bundle manifest", f"the manifest's host name {refused_hostname(name)}, so it does not name "
                     "this machine")
        name = None
    if isinstance(info, dict):
        for key in ("kernel", "os", "driver_version", "cuda_version"):
            value = info.get(key)
            if isinstance(value, str) and value.strip() and getattr(host, key, None) is None:
                setattr(host, key, value)
    if name is not None and host.hostname is None:
        host.hostname = name
