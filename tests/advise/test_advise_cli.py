"""`k3diag advise` end to end: the five plans the issue asks for, JSON fields, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from k3diag.cli import app
from k3diag.commands.advise import parse_context

runner = CliRunner()
NVIDIA_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"
H100_BUNDLE = Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "good-8x-h100-nvlink"


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["advise", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str) -> dict:
    code, out, err = run(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def by_label(data: dict, label: str) -> dict:
    return next(l for l in data["layouts"] if l["layout"] == label)


def test_k3_on_8_mi355x_reproduces_the_published_figures_in_json():
    data = run_json("--model", "k3", "--gpu", "mi355x", "--count", "8")
    assert data["context"] == 1_048_576  # default: the model's maximum
    tp8 = by_label(data, "TP8")
    assert (tp8["dp"], tp8["tp"], tp8["pp"], tp8["ep"], tp8["fits"]) == (1, 8, 1, 1, True)
    per_gpu = tp8["per_gpu"]
    assert per_gpu["weights_gib"] == pytest.approx(190.974, abs=0.01)
    assert per_gpu["state_gib_per_sequence"] == pytest.approx(14.427, abs=0.005)
    weights = sum(l["gib"] for l in per_gpu["lines"] if l["kind"] == "weights")
    assert weights == pytest.approx(per_gpu["weights_gib"], abs=0.002)
    reserve = sum(l["gib"] for l in per_gpu["lines"] if l["kind"] == "reserve")
    assert per_gpu["free_gib"] == pytest.approx(per_gpu["memory_gib"] - per_gpu["weights_gib"] - reserve, abs=0.002)
    assert tp8["decode_ms_floor"] > 0 and tp8["decode_ms_comm"] > 0
    assert data["verdict"]["loads"]["answer"] == "yes" and data["verdict"]["generates"]["answer"] == "yes"
    assert data["verdict"]["serves"]["answer"] == "needs measurement"
    assert data["best_capacity"] == "TP1 x PP8"  # the MLA cache splits under PP: most 1M-token sequences
    assert any("vllm bench serve" in m for m in data["measure"])
    assert any("TTFT" in c for c in data["cannot_know"])


def test_k3_on_8_mi355x_text_shows_the_breakdown():
    code, out, _ = run("--model", "k3", "--gpu", "mi355x", "--count", "8", "--tp", "8", "--ep", "1")
    assert code == 0
    assert "= weights                                190.974" in out
    assert "= one 1M-token sequence                   14.427" in out
    assert "MLA latent cache" in out and "the latent is not split by TP" in out
    assert "latent MoE projections" in out and "whole on every GPU" in out
    assert "\x1b[" not in out  # plain text when not a terminal


def test_k3_on_16_h200_plans_tp_inside_nodes():
    data = run_json("--model", "k3", "--gpu", "h200", "--count", "16")
    rec = data["recommended"]
    assert rec["tp"] <= 8 and rec["pp"] >= 2 and rec["fits"]
    assert rec["links"]["tp"]["class"] == "nvlink"
    assert data["hardware"]["nodes"] == 2
    tp16 = by_label(data, "TP16")
    assert tp16["links"]["tp"]["class"] == "ib-400g" and any("TP16" in w for w in tp16["warnings"])
    assert tp16["decode_ms_comm"] > rec["decode_ms_comm"]


def test_k3_on_8_h100_does_not_fit_and_says_what_would():
    code, out, _ = run("--model", "k3", "--gpu", "h100", "--count", "8")
    assert code == 0
    assert "loads      no" in out
    assert "24 x NVIDIA H100 SXM 80GB (3 nodes x 8)" in out
    assert "AMD Instinct MI355X" in out  # bigger GPUs at the same count
    data = run_json("--model", "k3", "--gpu", "h100", "--count", "8")
    assert data["recommended"] is None and all(not l["fits"] for l in data["layouts"])
    assert data["verdict"]["generates"]["answer"] == "no"


def test_k2_thinking_on_2_m3_ultra():
    data = run_json("--model", "k2-thinking", "--gpu", "m3-ultra", "--count", "2")
    assert data["verdict"]["generates"]["answer"] == "yes"
    assert data["model"]["weights_total_gb"] == pytest.approx(594, rel=0.01)
    tp2 = by_label(data, "TP2")
    assert tp2["links"]["tp"]["class"] == "thunderbolt5-rdma"
    assert any("Thunderbolt" in w for w in tp2["warnings"])
    assert any(l["label"] == "OS/driver limit" for l in tp2["per_gpu"]["lines"])
    assert not any(m.startswith("vllm") for m in data["measure"])  # no CUDA engines on macOS


def test_llama_70b_on_4_rtx4090_bf16_does_not_load_and_int4_plans_over_pcie():
    code, out, _ = run("--model", "llama-70b", "--gpu", "rtx4090", "--count", "4")
    assert code == 0 and "loads      no" in out
    assert "--dtype int4" in out and "--dtype fp8" in out
    data = run_json("--model", "llama-70b", "--gpu", "rtx4090", "--count", "4", "--dtype", "int4", "--context", "32k")
    rec = data["recommended"]
    assert rec["layout"] == "TP4" and rec["links"]["tp"]["class"] == "host-staged"
    assert any("PCIe without P2P" in w for w in data["warnings"])
    assert rec["per_gpu"]["state_gib_per_sequence"] == pytest.approx(327_680 / 4 * 32768 / 2**30, abs=0.001)


def test_hardware_from_saved_topology_with_named_gpu():
    topo = NVIDIA_FIXTURES / "topo-m-4x4090-phb-trailing-prompt.txt"
    data = run_json("--model", "llama-70b", "--from", str(topo), "--gpu", "rtx4090", "--dtype", "int4", "--context", "8k")
    assert data["hardware"]["count"] == 4 and data["hardware"]["source"] == str(topo)
    assert data["recommended"]["links"]["tp"]["code"] == "PHB"


def test_paths_may_be_given_as_analyze_and_audit_take_them():
    """`k3diag advise FILE --model M` reads FILE as `--from FILE` does (it was a usage error before)."""
    topo = NVIDIA_FIXTURES / "topo-m-4x4090-phb-trailing-prompt.txt"
    flags = ("--model", "llama-70b", "--gpu", "rtx4090", "--dtype", "int4", "--context", "8k")
    positional = run_json(str(topo), *flags)
    assert positional == run_json("--from", str(topo), *flags)
    assert positional["hardware"]["count"] == 4 and positional["hardware"]["source"] == str(topo)


def test_from_a_file_without_gpu_names_asks_for_gpu():
    topo = NVIDIA_FIXTURES / "topo-m-4x4090-phb-trailing-prompt.txt"
    code, _, err = run("--model", "llama-70b", "--from", str(topo))
    assert code == 64 and "pass --gpu NAME" in err and "Traceback" not in err


def test_train_json_has_ranks():
    data = run_json("--model", "llama-70b", "--gpu", "h100", "--count", "64", "--train", "--tp", "8", "--pp", "4", "--seq-len", "8192")
    ranks = data["ranks"]
    assert [r["in_flight_microbatches"] for r in ranks] == [4, 3, 2, 1]
    assert data["training"]["layout"] == {"dp": 2, "tp": 8, "pp": 4, "ep": 1}
    assert ranks[0]["activations_gib"] > ranks[-1]["activations_gib"]
    code, out, _ = run("--model", "llama-70b", "--gpu", "h100", "--count", "64", "--train", "--tp", "8", "--pp", "4")
    assert "Remedies for rank 0" in out and "recompute=full" in out and "Rank 0 holds 4 micro-batches" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "kimi-k33", "--gpu", "mi355x", "--count", "8"], "Close names: kimi-k3"),
        (["--model", "k3", "--gpu", "mi35x", "--count", "8"], "Close names: mi355x"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "8", "--tp", "16"], "TP16 needs 16 GPUs but only 8"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "8", "--memory-gib", "300"], "more than the 288.0 GiB"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "8", "--context", "2m"], "at most 1,048,576 tokens"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "8", "--context", "lots"], "not a token count"),
        (["--model", "llama-70b", "--gpu", "h100", "--count", "8", "--ep", "2"], "dense"),
        (["--model", "k3", "--gpu", "mi355x"], "--gpu needs --count"),
        (["--gpu", "mi355x", "--count", "8"], "say which model"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "8", "--dtype", "int3"], "unknown dtype 'int3'"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "8", "--optimizer", "sgd"], "--optimizer must be one of"),
        (["--model", "k3", "--gpu", "mi355x", "--count", "0"], "--count must be at least 1"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_64(args, message):
    # a usage error (sysexits EX_USAGE), never 2: CI gates read 2 as "failures found in the hardware"
    code, out, err = run(*args)
    assert code == 64
    assert message in err and "Traceback" not in err and out == ""


def test_config_missing_fields_names_them(tmp_path: Path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000}))
    code, _, err = run("--config", str(cfg), "--gpu", "h100", "--count", "1")
    assert code == 64 and "lacks num_hidden_layers" in err


def test_a_config_number_no_model_has_is_named_not_multiplied(tmp_path: Path, advise_fixtures):
    # `"intermediate_size": 1e308` is an integer to the reader; the memory ledger's products of it overflowed a
    # float and advise ended in a traceback (OverflowError: int too large to convert to float)
    config = json.loads((advise_fixtures / "qwen2.5-vl-3b-config.json").read_text())
    config["text_config"]["intermediate_size"] = 1e308
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    code, out, err = run("--config", str(cfg), "--gpu", "h100", "--count", "8")
    assert code == 64 and out == "" and "Traceback" not in err
    assert "cannot be used: intermediate_size is 1e+308, more than any model has (a damaged file?)" in err


def test_a_config_number_no_int_holds_is_one_sentence(tmp_path: Path, advise_fixtures):
    # json.loads refuses a 5,000-digit number with CPython's own advice ("use sys.set_int_max_str_digits()")
    text = (advise_fixtures / "llama-3.x-70b-instruct-config.json").read_text()
    cfg = tmp_path / "config.json"
    cfg.write_text(text.replace('"intermediate_size": 28672', '"intermediate_size": ' + "9" * 5000, 1))
    code, out, err = run("--config", str(cfg), "--gpu", "h100", "--count", "8")
    assert code == 64 and out == ""
    assert err == f"k3diag advise: {cfg} holds a number of more than 4,300 digits, which no model has (a damaged file?).\n"


def test_a_config_routing_a_token_to_more_experts_than_it_has_is_one_sentence(tmp_path: Path, advise_fixtures):
    # `num_experts_per_tok` above `num_local_experts` ended advise in ZeroDivisionError (C(32, 10^6) is 0)
    config = json.loads((advise_fixtures / "minimax-m1-config.json").read_text())
    config["num_experts_per_tok"] = 1_000_000
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    code, out, err = run("--config", str(cfg), "--gpu", "h100", "--count", "8")
    assert code == 64 and out == "" and "Traceback" not in err
    assert "cannot be used: experts per token (1,000,000) cannot exceed the experts (32)" in err


def test_config_assumptions_are_reported(advise_fixtures):
    data = run_json("--config", str(advise_fixtures / "minimax-m1-config.json"), "--gpu", "h200", "--count", "8", "--context", "32k")
    assert any("moe_intermediate_size not given" in a for a in data["model"]["assumptions"])


def test_list_names_the_catalog():
    code, out, _ = run("--list")
    assert code == 0 and "kimi-k3" in out and "m3-ultra" in out and "288 GiB" in out


def test_reserve_overrides_reach_the_ledger():
    data = run_json("--model", "k3", "--gpu", "mi355x", "--count", "8", "--tp", "8", "--ep", "1",
                    "--reserve-comm-gib", "4", "--reserve-frag-pct", "0", "--reserve-graphs-gib", "0", "--reserve-workspace-gib", "0")
    per_gpu = data["layouts"][0]["per_gpu"]
    assert per_gpu["reserve_gib"] == pytest.approx(4.0)
    assert per_gpu["free_gib"] == pytest.approx(288 - 190.974 - 4, abs=0.01)


def test_parse_context_units():
    assert parse_context("1m") == 1_048_576 and parse_context("128k") == 131_072 and parse_context("8192") == 8192
    assert parse_context(None) is None
    with pytest.raises(ValueError):
        parse_context("1.5k5")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=12))
def test_parse_context_raises_only_value_errors(text):
    try:
        value = parse_context(text)
    except ValueError:
        return
    assert value is None or value >= 0


def test_live_host_without_gpus_says_so(monkeypatch):
    import k3diag.inputs
    from k3diag.model.machine import Machine

    monkeypatch.setattr(k3diag.inputs, "load_live_machine", lambda *a, **k: (Machine(live=True), []))
    code, _, err = run("--model", "k3")
    assert code == 3 and "no GPUs were found in this host" in err


def test_live_collection_failure_is_one_sentence(monkeypatch):
    import k3diag.inputs

    def boom(*args, **kwargs):
        raise PermissionError("sysfs not readable")

    monkeypatch.setattr(k3diag.inputs, "load_live_machine", boom)
    code, _, err = run("--model", "k3")
    assert code == 3 and "could not read this host (sysfs not readable)" in err


def test_json_is_strict_json_a_one_gpu_dimension_has_null_bandwidth():
    """`"bandwidth_gbs": Infinity` (EP1 or PP1: no link) is not JSON: JSON.parse, Go's encoding/json and
    serde_json refuse the whole plan. Every number is finite; the link-less dimension says null."""
    code, out, err = run("--model", "k3", "--gpu", "mi355x", "--count", "8", "--json")
    assert code == 0, err

    def refuse(constant: str) -> float:
        raise AssertionError(f"{constant} in advise --json")

    data = json.loads(out, parse_constant=refuse)
    tp8 = by_label(data, "TP8")
    assert tp8["links"]["ep"]["class"] == "none" and tp8["links"]["ep"]["bandwidth_gbs"] is None
    assert tp8["links"]["tp"]["bandwidth_gbs"] > 0


def test_a_negative_memory_reading_never_becomes_the_gpu_size(tmp_path) -> None:
    # nvml-readings.json with GPU0 at -5 MiB (a damaged file): advise planned for "-0.0 GiB" per GPU and
    # said nothing loads; the reading is ignored and the others' size is used
    import shutil

    bundle = tmp_path / "node"
    shutil.copytree(H100_BUNDLE, bundle)
    readings = bundle / "evidence" / "nvml-readings.json"
    document = json.loads(readings.read_text())
    sizes = {d["memory_total_mib"] for d in document["devices"]}
    document["devices"][0]["memory_total_mib"] = -5
    readings.write_text(json.dumps(document))
    code, out, _ = run("--model", "llama-70b", "--from", str(bundle))
    assert code == 0 and "-0.0 GiB" not in out
    hardware = next(line for line in out.splitlines() if line.startswith("Hardware"))
    assert f"{min(sizes) / 1024:.1f} GiB" in hardware, hardware


def test_inputs_that_name_no_gpu_model_say_what_to_add_not_that_the_catalog_lacks_it() -> None:
    # `nvidia-smi topo -m` names no GPU model: "GPU0 (no name reported) ... are not in the catalog" blamed the
    # catalog for what the inputs left out
    code, out, err = run("--model", "k3", "--from", str(NVIDIA_FIXTURES / "topo-m-2gpu-nv2-numa-na.txt"))
    assert code == 64
    assert "names the GPUs' model (2 GPUs seen, none named)" in err
    assert "add `nvidia-smi -q`" in err and "or pass --gpu NAME" in err
    assert "no name reported" not in err and "not in the catalog" not in err


def test_the_audit_says_the_same_without_an_exception_name(tmp_path) -> None:
    import shutil

    bundle = tmp_path / "vendor"
    (bundle / "evidence").mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"schema": "k3diag.bundle/1", "host": {"hostname": "vendor"}}))
    shutil.copy(NVIDIA_FIXTURES / "topo-m-2gpu-nv2-numa-na.txt", bundle / "evidence" / "nvidia-smi-topo-m.txt")
    result = runner.invoke(app, ["audit", str(bundle), "--model", "k3"])
    assert "advise could not plan: no input in" in result.stdout
    assert "AdviceError" not in result.stdout
