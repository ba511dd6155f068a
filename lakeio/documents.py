"""Small JSON or YAML documents that users hand the jobs: table lists, price tables."""

from __future__ import annotations

import json

import yaml

from lakeio.errors import BadInputFile
from lakeio.text import first_line


def load_document(path: str, text: str | None = None) -> object:
    """``path`` parsed as JSON (``*.json``) or YAML; ``text`` is its content when already read.

    Raises ValueError naming the file and the problem.
    """
    if text is None:
        try:
            with open(path) as source:
                text = source.read()
        except OSError as exc:
            raise BadInputFile(f"{path}: {exc.strerror}") from None
    kind = "JSON" if path.endswith(".json") else "YAML"
    try:
        return json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise BadInputFile(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except yaml.MarkedYAMLError as exc:  # its own text quotes the line over several: the problem and where, in one
        where = f" at line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}" if exc.problem_mark else ""
        raise BadInputFile(f"{path}: not valid YAML: {exc.problem or exc.context}{where}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise BadInputFile(f"{path}: not valid {kind}: {first_line(exc)}") from None
