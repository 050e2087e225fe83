"""Turning what the user pointed at (files, folders, bundles, or the live host) into evidence and a model."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable

from k3diag.evidence import MAX_TEXT_BYTES, Evidence, InputError, input_error_for, open_input, read_stream
from k3diag.model.machine import InputRecord, Machine, MachineSet
from k3diag.model.words import counted

# A folder of saved outputs is walked this deep and this wide at most; a user who points
# k3diag at / by mistake gets a sentence, not a frozen terminal. What is left out is said.
MAX_FOLDER_FILES = 5000
MAX_FOLDER_DEPTH = 16
STDIN_NAME = "<stdin>"


class InputPathError(Exception):
    """Paths the user named that do not exist or cannot be read: a usage error (exit 64).

    `sentences` holds one sentence per path, each naming the full path."""

    def __init__(self, sentences: list[str]) -> None:
        super().__init__("; ".join(sentences))
        self.sentences = sentences


def evidence_from_paths(paths: list[Path], stdin: BinaryIO | None = None,
                        manifests: list[dict] | None = None) -> tuple[list[Evidence], list[InputRecord]]:
    """Evidence for every input, and an input record for every problem met on the way.

    `-` reads standard input (`stdin`, else the process's), a FIFO, `/dev/stdin` or `<(cmd)` is read
    as a stream under the same size limit as a file. A path that does not exist or cannot be read
    raises `InputPathError` naming every such path, after all of them were looked at.
    """
    evidence: list[Evidence] = []
    problems: list[InputRecord] = []
    unusable: list[str] = []
    given = _Given()
    for path in paths:
        name = str(path)
        if name == "-":
            _add_stream(STDIN_NAME, *_stdin_evidence(stdin), evidence, problems, manifests)
            continue
        try:
            os.lstat(path)
        except OSError as exc:
            unusable.append(str(input_error_for(os.path.abspath(name), exc)))
            continue
        first = given.first_time(path, name)
        if first is None:
            continue
        if _is_bundle(path):
            from k3diag.bundle import BundleError, read_bundle

            try:
                bundle = read_bundle(path)
            except BundleError as exc:
                problems.append(_problem(name, str(exc)))
                continue
            except OSError as exc:
                problems.append(_problem(name, f"could not read the bundle {name}: {exc.strerror or exc}"))
                continue
            evidence.extend(bundle.evidence)
            if manifests is not None:
                manifests.append(bundle.manifest)
            record = InputRecord(path=name, format="bundle", warnings=list(bundle.warnings))
            first.sentences = record.warnings
            problems.append(record)
            continue
        if path.is_dir():
            found, folder_problems = _walk_folder(path)
            kept = []
            for item in found:
                found_first = given.first_time(item.path, item.name) if item.path is not None else _First(item.name)
                if found_first is not None:
                    found_first.sentences = item.notes
                    kept.append(item)
            evidence.extend(kept)
            problems.extend(folder_problems)
            # a folder given again is said by its first file read (or its first problem)
            first.sentences = kept[0].notes if kept else folder_problems[0].warnings if folder_problems else None
            continue
        try:
            handle, is_stream = open_input(path, allow_stream=True)
        except InputError as exc:
            unusable.append(str(exc))
            continue
        with handle:
            if not is_stream:
                item = Evidence(name=name, path=path)
                first.sentences = item.notes
                evidence.append(item)
                continue
            try:
                data, cut = read_stream(handle, MAX_TEXT_BYTES)
            except OSError as exc:
                unusable.append(f"reading {os.path.abspath(name)} failed: {exc.strerror or exc}")
                continue
        _add_stream(name, data, cut, evidence, problems, manifests)
    if unusable:
        raise InputPathError(unusable)
    return evidence, problems


class _First:
    """An input read for the first time: `sentences` (its warnings or notes, once it has them) say under which
    other names it came again. (A plain class: `@dataclass` costs ~1.4 M instructions at every start-up.)"""

    __slots__ = ("name", "sentences")

    def __init__(self, name: str) -> None:
        self.name = name
        self.sentences: list[str] | None = None


class _Given:
    """The files, folders and bundles already given, by device and inode (`a.txt ./a.txt`, a link to it, a file
    named and its folder named too): each is read once, so a file given twice counts nothing twice (GPUs,
    communicators, benchmark runs, PCIe devices), and the first says it came again."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], _First] = {}

    def first_time(self, path: Path, name: str) -> _First | None:
        """The entry of `path` if it was not given before; None if it was (the first then says so)."""
        try:
            info = os.stat(path)
        except OSError:
            return _First(name)  # nothing to know it by: read it
        key = (info.st_dev, info.st_ino)
        first = self._seen.get(key)
        if first is None:
            first = self._seen[key] = _First(name)
            return first
        if first.sentences is not None:
            first.sentences.append(f"{name} was given twice: it was read once" if name == first.name else
                                   f"{name} is {first.name} again (given twice): it was read once")
        return None


def _add_stream(name: str, data: bytes, cut: bool, evidence: list[Evidence], problems: list[InputRecord],
                manifests: list[dict] | None = None) -> None:
    """A piped input: a bundle (`cat node.tar.gz | k3diag analyze -`) is read as one, anything else as text."""
    try:
        from k3diag.bundle import BundleError, bytes_look_like_bundle, read_bundle_bytes
    except ModuleNotFoundError:
        evidence.append(_stream_evidence(name, data, cut))
        return
    if not bytes_look_like_bundle(data):
        evidence.append(_stream_evidence(name, data, cut))
        return
    try:
        bundle = read_bundle_bytes(data, name)
    except BundleError as exc:
        problems.append(_problem(name, str(exc)))
        return
    evidence.extend(bundle.evidence)
    if manifests is not None:
        manifests.append(bundle.manifest)
    problems.append(InputRecord(path=name, format="bundle", warnings=list(bundle.warnings)))


def _stdin_evidence(stdin: BinaryIO | None) -> tuple[bytes, bool]:
    import sys

    source = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
    if source is None:
        raise InputPathError(["standard input (-) is closed; pipe the output in or give a path"])
    try:
        data, cut = read_stream(source, MAX_TEXT_BYTES)
    except OSError as exc:
        raise InputPathError([f"reading standard input (-) failed: {exc.strerror or exc}"]) from None
    return data, cut


def _stream_evidence(name: str, data: bytes, cut: bool) -> Evidence:
    item = Evidence(name=name, data=data, meta={"stream": True})
    if cut:
        item.notes.append(f"only the first {MAX_TEXT_BYTES // (1024 * 1024)} MiB of {name} were read (the limit "
                          "for one input); save the output to files of that size to analyze the rest")
    return item


# What the first bytes of a bundle archive can be (`k3diag.bundle.looks_like_bundle` decides):
# gzip, bzip2 or xz, or a tar header (`ustar`, or a v7 header's octal checksum field).
_BUNDLE_MAGICS = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_TAR_BLOCK = 512


def _may_be_bundle(path: Path) -> bool:
    """False when the first bytes rule a bundle out, so that `k3diag.bundle` (tarfile, lzma, bz2...)
    is imported only for inputs that could be one: most inputs are a text file or two."""
    try:
        if path.is_dir():
            return (path / "manifest.json").is_file()
        if not path.is_file():
            return False  # a FIFO or stdin is read once, as evidence
        handle, _ = open_input(path)
        with handle:
            head = handle.read(_TAR_BLOCK)
    except OSError:
        return False
    if head.startswith(_BUNDLE_MAGICS):
        return True
    checksum = head[148:156].replace(b"\x00", b" ").strip()
    return len(head) == _TAR_BLOCK and (head[257:262] == b"ustar" or bool(checksum) and checksum.isdigit())


def _is_bundle(path: Path) -> bool:
    if not _may_be_bundle(path):
        return False
    try:
        from k3diag.bundle import looks_like_bundle
    except ModuleNotFoundError:
        return False
    try:
        return looks_like_bundle(path)
    except OSError:
        return False


def _walk_folder(folder: Path) -> tuple[list[Evidence], list[InputRecord]]:
    evidence: list[Evidence] = []
    problems: list[InputRecord] = []
    base_depth = len(folder.parts)
    count = 0
    too_deep: list[str] = []
    hidden = 0
    unlisted: list[str] = []

    def listing_failed(exc: OSError) -> None:
        unlisted.append(f"{exc.filename or folder}: {exc.strerror or exc}")

    for current, dirs, files in os.walk(folder, followlinks=False, onerror=listing_failed):
        depth = len(Path(current).parts) - base_depth
        visible = sorted(d for d in dirs if not d.startswith("."))
        hidden += len(dirs) - len(visible)
        if depth >= MAX_FOLDER_DEPTH:
            too_deep.extend(str(Path(current) / d) for d in visible)
            visible = []
        dirs[:] = visible
        for file_name in sorted(files):
            if file_name.startswith("."):
                hidden += 1
                continue
            path = Path(current) / file_name
            try:
                mode = os.lstat(path).st_mode
            except OSError as exc:  # a folder that may be listed but not entered (read without execute)
                problems.append(_problem(str(path), f"{path} cannot be read ({exc.strerror or exc}); check the "
                                                    "permissions of its folder"))
                continue
            if stat.S_ISLNK(mode):
                problems.append(_problem(str(path), f"{path} is a symbolic link and was not followed"))
                continue
            if not stat.S_ISREG(mode):
                # Opening a FIFO blocks until someone writes to it: never open what is not a plain file.
                problems.append(_problem(str(path), f"{path} is not a regular file (a device, socket or pipe) "
                                                    "and was skipped"))
                continue
            count += 1
            if count > MAX_FOLDER_FILES:
                problems.append(_problem(str(folder), f"{folder} holds more than {MAX_FOLDER_FILES} files; only "
                                                      f"the first {MAX_FOLDER_FILES} were read"))
                return evidence, problems
            evidence.append(Evidence(name=str(path), path=path, follow_links=False))
    if too_deep:
        shown = ", ".join(too_deep[:3]) + (" ..." if len(too_deep) > 3 else "")
        one = len(too_deep) == 1
        problems.append(_problem(str(folder), f"{counted(len(too_deep), 'folder')} in {folder} "
                                              f"{'nests' if one else 'nest'} deeper than {MAX_FOLDER_DEPTH} levels "
                                              f"and {'was' if one else 'were'} not read: {shown}; give "
                                              f"{'it as a path of its own' if one else 'them as paths of their own'}"))
    if hidden:
        one = hidden == 1
        problems.append(_problem(str(folder), f"{hidden} hidden {'file or folder' if one else 'files or folders'} "
                                              f"in {folder} (names starting with '.') {'was' if one else 'were'} not "
                                              f"read; give {'it as a path' if one else 'them as paths'} to read them"))
    for failure in unlisted:
        problems.append(_problem(str(folder), f"could not list {failure}; its files were not read"))
    if count == 0 and not unlisted:
        # an empty folder (or one of hidden files, links and pipes only) says so, not just "nothing read"
        problems.append(_problem(str(folder), f"{folder} holds no file to read" + (
            " besides those named above" if problems else "")))
    return evidence, problems


def _problem(name: str, message: str) -> InputRecord:
    return InputRecord(path=name, format="unknown", warnings=[message])


def load_machines(paths: list[Path]) -> tuple["MachineSet", list[str]]:
    """Build one model per machine the saved evidence describes (never one model of two machines).
    Returns them and the one-sentence problems met. A bundle's manifest fills the host facts (host name,
    kernel, driver) its evidence left empty when the inputs are one machine, as `fleet` and `audit` read it."""
    from k3diag.join.machines import build_machines, machine_of_bundle

    manifests: list[dict] = []
    evidence, problems = evidence_from_paths(paths, manifests=manifests)
    machines = build_machines(evidence, problems)
    machines.manifests = manifests
    if not machines.several and len(manifests) == 1:
        machine_of_bundle(machines, manifests[0])
    errors = [warning for record in problems for warning in record.warnings if record.format == "unknown"]
    return machines, errors


def pick_machine(machines: "MachineSet") -> tuple[Machine, int, str]:
    """The one machine a command that judges one answers for, its index and why: with several, for one
    bundle the machine it is of (`join.machines.machine_of_bundle`, as the audit chooses, the manifest's host
    facts filled in), else the first. The machine's note says the others were left out."""
    from k3diag.join.machines import machine_of_bundle

    manifests = machines.manifests
    index, why = 0, "it is the first the inputs describe"
    if machines.several and len(manifests) == 1:
        index, why = machine_of_bundle(machines, manifests[0])
    machine = machines.machines[index]
    if machines.several:
        others = len(machines.machines) - 1
        machine.note("inputs", f"these inputs describe {len(machines.machines)} machines; only {machine.label} is "
                               f"shown here and the {counted(others, 'other')} {'is' if others == 1 else 'are'} "
                               "left out; `k3diag analyze` reports each one")
    return machine, index, why


def load_machine(paths: list[Path]) -> tuple[Machine, list[str]]:
    """The model of one machine the saved evidence describes (`pick_machine`), and the problems met."""
    machines, errors = load_machines(paths)
    machine, _, _ = pick_machine(machines)
    return machine, errors


def load_live_machine(
    root: Path = Path("/"), timeout_s: float = 20.0, progress: Callable[[str], None] | None = None,
    texts: str = "all", deadline_s: float | None = None,
) -> tuple[Machine, list[Evidence]]:
    """Collect from this host and build the model; also returns the evidence (for `collect`).
    `texts="missing"` skips tool outputs whose facts the in-process readings already gave.
    `timeout_s` bounds each command, `deadline_s` (when given) the whole collection."""
    from k3diag.collect.live import collect_live
    from k3diag.collect.runner import Deadline
    from k3diag.join.build import build_machine

    evidence = collect_live(root=root, timeout_s=timeout_s, progress=progress, texts=texts,
                            deadline=Deadline(deadline_s))
    machine = build_machine(evidence, Machine(live=True))
    return machine, evidence
