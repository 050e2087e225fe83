"""Run the probe for a command (`k3diag probe`, `collect --probe`): in a child process under a hard
deadline, its readings returned as evidence like any other source's."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from k3diag.collect.probe.measure import FORMAT, READINGS_NAME, ProbeOptions
from k3diag.collect.runner import run_command
from k3diag.evidence import Evidence

# cuInit and one primary context per GPU take seconds on a big box before any copy starts; the
# child gets this long beyond its own deadline (up to START_GRACE_S) before it is killed.
START_GRACE_S = 30.0
MIN_GRACE_S = 5.0


def child_timeout_s(deadline_s: float) -> float:
    return deadline_s + min(START_GRACE_S, MIN_GRACE_S + deadline_s)


def probe_evidence(options: ProbeOptions, vendor: str = "auto") -> Evidence:
    settings = dict(asdict(options), vendor=vendor)
    argv = [sys.executable, "-m", "k3diag.collect.probe.child", json.dumps(settings)]
    timeout_s = child_timeout_s(options.deadline_s)
    evidence = run_command(argv, name=READINGS_NAME, timeout_s=timeout_s, format_hint=FORMAT)
    evidence.kind = "reading"
    evidence.command = "k3diag probe"
    if evidence.timed_out:
        evidence.error = (f"the probe did not finish within {timeout_s:g} s and was stopped: "
                          "a GPU driver call did not return (check `dmesg | grep -i xid` and `nvidia-smi`)")
    elif evidence.error is None and evidence.data:
        try:
            json.loads(evidence.data)
        except ValueError:
            evidence.error = "the probe's child process printed something that is not a readings document"
    return evidence
