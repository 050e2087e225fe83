"""`k3diag advise`: will a model load, generate and serve on this hardware, and how to lay it out."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from k3diag.exit_codes import EXIT_UNKNOWN, EXIT_USAGE

# advise's own refusals are usage errors, 64 like click's (k3diag/cli.py): an unknown model or GPU, flags
# that contradict each other, a config or path that cannot be read. A host or input with no GPU to plan
# for is 3, "cannot be judged", as for every command. Never 2: that says failures were found, and a CI
# gate reading it would blame the hardware for a typo.
USAGE_ERROR = EXIT_USAGE
_CONTEXT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_context(text: str | None) -> int | None:
    """'131072', '128k', '1m' -> tokens (k = 1024, m = 1,048,576, as context sizes are counted)."""
    if text is None:
        return None
    match = _CONTEXT_RE.match(text)
    if not match:
        raise ValueError(f"--context {text!r} is not a token count (examples: 8192, 128k, 1m).")
    value = float(match.group(1))
    unit = match.group(2).lower()
    tokens = value * {"": 1, "k": 1024, "m": 1024 * 1024}[unit]
    if tokens != int(tokens):
        raise ValueError(f"--context {text!r} is not a whole number of tokens.")
    return int(tokens)


def _fail(message: str, code: int = USAGE_ERROR) -> None:
    typer.echo(f"k3diag advise: {message}", err=True)
    raise typer.Exit(code)


def _list_catalogs() -> str:
    from k3diag.advise.catalog import find_model, gpu_catalog, model_names

    lines = ["Models (--model):"]
    for name in model_names():
        spec = find_model(name)
        lines.append(f"  {name:20} {spec.name}; also: {', '.join(spec.aliases)}")
    lines.append("GPUs (--gpu):")
    for gpu in gpu_catalog().gpus:
        lines.append(f"  {gpu.id:14} {gpu.name}, {gpu.memory_gib:.0f} GiB, {gpu.bandwidth_gbs:g} GB/s, {gpu.fabric.kind}")
    return "\n".join(lines) + "\n"


def _machine_from_paths(paths: list[Path]) -> tuple[Any, list[str]]:
    try:
        from k3diag.inputs import load_machine
    except ImportError:
        _fail("reading hardware from files needs k3diag.inputs, which this installation lacks; pass --gpu and --count.")
    from k3diag.commands._inputs import exit_unusable_paths
    from k3diag.inputs import InputPathError

    try:
        return load_machine(paths)
    except InputPathError as exc:  # each sentence names the full path
        exit_unusable_paths(exc, "advise")
    except Exception as exc:  # reading is another module's job; its failure is one sentence here
        _fail(f"could not read {', '.join(str(p) for p in paths)}: {exc}.")
        raise


def _live_machine() -> Any:
    try:
        from k3diag.inputs import load_live_machine
    except ImportError:
        _fail("live collection needs k3diag.inputs, which this installation lacks; pass --gpu and --count.")
    try:
        result = load_live_machine()
    except Exception as exc:  # collection touches the host; its failure is one sentence here
        _fail(f"could not read this host ({exc}); pass --gpu NAME --count N or --from PATH.", EXIT_UNKNOWN)
        raise
    return result[0] if isinstance(result, tuple) else result


def register(app: typer.Typer) -> None:
    @app.command("advise")
    def advise_command(
        paths: Optional[List[Path]] = typer.Argument(
            None, readable=False, help="Hardware from a bundle or saved tool outputs, as `analyze` and `audit` take them "
                       "(the same as --from).", show_default=False),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Catalog model (k3, k2, k2-thinking, deepseek-v3, qwen3-235b, llama-405b, llama-70b...)."),
        config: Optional[Path] = typer.Option(None, "--config", readable=False, help="A Hugging Face config.json for a model not in the catalog."),
        gpu: Optional[str] = typer.Option(None, "--gpu", "-g", help="Catalog GPU (mi355x, h200, h100, b200, rtx4090, m3-ultra...)."),
        count: Optional[int] = typer.Option(None, "--count", "-n", help="Number of GPUs (with --gpu)."),
        from_paths: Optional[List[Path]] = typer.Option(None, "--from", readable=False, help="Hardware from a bundle or saved tool outputs (repeatable)."),
        context: Optional[str] = typer.Option(None, "--context", "-c", help="Tokens per sequence (8192, 128k, 1m); default the model's maximum."),
        tp: Optional[int] = typer.Option(None, "--tp", help="Only layouts with this tensor-parallel size."),
        pp: Optional[int] = typer.Option(None, "--pp", help="Only layouts with this many pipeline stages."),
        ep: Optional[int] = typer.Option(None, "--ep", help="Only layouts with this expert-parallel size."),
        dp: Optional[int] = typer.Option(None, "--dp", help="Only layouts with this many data-parallel replicas."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="Weight format: 'fp8' for every linear layer, or 'routed_experts=int4,attention=fp8'."),
        kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV/latent cache format (bf16, fp8)."),
        memory_gib: Optional[float] = typer.Option(None, "--memory-gib", help="Usable memory per GPU in GiB (at most what the GPU has)."),
        reserve_comm_gib: Optional[float] = typer.Option(None, "--reserve-comm-gib", help="Communication buffers per GPU (default 1, +2 with EP)."),
        reserve_workspace_gib: Optional[float] = typer.Option(None, "--reserve-workspace-gib", help="Kernel workspace per GPU (default 2, less on small GPUs)."),
        reserve_graphs_gib: Optional[float] = typer.Option(None, "--reserve-graphs-gib", help="CUDA/HIP graphs per GPU (default 1)."),
        reserve_frag_pct: Optional[float] = typer.Option(None, "--reserve-frag-pct", help="Fragmentation, % of GPU memory (default 5)."),
        reserve_os_pct: Optional[float] = typer.Option(None, "--reserve-os-pct", help="Memory the OS keeps from the GPU, % (Apple default 25)."),
        chunk_tokens: int = typer.Option(8192, "--chunk-tokens", help="Prefill chunk size for per-step buffers (AttnRes)."),
        batch: int = typer.Option(1, "--batch", help="Sequences decoded together for the roofline."),
        train: bool = typer.Option(False, "--train", help="Training memory per pipeline rank instead of serving."),
        seq_len: int = typer.Option(4096, "--seq-len", help="Training: tokens per sequence."),
        micro_batch_size: int = typer.Option(1, "--micro-batch-size", help="Training: sequences per micro-batch."),
        micro_batches: Optional[int] = typer.Option(None, "--micro-batches", help="Training: micro-batches per step (default 4 x PP)."),
        optimizer: str = typer.Option("adam", "--optimizer", help="Training: adam or muon."),
        zero: int = typer.Option(1, "--zero", help="Training: ZeRO stage 0-3."),
        recompute: str = typer.Option("selective", "--recompute", help="Training: none, selective or full."),
        fp8_activations: bool = typer.Option(False, "--fp8-activations", help="Training: store activations in FP8."),
        offload: bool = typer.Option(False, "--offload", help="Training: offload in-flight activations to CPU."),
        as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON (schema k3diag.advise/1)."),
        list_catalog: bool = typer.Option(False, "--list", help="List the catalog's models and GPUs and exit."),
    ) -> None:
        """Will MODEL load, generate and serve on this hardware? Memory ledger, layouts, roofline decode time."""
        # `k3diag advise BUNDLE --model k3`, like `k3diag audit BUNDLE --model k3`: paths given either way
        from_paths = [*(from_paths or []), *(paths or [])] or None
        from k3diag.model import json_text

        from k3diag.advise.catalog import CatalogError, find_model, load_config_file, parse_dtype_overrides, with_overrides
        from k3diag.advise.memory import ReserveSettings
        from k3diag.advise.hardware import AdviceError, NoGpuError, hardware_from_flags, hardware_from_machine
        from k3diag.advise.plan import advise
        from k3diag.advise.render import render
        from k3diag.advise.training import OPTIMIZERS, RECOMPUTE_MODES, TrainSettings

        if list_catalog:
            typer.echo(_list_catalogs(), nl=False)
            raise typer.Exit(0)
        if model and config:
            _fail("give --model or --config, not both.")
        if not model and not config:
            _fail("say which model: --model NAME (see --list) or --config path/to/config.json.")
        if from_paths and (gpu or count):
            if count is not None or not gpu:
                _fail("--from reads the GPUs and their count from the files; drop --count (keep --gpu only to name an unrecognized GPU).")
        if count is not None and not gpu:
            _fail("--count needs --gpu to say which GPU.")
        if gpu and count is None and not from_paths:
            _fail("--gpu needs --count to say how many.")
        if optimizer not in OPTIMIZERS:
            _fail(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, not {optimizer!r}.")
        if recompute not in RECOMPUTE_MODES:
            _fail(f"--recompute must be one of {', '.join(RECOMPUTE_MODES)}, not {recompute!r}.")
        if zero not in (0, 1, 2, 3):
            _fail(f"--zero must be 0, 1, 2 or 3, not {zero}.")
        for name, value in (("--seq-len", seq_len), ("--micro-batch-size", micro_batch_size), ("--chunk-tokens", chunk_tokens)):
            if value < 1:
                _fail(f"{name} must be at least 1, not {value}.")
        if micro_batches is not None and micro_batches < 1:
            _fail(f"--micro-batches must be at least 1, not {micro_batches}.")
        for name, value in (
            ("--reserve-comm-gib", reserve_comm_gib),
            ("--reserve-workspace-gib", reserve_workspace_gib),
            ("--reserve-graphs-gib", reserve_graphs_gib),
            ("--reserve-frag-pct", reserve_frag_pct),
            ("--reserve-os-pct", reserve_os_pct),
        ):
            if value is not None and value < 0:
                _fail(f"{name} cannot be negative.")
        for name, value in (("--reserve-frag-pct", reserve_frag_pct), ("--reserve-os-pct", reserve_os_pct)):
            if value is not None and value >= 100:
                _fail(f"{name} must be below 100.")

        notes: list[str] = []
        try:
            tokens = parse_context(context)
            if config is not None:
                spec, _assumed = load_config_file(config)
            else:
                spec = find_model(model or "")
            spec = with_overrides(spec, parse_dtype_overrides(dtype), kv_dtype)
            if from_paths:  # a path that is not there is named as every command names it (`exit_unusable_paths`)
                machine, errors = _machine_from_paths(list(from_paths))
                notes.extend(errors)
                label = ", ".join(str(p) for p in from_paths)
                hardware = hardware_from_machine(machine, label, memory_gib, gpu)
            elif gpu:
                hardware = hardware_from_flags(gpu, count or 0, memory_gib)
            else:
                machine = _live_machine()
                hardware = hardware_from_machine(machine, "this host", memory_gib)
            reserve = ReserveSettings(
                comm_gib=reserve_comm_gib,
                workspace_gib=reserve_workspace_gib,
                graphs_gib=reserve_graphs_gib,
                frag_pct=reserve_frag_pct,
                os_pct=reserve_os_pct,
                chunk_tokens=chunk_tokens,
            )
            settings = None
            if train:
                settings = TrainSettings(
                    seq_len=seq_len,
                    micro_batch_size=micro_batch_size,
                    micro_batches=micro_batches,
                    optimizer=optimizer,
                    zero=zero,
                    recompute=recompute,
                    fp8_activations=fp8_activations,
                    offload=offload,
                )
            plan = advise(spec, hardware, context=tokens, reserve=reserve, tp=tp, pp=pp, ep=ep, dp=dp, batch=batch, train=settings)
        except NoGpuError as exc:
            _fail(str(exc), EXIT_UNKNOWN)
            return
        except (CatalogError, AdviceError, ValueError) as exc:
            _fail(str(exc))
            return
        plan.notes.extend(notes)
        if as_json:
            data = plan.to_json()
            if plan.training is not None:
                data["ranks"] = data["training"]["ranks"]
            typer.echo(json_text.dumps(data, indent=2))
            return
        text = render(plan, terminal=sys.stdout.isatty())
        if text is not None:
            typer.echo(text, nl=False)
