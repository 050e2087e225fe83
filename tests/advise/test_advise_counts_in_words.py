"""The advice counts sequences and layouts in words: '1 sequence of 96K', '2 sequences of 64K',
'1 more layout in --json, not fitting', never 'sequence(s)'."""

from __future__ import annotations

from typer.testing import CliRunner

from k3diag.cli import app

runner = CliRunner()


def _advise(*args: str) -> str:
    result = runner.invoke(app, ["advise", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.stdout


def _llama_4090(context: str) -> str:
    return _advise("--model", "llama-70b", "--gpu", "rtx4090", "--count", "4", "--dtype", "int4", "--context", context)


def test_one_sequence_per_replica_is_singular() -> None:
    out = _llama_4090("96k")
    assert "of 24.0 GiB: 1 sequence of 96K per replica" in out
    assert "TP4 also holds one 98,304-token sequence (7.500 GiB per GPU) and 1 such sequence at once." in out
    assert "3 more layouts in --json, 3 of them not fitting." in out


def test_several_sequences_per_replica_are_plural() -> None:
    out = _llama_4090("64k")
    assert "of 24.0 GiB: 2 sequences of 64K per replica" in out
    assert "and 2 such sequences at once." in out


def test_one_more_layout_is_singular() -> None:
    out = _advise("--model", "k2-thinking", "--gpu", "m3-ultra", "--count", "2")
    assert "1 more layout in --json, not fitting." in out.splitlines()


def test_gpus_not_in_the_catalog_one_and_several() -> None:
    from k3diag.advise.hardware import hardware_from_machine
    from k3diag.model.machine import Machine

    for unknown, said in ((1, "1 GPU not recognized (NVIDIA Mystery 1)"), (2, "2 GPUs not recognized (NVIDIA Mystery 1, ")):
        machine = Machine()
        for index in range(1 + unknown):
            gpu = machine.gpu(index)
            gpu.name = "NVIDIA H100 80GB HBM3" if index == 0 else f"NVIDIA Mystery {index}"
            gpu.memory_total_mib = 81559
        notes = hardware_from_machine(machine, "topo.txt").notes
        assert any(note.startswith(said) for note in notes), notes
