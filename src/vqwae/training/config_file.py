"""A training config file, YAML or JSON: read strictly (a repeated key is an error, not a silent last-one-wins) into
{flat name or dotted path: value}, which ``TrainConfig.resolve`` checks against the options."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml


def flatten_paths(nested: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for k, v in nested.items():
        if isinstance(v, dict):
            out.update(flatten_paths(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose keys are all distinct (a repeated key is an error, not a silent last-one-wins)."""
    repeated = sorted(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
    if repeated:
        raise ValueError(f"repeated keys {repeated}")
    return dict(pairs)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that repeats a key (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"repeated key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_config_file(path: str | Path) -> dict:
    """A YAML or JSON file of options: flat names (``ws_weight: 1e-3``) and / or nested sections
    (``quantizer: {vqwae: {ws_weight: 1e-3}}``), returned as {flat name or dotted path: value}."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} not found")
    text = p.read_text()
    try:
        if p.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            data = yaml.load(text, _UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except (json.JSONDecodeError, yaml.YAMLError, ValueError) as e:
        raise ValueError(f"config file {p} could not be parsed: {' '.join(str(e).split())}") from e  # one line
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping of option names to values")
    data.pop("format_version", None)
    return {k.replace("-", "_"): v for k, v in flatten_paths(data).items()}
