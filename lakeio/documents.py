"""Small JSON or YAML documents that users hand the jobs: table lists, price tables."""

from __future__ import annotations

import json

import yaml


def load_document(path: str, text: str | None = None) -> object:
    """``path`` parsed as JSON (``*.json``) or YAML; ``text`` is its content when already read.

    Raises ValueError naming the file and the problem.
    """
    if text is None:
        try:
            with open(path) as source:
                text = source.read()
        except OSError as exc:
            raise ValueError(f"{path}: {exc.strerror}") from None
    kind = "JSON" if path.endswith(".json") else "YAML"
    try:
        return json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not valid {kind}: {exc}") from None
