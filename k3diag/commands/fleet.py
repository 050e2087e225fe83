"""`k3diag fleet PATHS...`: many nodes' bundles or reports, grouped by SKU, odd nodes named."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("fleet")
    def fleet(
        paths: List[Path] = typer.Argument(..., readable=False, help="Bundles, folders of bundles, or JSON reports (`k3diag check --format json`) from many nodes."),
        as_json: bool = typer.Option(False, "--json", help="Print the fleet report as JSON (schema k3diag.fleet/1) instead of text."),
        md: Optional[Path] = typer.Option(None, "--md", help="Also write a Markdown summary here."),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write a self-contained HTML page here (node grid, outliers side by side)."),
        workers: int = typer.Option(0, "--workers", min=0, help="Worker processes reading inputs (0: one per CPU)."),
    ) -> None:
        """Compare many nodes' bundles or reports: odd nodes named, drain list, per-finding counts.

        Nodes are grouped by SKU; each group's majority shape is the expected one, and every node that
        differs is named with what differs and the evidence line. The drain list is a folded host list.

        Exit codes: 0 every node passes and none differs, 1 warnings, unknown nodes, outliers or inputs
        not read, 2 a node fails, 3 no input could be read, 64 a usage error (a path that does not exist).
        """
        import sys

        from k3diag.exit_codes import EXIT_UNKNOWN, EXIT_USAGE

        missing = [str(path) for path in paths if not path.exists() and not path.is_symlink()]
        if missing:
            # As `analyze` does: a mistyped path is a usage error, not a node that could not be read.
            typer.echo(f"k3diag fleet: {missing[0]} does not exist; check the path"
                       + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""), err=True)
            raise typer.Exit(EXIT_USAGE)
        from k3diag.fleet.aggregate import aggregate
        from k3diag.fleet.load import discover, iter_shapes

        items, problems = discover(paths)
        shapes = iter_shapes(items, workers=workers or None)
        report = aggregate(shapes, problems)
        written: list[str] = []
        # node names, board names and evidence lines come from other machines' files: no control character
        # of theirs reaches a terminal, a Markdown viewer or a page (`\x1b` is shown instead)
        from k3diag.render.escape import escape_terminal
        from k3diag.render.output import write_text_atomic  # the old summary or the new one, never a cut one

        target = None
        try:
            if md is not None:
                from k3diag.fleet.render_text import render_markdown

                target = md
                write_text_atomic(md, escape_terminal(render_markdown(report), multiline=True))
                written.append(str(md))
            if html is not None:
                from k3diag.fleet.render_html import render_html

                target = html
                write_text_atomic(html, escape_terminal(render_html(report), multiline=True))
                written.append(str(html))
        except OSError as exc:
            # 64, as audit and serving: the fleet's verdict (0-3) was not what failed
            typer.echo(f"k3diag fleet: could not write {target} ({exc.strerror or exc}); check the path", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        if as_json:
            from k3diag.model import json_text

            sys.stdout.write(json_text.dumps(report, indent=1, ensure_ascii=False) + "\n")
        else:
            from k3diag.fleet.render_text import render_text

            sys.stdout.write(escape_terminal(render_text(report), multiline=True))
        for path in written:
            typer.echo(f"wrote {path}", err=True)
        if report["totals"]["nodes"] == 0:
            typer.echo("k3diag fleet: no node report could be read from the paths given (see 'not read' above).", err=True)
            raise typer.Exit(EXIT_UNKNOWN)
        raise typer.Exit(report["exit_code"])
