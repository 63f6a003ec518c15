"""YAML as the project reads it: safe, and a key written twice in one mapping is an error.

Plain YAML keeps the last of two equal keys without a word, so a config that sets `solve.k`
twice (an edit pasted below an old one) runs with whichever came last. Every YAML file termforge
loads (config.yaml and overlays, taxonomies, base image declarations) goes through load_yaml,
which names the key path and both lines.
"""

from __future__ import annotations

from typing import Any

import yaml

from termforge.errors import ConfigError, show_key, show_path

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _duplicate(loader: yaml.SafeLoader, node: yaml.Node, path: str = "") -> str | None:
    """Words for the first key written twice in a mapping under node (depth first), or None."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # a key YAML allows but Python cannot hash (a mapping as a key)
                first = None
            here = key_node.start_mark.line + 1
            name = f"{path}.{show_key(key)}" if path else show_key(key)
            if first is not None:
                return f"key {name} is written twice (line {first} and line {here}); keep one"
            try:
                seen[key] = here
            except TypeError:
                pass
            found = _duplicate(loader, value_node, name)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate(loader, item, f"{path}[{i}]")
            if found:
                return found
    return None


def load_yaml(text: str, source: Any) -> Any:
    """The document in text (one YAML document; None when empty). A key written twice in one
    mapping is a ConfigError naming source, the key path and both lines; YAML syntax errors
    propagate as yaml.YAMLError for the caller to word."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problem = _duplicate(loader, node)
        if problem:
            raise ConfigError(f"{show_path(str(source))}: {problem}")
        return loader.construct_document(node)
    finally:
        loader.dispose()


__all__ = ["load_yaml"]
