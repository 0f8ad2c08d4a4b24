"""The ``neardup`` mapping of an index: checked first, then put, never changed on conflict.

Pure part: :func:`mapping_conflicts` compares the existing mapping of every concrete index
(with defaults, from the field-mapping API) with the wanted definitions; :func:`field_paths`
and :func:`text_fields` read a mapping. I/O part: :func:`plan_neardup_mapping` (read and check, change
nothing) and :func:`put_neardup_mapping`.

What counts as a conflict (the job would write values the cluster cannot store or find):

* ``neardup`` mapped as something other than an object (a keyword, ``nested``, ...), or as an
  object with ``enabled: false``;
* a wanted sub-field mapped with another type, or with another value of a parameter the
  wanted definition sets (``doc_values``, ``index`` ...);
* a keyword sub-field that is not indexed (but ``mega``, never queried) or whose
  ``ignore_above`` would drop our values.

What neardup turns off to index less (:data:`SAVINGS`: ``doc_values`` of ``super``, ``index``
and ``doc_values`` of ``mega``) may still be on in an index mapped before: that is no conflict
(the same values are stored and found, at a higher indexing cost; a field's ``index`` or
``doc_values`` cannot be changed in place), and the job writes to such an index as before.

Extra sub-fields (``neardup.cluster`` of a later feature) are left alone. ``dynamic: strict``
does not get in the way: the fields are added explicitly with the put-mapping API.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from neardup.fingerprint import FIELD, es_mapping
from neardup.fingerprint.matching import DUPLICATE_OF, DUPLICATE_OF_MAPPING
from neardup.indexer.client import Client
from neardup.indexer.errors import ClusterApiError, JobError, error_type_and_reason
from neardup.indexer.retry import Retrier

#: Shortest ``ignore_above`` that keeps every value we store in a keyword sub-field.
MIN_IGNORE_ABOVE = 64

#: Parameters neardup sets to ``false`` on a sub-field, which an earlier mapping may have ``true``.
SAVINGS: dict[str, frozenset[str]] = {"super": frozenset({"doc_values"}), "mega": frozenset({"index", "doc_values"})}

TEXT_TYPES = frozenset({"text", "keyword", "match_only_text", "wildcard", "constant_keyword",
                        "search_as_you_type", "semantic_text", "annotated_text"})


def wanted_properties(with_duplicate_of: bool = False) -> dict[str, dict[str, Any]]:
    """Sub-field definitions of ``neardup`` from :func:`neardup.fingerprint.es_mapping` (plus ``duplicate_of``)."""
    properties = {name: dict(definition)
                  for name, definition in es_mapping()["properties"][FIELD]["properties"].items()}
    if with_duplicate_of:
        properties[DUPLICATE_OF] = json.loads(json.dumps(DUPLICATE_OF_MAPPING))   # a deep copy
    return properties


def leaf_definitions(wanted: Mapping[str, Mapping[str, Any]], *,
                     with_objects: bool = False) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(dotted name, definition) of each wanted field below ``neardup`` that holds values (the
    field-mapping API shows those only); ``with_objects``: each object too, as ``{"type": "object"}``,
    so that a leaf mapped where an object is wanted (an older ``duplicate_of`` keyword) is a conflict."""
    for name, definition in wanted.items():
        if "properties" not in definition:
            yield name, definition
            continue
        if with_objects:
            yield name, {"type": "object"}
        for sub, inner in leaf_definitions(definition["properties"], with_objects=with_objects):
            yield f"{name}.{sub}", inner


def _same(existing: Any, wanted: Any) -> bool:
    if isinstance(wanted, bool) or isinstance(existing, bool):
        return str(existing).lower() == str(wanted).lower()
    return existing == wanted or str(existing) == str(wanted)


