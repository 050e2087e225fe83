"""`k3diag audit BUNDLE`: answer the buyer's checklist from a vendor's bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("audit")
    def audit(
        bundle: Path = typer.Argument(..., readable=False, help="The bundle the vendor sent (.tar.gz or folder from `k3diag collect`)."),
        model: Optional[str] = typer.Option(None, "--model", help="Target model for the layout questions, e.g. k3."),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write a self-contained HTML report here."),
        md: Optional[Path] = typer.Option(None, "--md", help="Also write a Markdown report here."),
        as_json: bool = typer.Option(False, "--json", help="Print the audit as JSON (schema k3diag.audit/1)."),
        expect: Optional[Path] = typer.Option(None, "--expect", readable=False, help="Purchase spec (TOML) to check the machine against."),
        brief: bool = typer.Option(False, "--brief", help="Only the verdict table, without details and evidence."),
        lang: str = typer.Option("en", "--lang", help="Language of the HTML/Markdown reports: en (default), or zh to "
                                 "add the seed checklist's Chinese wording under each question (needs CJK fonts)."),
    ) -> None:
        """Answer the procurement checklist question by question: PASS, WARN, FAIL or UNKNOWN, with evidence.

        Exit codes: 0 every answer passes, 1 warnings or unanswered questions, 2 failures,
        3 nothing in the bundle could be analyzed (or the bundle was refused), 64 a wrong command
        line (unknown --model, a bad --expect file, a report path that cannot be written, a bundle
        path that does not exist).
        """
        from k3diag.model import json_text
        import sys

        from k3diag.exit_codes import EXIT_USAGE

        if lang not in ("en", "zh"):
            typer.echo(f"k3diag audit: --lang must be en or zh, not {lang!r}", err=True)
            raise typer.Exit(EXIT_USAGE)
        from k3diag.audit.checklist import audit_bundle
        from k3diag.audit.spec import SpecError
        from k3diag.bundle import BundleError

        if model:
            from k3diag.advise.catalog import CatalogError, find_model

            try:
                find_model(model)
            except CatalogError as exc:
                # A typo in --model would otherwise cost one UNKNOWN answer and a misleading exit code.
                message = str(exc).split("; or pass --config")[0].rstrip(".")
                typer.echo(f"k3diag audit: {message}.", err=True)
                raise typer.Exit(EXIT_USAGE) from None
        import os

        from k3diag.render.escape import safe_message
        from k3diag.render.output import encode_text, write_text_atomic

        if not os.path.lexists(bundle):
            typer.echo(f"k3diag audit: {safe_message(os.path.abspath(bundle))} does not exist; check the path", err=True)
            raise typer.Exit(EXIT_USAGE)
        try:  # a path the user cannot read is the command line's error (64), as in analyze, not the bundle's
            if os.path.isdir(bundle):
                os.listdir(bundle)
            else:  # O_NONBLOCK: a FIFO with no writer yet must not hang here
                os.close(os.open(bundle, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)))
        except OSError as exc:
            from k3diag.evidence import input_error_for

            # the sentence every command gives for a path it cannot read
            typer.echo(f"k3diag audit: {safe_message(input_error_for(os.path.abspath(bundle), exc))}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        try:
            report = audit_bundle(bundle, model=model, spec_path=expect)
        except BundleError as exc:
            typer.echo(f"k3diag audit: {safe_message(exc)}", err=True)
            raise typer.Exit(3) from None
        except SpecError as exc:  # the --expect file is wrong: the command line's error, not the machine's
            typer.echo(f"k3diag audit: {safe_message(exc)}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        written: list[str] = []
        try:
            if html is not None:
                from k3diag.audit.html import render_html

                write_text_atomic(html, render_html(report, lang))  # never a 0-byte or half report
                written.append(str(html))
            if md is not None:
                from k3diag.audit.markdown import render_markdown

                write_text_atomic(md, render_markdown(report, lang))
                written.append(str(md))
        except OSError as exc:
            typer.echo(f"k3diag audit: could not write the report ({exc.strerror or exc}); check the path", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        if as_json:
            text = json_text.dumps(report.to_json(), indent=2, ensure_ascii=False, default=str) + "\n"
            sys.stdout.flush()
            buffer = getattr(sys.stdout, "buffer", None)
            if buffer is not None:  # always valid UTF-8, whatever the locale or a stray surrogate
                buffer.write(encode_text(text))
                buffer.flush()
            else:
                sys.stdout.write(text)
        else:
            from k3diag.audit.terminal import render_terminal

            render_terminal(report, sys.stdout, verbose=not brief)
        for path in written:
            typer.echo(f"wrote {path}", err=True)
        raise typer.Exit(report.exit_code)
