"""The Kubernetes manifests in deploy/kubernetes/ against the Kubernetes API schemas (kubernetes-validate,
offline, strict: an unknown or misspelled field fails), and the node-problem-detector plugin they ship run
for real over fixture bundles."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((REPO / "deploy" / "kubernetes").glob("*.yaml"))
BAD = REPO / "fixtures" / "bundles" / "bad-8x-pcie-dual-socket"
GOOD = REPO / "fixtures" / "bundles" / "good-8x-h100-nvlink"

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of kubernetes-validate) is not installed")
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (pip install '.[test]')")
# The oldest release the manifests claim: backoffLimitPerIndex/maxFailedIndexes are GA from 1.33.
VERSIONS = ["1.33.0", kubernetes_validate.latest_version()]


def _documents() -> list[tuple[str, dict]]:
    docs = []
    for path in MANIFESTS:
        for number, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc:
                docs.append((f"{path.name}#{number}:{doc.get('kind')}", doc))
    return docs


DOCUMENTS = _documents()


def test_every_manifest_is_there() -> None:
    kinds = sorted(doc["kind"] for _, doc in DOCUMENTS)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Job", "Namespace",
                     "ServiceAccount"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name, doc", DOCUMENTS, ids=[name for name, _ in DOCUMENTS])
def test_manifest_is_valid_for_kubernetes(name: str, doc: dict, version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{name} is not a valid {doc['kind']} for Kubernetes {version}: {exc.message} at "
                    f"{'/'.join(str(p) for p in exc.path)}")


def _config() -> dict:
    return next(doc for _, doc in DOCUMENTS if doc["kind"] == "ConfigMap")["data"]


def test_npd_monitor_config_points_at_the_shipped_plugin_within_its_limits() -> None:
    data = _config()
    monitor = json.loads(data["k3diag-monitor.json"])
    assert monitor["plugin"] == "custom" and monitor["pluginConfig"]["max_output_length"] == 80
    rule = monitor["rules"][0]
    assert rule["type"] == "permanent" and rule["condition"] == monitor["conditions"][0]["type"]
    assert rule["path"] == "/config/k3diag-plugin.sh"
    daemonset = next(doc for _, doc in DOCUMENTS if doc["kind"] == "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert "--config.custom-plugin-monitor=/config/k3diag-monitor.json" in container["command"]
    assert any(m["mountPath"] == "/config" for m in container["volumeMounts"])
    # k3diag's own deadline (45 s in the plugin) is below the rule's timeout (55 s) and NPD's (60 s).
    assert "--deadline 45" in data["k3diag-plugin.sh"]
    assert int(rule["timeout"].rstrip("s")) < int(monitor["pluginConfig"]["timeout"].rstrip("s"))


@pytest.mark.parametrize("bundle, code, first", [
    (BAD, 1, "FAIL pcie-width-below-max GPU2: GPU2 link runs at x8 of x16"),
    (GOOD, 0, "OK no failure or warning (0 failures, 0 warnings)"),
])
def test_the_npd_plugin_script_speaks_the_plugin_protocol(tmp_path: Path, bundle: Path, code: int, first: str) -> None:
    script = tmp_path / "k3diag-plugin.sh"
    script.write_text(_config()["k3diag-plugin.sh"])
    script.chmod(0o755)
    shim = tmp_path / "bin" / "k3diag"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m k3diag \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{shim.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}", NODE_NAME="gpu-node-7",
               K3DIAG_ARGS=f"--from {bundle}")
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [first] and len(lines[0]) < 80
