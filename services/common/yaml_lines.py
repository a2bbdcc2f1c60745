"""Where in a YAML file a value sits: the line a refusal of that value names.

The mesh config and the model registry are both validated by pydantic, whose errors locate
a value by its path of keys and indexes; the file's node tree turns that path into a line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import yaml

Loc = Sequence[int | str]


def read_nodes(text: str) -> tuple[object, yaml.Node | None]:
    """The document in `text` and its node tree; yaml.YAMLError when it does not parse."""
    loader = yaml.SafeLoader(text)
    try:
        document = loader.get_single_node()
        _refuse_repeated_keys(document)
        data = loader.construct_document(document) if document is not None else None
    finally:
        loader.dispose()
    return data, document


def _refuse_repeated_keys(node: yaml.Node | None) -> None:
    """yaml.YAMLError at a key a mapping repeats: YAML forbids it, and PyYAML keeps the last
    without a word, so a second `gateway:` section replaced the first whole."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                name = str(key.value)
                if name in seen:
                    raise yaml.constructor.ConstructorError(
                        problem=f"{name!r} appears twice in one mapping (first on line "
                        f"{seen[name]}); write it once",
                        problem_mark=key.start_mark,
                    )
                seen[name] = key.start_mark.line + 1
            _refuse_repeated_keys(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_repeated_keys(item)


def line_of(node: yaml.Node | None, loc: Loc) -> int | None:
    """1-based line of the deepest part of `loc` the document has (a missing field points
    at the section that lacks it)."""
    line = None
    for part in loc:
        child = next(_children(node, part), None)
        if child is None:
            break
        key_line, node = child
        line = key_line
    return line


def _children(node: yaml.Node | None, part: int | str) -> Iterator[tuple[int, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if str(key.value) == str(part):
                yield key.start_mark.line + 1, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        item = node.value[part]
        yield item.start_mark.line + 1, item
