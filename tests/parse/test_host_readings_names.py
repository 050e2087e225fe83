"""The host readings `k3diag collect` writes: a host name that is no host name is said and not used."""

from __future__ import annotations

import json

import pytest

from k3diag.model.identity import is_hostname
from k3diag.parse import host_readings
from k3diag.parse.text import Section


@pytest.mark.parametrize("name, ok", [
    ("gpu042", True), ("GPU-node-7.cluster.local", True), ("ip-10-0-0-1.ec2.internal.", True), ("node_3", True),
    ("gpu01\nevil_metric 1", False), ("gpu 42", False), ('gpu"42', False), ("<b>gpu</b>", False),
    ("gpu042\x1b[31m", False), ("a" * 64, False), ("", False), ("-gpu", False),
])
def test_what_a_host_name_is(name: str, ok: bool) -> None:
    assert is_hostname(name) is ok


def test_a_host_reading_that_is_no_host_name_is_said_and_left_out() -> None:
    text = json.dumps({"schema": "k3diag.host-readings/1", "hostname": "gpu01\nevil", "kernel": "6.8.0"})
    result = host_readings.parse(Section(text, 1), "host-readings.json")
    assert result.host.hostname is None and result.host.kernel == "6.8.0"
    assert result.warnings == ["host readings: the host name 'gpu01\\nevil' is no host name (letters, digits, "
                               "dashes and dots only); not used"]
