"""Runs the tuning notebook headless: ``make notebook``, or ``python -m notebooks.run [--set NAME=VALUE]``.

The kernel runs in this folder, as Jupyter runs it, so the parameters' relative paths read the
shipped sample. What each cell printed goes to stdout; the executed notebook, plots included, goes
to ``notebooks/executed/`` (ignored by git). The committed notebook is never written to.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat import NotebookNode

NOTEBOOK = Path(__file__).with_name("threshold_tuning.ipynb")
OUTPUT = Path(__file__).with_name("executed") / NOTEBOOK.name
CELL_TIMEOUT_S = 900


def parameters_cell(notebook: NotebookNode) -> NotebookNode:
    """The cell tagged ``parameters``: the only one meant to be edited."""
    return next(cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", []))


def parameter_defaults(notebook: NotebookNode) -> dict[str, Any]:
    """Each parameter's name and default value, as the parameters cell assigns them."""
    tree = ast.parse(parameters_cell(notebook).source)
    return {
        target.id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def run_notebook(parameters: dict[str, Any] | None = None, output: Path | None = OUTPUT) -> NotebookNode:
    """Execute the notebook with ``parameters`` in place of their defaults; write the result to
    ``output`` (also when a cell fails, so the failure can be read there). Raises ValueError for a
    name that is not a parameter, and nbclient's CellExecutionError when a cell fails."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    if parameters:
        known = parameter_defaults(notebook)
        unknown = sorted(set(parameters) - set(known))
        if unknown:
            raise ValueError(f"no parameter named {', '.join(unknown)}; the notebook's parameters: {', '.join(known)}")
        cell = parameters_cell(notebook)
        cell.source += "\n# Given to notebooks.run\n" + "".join(
            f"{name} = {value!r}\n" for name, value in parameters.items()
        )
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    try:
        client.execute()
    finally:
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, output)
    return notebook


def printed(notebook: NotebookNode) -> str:
    """What the notebook showed, as text: its section titles, what each cell printed (its stdout:
    the libraries' progress bars and warnings stay in the executed notebook), and a line for each
    plot (the plots themselves are in the executed notebook)."""
    lines = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("#"):
            lines.append(f"\n{cell.source.splitlines()[0]}")
        for shown in cell.get("outputs", []):
            if shown.get("name") == "stdout":
                lines.append(shown["text"].rstrip("\n"))
            elif "image/png" in shown.get("data", {}):
                lines.append("[plot]")
    return "\n".join(lines).strip() + "\n"


def _assignment(text: str) -> tuple[str, Any]:
    name, equals, value = text.partition("=")
    if not equals or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    try:
        return name.strip(), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name.strip(), value  # not a Python literal: a string, such as a URL or a path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m notebooks.run", description="Run the tuning notebook headless; print what it shows."
    )
    parser.add_argument(
        "--set",
        dest="parameters",
        metavar="NAME=VALUE",
        type=_assignment,
        action="append",
        default=[],
        help="change a parameter, e.g. --set SERVICE_URL=http://127.0.0.1:8080 --set TARGET_PRECISION=0.9 "
        "(a Python literal, or else a string); repeat for more",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"executed notebook (default: {OUTPUT})")
    arguments = parser.parse_args(argv)
    try:
        notebook = run_notebook(dict(arguments.parameters), arguments.output)
    except ValueError as exc:
        parser.error(str(exc))
    except CellExecutionError as exc:
        print(exc, file=sys.stderr)
        print(f"\nA cell failed; the notebook as far as it ran: {arguments.output}", file=sys.stderr)
        return 1
    print(printed(notebook))
    print(f"The executed notebook, with its plots: {arguments.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