def field_conflicts(name: str, existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """Why an existing sub-field definition (with defaults) cannot hold what we write."""
    problems = []
    if existing.get("type", "object") != wanted.get("type", "object"):
        return [f"{FIELD}.{name} is mapped as {existing.get('type', 'object')!r}, "
                f"neardup needs {wanted.get('type', 'object')!r}"]
    optional = SAVINGS.get(name, frozenset())
    for param, value in wanted.items():
        if param in optional and _same(value, False):
            continue
        if param != "type" and param in existing and not _same(existing[param], value):
            problems.append(f"{FIELD}.{name} has {param}={existing[param]!r}, neardup needs {value!r}")
    indexed = _same(existing.get("index", True), True)
    if wanted.get("type") == "keyword" and (indexed or _same(wanted.get("index", True), True)):
        if not indexed:
            problems.append(f"{FIELD}.{name} is not indexed; neardup looks its values up")
        ignore_above = existing.get("ignore_above")
        if isinstance(ignore_above, int) and ignore_above < MIN_IGNORE_ABOVE:
            problems.append(f"{FIELD}.{name} has ignore_above={ignore_above}, which drops neardup values")
        # OpenSearch reads a keyword without a normalizer back as ``normalizer: default``
        if existing.get("normalizer") not in (None, "", "default"):
            problems.append(f"{FIELD}.{name} has a normalizer ({existing['normalizer']}); neardup needs none")
    return problems


def object_conflicts(root_mapping: Mapping[str, Any]) -> list[str]:
    """Problems with the ``neardup`` object itself, from an index's ``_mapping``."""
    definition = root_mapping.get("properties", {}).get(FIELD)
    if definition is None:
        return []
    kind = definition.get("type", "object")
    if kind != "object":
        return [f"{FIELD} is mapped as {kind!r}; neardup needs an object"]
    if not _same(definition.get("enabled", True), True):
        return [f"{FIELD} is mapped with enabled=false; neardup needs its sub-fields indexed"]
    return []


def mapping_conflicts(root_mappings: Mapping[str, Mapping[str, Any]],
                      field_mappings: Mapping[str, Mapping[str, Any]],
                      wanted: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every conflict, prefixed with the concrete index name.

    ``root_mappings``: index → its ``mappings`` (GET _mapping); ``field_mappings``: index →
    {"neardup.v": full definition with defaults, ...} (GET _mapping/field?include_defaults).
    """
    problems: list[str] = []
    for index in sorted(root_mappings):
        found = object_conflicts(root_mappings[index])
        if not found:
            fields = field_mappings.get(index, {})
            for name, definition in leaf_definitions(wanted, with_objects=True):
                existing = fields.get(f"{FIELD}.{name}")
                if existing is not None:
                    found.extend(field_conflicts(name, existing, definition))
        problems.extend(f"{index}: {problem}" for problem in found)
    return problems


def missing_properties(field_mappings: Mapping[str, Mapping[str, Any]],
                       indices: Iterable[str],
                       wanted: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The wanted sub-fields that at least one of the indices lacks (an object: one of its leaves)."""
    indices = list(indices)
    return {name: dict(definition) for name, definition in wanted.items()
            if any(f"{FIELD}.{leaf}" not in field_mappings.get(index, {}) for index in indices
                   for leaf, _ in leaf_definitions({name: definition}))}


def field_paths(mapping: Mapping[str, Any], prefix: str = "", *,
                multi_fields: bool = True) -> dict[str, str]:
    """Every mapped field path (objects, leaves and, if asked, multi-fields) → its type."""
    paths: dict[str, str] = {}
    for name, definition in mapping.get("properties", {}).items():
        path = f"{prefix}{name}"
        paths[path] = definition.get("type", "object")
        if "properties" in definition:
            paths.update(field_paths(definition, prefix=f"{path}.", multi_fields=multi_fields))
        if multi_fields:
            for sub, sub_definition in definition.get("fields", {}).items():
                paths[f"{path}.{sub}"] = sub_definition.get("type", "object")
    return paths


def text_fields(mapping: Mapping[str, Any]) -> list[str]:
    """Fields of ``_source`` mapped as text (outside ``neardup``; multi-fields are not in
    ``_source``, so they are left out), for error messages."""
    return sorted(path for path, kind in field_paths(mapping, multi_fields=False).items()
                  if kind in TEXT_TYPES and not path.startswith(f"{FIELD}."))


# --- I/O -----------------------------------------------------------------------------------

def read_mappings(client: Client, retrier: Retrier, index: str
                  ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(index → mappings, index → {neardup.* → full definition}) for every concrete index."""
    roots = retrier.call("reading the mapping", lambda: client.indices.get_mapping(index=index))
    fields = retrier.call("reading the neardup mapping", lambda: client.indices.get_field_mapping(
        index=index, fields=f"{FIELD}.*", include_defaults=True))
    root_mappings = {name: value.get("mappings", {}) for name, value in roots.items()}
    field_mappings = {
        name: {path: next(iter(entry["mapping"].values())) for path, entry in value.get("mappings", {}).items()}
        for name, value in fields.items()
    }
    return root_mappings, field_mappings


@dataclass(frozen=True)
class MappingPlan:
    """What :func:`plan_neardup_mapping` found: the mappings read and the sub-fields to add."""

    root_mappings: dict[str, Any]
    missing: dict[str, dict[str, Any]]


def plan_neardup_mapping(client: Client, retrier: Retrier, index: str, *,
                         with_duplicate_of: bool = False,
                         extra: Mapping[str, Mapping[str, Any]] | None = None) -> MappingPlan:
    """Read and check the ``neardup`` mapping of every index behind ``index``; change nothing.

    ``extra``: more ``neardup`` sub-fields wanted (e.g. ``cluster`` of ``neardup cluster``).
    Raises :class:`JobError` on a conflict, naming each one.
    """
    wanted = wanted_properties(with_duplicate_of)
    wanted.update({name: dict(definition) for name, definition in (extra or {}).items()})
    root_mappings, field_mappings = read_mappings(client, retrier, index)
    if not root_mappings:
        raise JobError(f"no such index: {index}")
    problems = mapping_conflicts(root_mappings, field_mappings, wanted)
    if problems:
        raise JobError(
            f"the mapping of {index} conflicts with the fields neardup writes; nothing was changed:\n  "
            + "\n  ".join(problems)
            + "\n  neardup needs: " + json.dumps({FIELD: {"properties": wanted}})
            + "\n  (reindex into an index with that mapping, or remove the conflicting fields)")
    return MappingPlan(root_mappings, missing_properties(field_mappings, root_mappings, wanted))


def put_neardup_mapping(client: Client, retrier: Retrier, index: str, plan: MappingPlan) -> None:
    """Add the missing ``neardup`` sub-fields (one atomic put-mapping request)."""
    if not plan.missing:
        return
    properties = {FIELD: {"properties": plan.missing}}
    try:
        retrier.call("putting the neardup mapping", lambda: client.indices.put_mapping(index=index, properties=properties))
    except ClusterApiError as exc:
        if exc.status in (401, 403, 404):
            raise
        kind, reason = error_type_and_reason(exc.body)
        raise JobError(f"Elasticsearch refused the neardup mapping for {index} ({kind}: {reason}); "
                       "nothing was changed") from None
