"""Draining and resuming this node through `scontrol`, as LBNL NHC does.

On failure the node is drained with the reason `k3diag: <finding-id> <subject>`; on a later pass it is
resumed only if its current reason starts with `k3diag:`, so a node an administrator drained by hand
(or another health checker drained) is never put back into service by k3diag (NHC's rule; a hung check
that resumed a manually drained node is mej/nhc#134).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from k3diag.collect.runner import run_command

REASON_PREFIX = "k3diag:"
# Slurm keeps reasons of any length, but `sinfo -R` shows about 20 characters; the id comes first.
MAX_REASON_CHARS = 120
SCONTROL_TIMEOUT_S = 10.0
_REASON_LINE = re.compile(r"^\s*Reason=(?P<reason>.*?)(?:\s+\[[^\]]*@[^\]]*\])?\s*$")
_STATE = re.compile(r"\bState=(?P<state>\S+)")


@dataclass
class NodeStatus:
    state: str | None
    reason: str | None

    @property
    def drained(self) -> bool:
        return bool(self.state) and ("DRAIN" in self.state.upper())  # DRAIN, DRAINING, DRAINED, IDLE+DRAIN


def parse_show_node(text: str) -> NodeStatus:
    """State and reason from `scontrol show node NAME` (the `[user@time]` suffix is dropped)."""
    state = None
    reason = None
    for line in text.splitlines():
        if state is None:
            match = _STATE.search(line)
            if match:
                state = match.group("state")
        match = _REASON_LINE.match(line)
        if match:
            reason = match.group("reason").strip() or None
    if reason in ("(null)", "None"):
        reason = None
    return NodeStatus(state=state, reason=reason)


def drain_reason(finding_id: str, subject: str) -> str:
    reason = " ".join(f"{REASON_PREFIX} {finding_id} {subject}".split())
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."


class SlurmError(Exception):
    """scontrol could not be asked or refused; `str()` says what and what to check."""


def _scontrol(args: list[str], scontrol: str) -> str:
    evidence = run_command([scontrol, *args], name="scontrol", timeout_s=SCONTROL_TIMEOUT_S)
    if evidence.error:
        raise SlurmError(evidence.error)
    return (evidence.data or b"").decode("utf-8", "replace")


def node_status(node: str, scontrol: str = "scontrol") -> NodeStatus:
    return parse_show_node(_scontrol(["show", "node", node], scontrol))


def apply(node: str, failed: bool, passed: bool, reason: str | None, scontrol: str = "scontrol") -> str:
    """Drain on failure, resume a k3diag drain on a pass, leave everything else alone; says what it did."""
    status = node_status(node, scontrol)
    ours = bool(status.reason and status.reason.startswith(REASON_PREFIX))
    if failed and reason:
        if status.drained and not ours:
            return (f"slurm: {node} is already drained by someone else (Reason={status.reason}); "
                    "left as it is")
        if status.drained and status.reason == reason:
            return f"slurm: {node} stays drained: {reason}"
        _scontrol(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"], scontrol)
        return f"slurm: drained {node}: {reason}"
    if passed:
        if status.drained and ours:
            _scontrol(["update", f"NodeName={node}", "State=RESUME"], scontrol)
            return f"slurm: resumed {node} (its drain reason was {status.reason})"
        if status.drained:
            return (f"slurm: {node} passes, but was drained by someone else (Reason={status.reason}); "
                    "not resumed")
        return f"slurm: {node} passes and is in service ({status.state})"
    return f"slurm: {node} could not be judged; its state ({status.state}) was left as it is"
