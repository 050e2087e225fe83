"""The layer contracts in pyproject.toml hold, and would catch a wrong arrow.

`lint-imports` runs the same contracts from the command line; this test makes a broken layer
fail the suite (and so CI) without anyone remembering to run it.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

importlinter = pytest.importorskip("importlinter")

from importlinter import configuration  # noqa: E402
from importlinter.application import use_cases  # noqa: E402
from importlinter.contracts.layers import LayersContract  # noqa: E402

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

configuration.configure()


def _options():
    return use_cases.read_user_options(config_filename=str(PYPROJECT))


def _layers_contract() -> LayersContract:
    options = _options()
    (layer_options,) = [c for c in options.contracts_options if c["type"] == "layers"]
    return LayersContract(name=layer_options["name"], session_options=options.session_options,
                          contract_options=layer_options)


def test_every_contract_is_kept(capsys: pytest.CaptureFixture[str]) -> None:
    # The same entry point as the `lint-imports` script.
    result = use_cases.lint_imports(config_filename=str(PYPROJECT), cache_dir=None, no_logo=True)
    output = capsys.readouterr().out
    assert result == use_cases.SUCCESS, output
    assert "Layers point one way KEPT" in output
    assert "Leaf modules import nothing from k3diag KEPT" in output


def test_layers_run_from_the_cli_down_to_the_model() -> None:
    layers = _options().contracts_options
    (layer_options,) = [c for c in layers if c["type"] == "layers"]
    order = [str(layer) for layer in layer_options["layers"]]
    assert order[0] == "k3diag.cli" and order[-1] == "k3diag.model"
    assert order.index("k3diag.join") < order.index("k3diag.parse | k3diag.collect")
    assert order.index("k3diag.analyze") < order.index("k3diag.join")


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("k3diag.model.machine", "k3diag.join.build"),  # the model reaching up into the join
        ("k3diag.model.topology", "k3diag.parse.ids"),  # the model using a parser's helper
        ("k3diag.parse.lspci", "k3diag.join.merge_pci"),  # a parser knowing its merger
        ("k3diag.parse.host_readings", "k3diag.collect.host"),  # parse and collect are independent
        ("k3diag.analyze.engine", "k3diag.render.terminal"),  # analysis knowing how it is drawn
    ],
)
def test_a_wrong_arrow_breaks_the_layers(importer: str, imported: str) -> None:
    graph = grimp.build_graph("k3diag", cache_dir=None)
    contract = _layers_contract()
    assert contract.check(graph, verbose=False).kept
    graph.add_import(importer=importer, imported=imported)
    assert not contract.check(graph, verbose=False).kept
