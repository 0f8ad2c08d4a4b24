"""The proxy's own request controls: ``neardup*`` query parameters and ``X-Neardup*`` headers.

A request may override the configured collapsing with

===============================  ===================================  ==============================
query parameter                  header                               values
===============================  ===================================  ==============================
``neardup``                      ``X-Neardup``                        ``on`` | ``off`` (also true/false)
``neardup_threshold``            ``X-Neardup-Threshold``              a number from 0 to 1
``neardup_mode``                 ``X-Neardup-Mode``                   ``resemblance`` | ``containment`` | ``tfidf``
``neardup_source``               ``X-Neardup-Source``                 an ``_id`` of the searched index
``neardup_fingerprint_missing``  ``X-Neardup-Fingerprint-Missing``    ``on`` | ``off`` (also true/false)
===============================  ===================================  ==============================

``tfidf`` groups hits by the TF-IDF cosine of their stored vectors (:mod:`neardup.proxy.grouping.tfidf_groups`); its
threshold is ``tfidf.threshold`` unless the request gives ``neardup_threshold``.
``neardup_source`` (``_search`` only) marks the hits of the page that contain a fragment of
that document (:mod:`neardup.proxy.handlers.source_check`). ``neardup_fingerprint_missing`` overrides
``collapse.fingerprint_missing`` (:mod:`neardup.proxy.handlers.missing_fingerprints`).

They are removed before the request goes upstream (Elasticsearch rejects unknown parameters).
A query parameter wins over the header of the same meaning. Anything invalid — an unknown
``neardup_*`` name, a value out of range, one parameter given twice with different values — is a
:class:`~neardup.proxy.transport.errors.ProxyError` 400 naming the parameter.

The rest of the query string is kept byte for byte: parameters are split on ``&`` and only
the proxy's own are dropped, nothing is decoded and re-encoded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote_plus

from neardup.config import CollapseConfig, collapse_settings_for
from neardup.proxy.transport.errors import illegal_argument

Mode = Literal["resemblance", "containment", "tfidf"]
MODES: tuple[Mode, ...] = ("resemblance", "containment", "tfidf")

PARAM_SWITCH, PARAM_THRESHOLD, PARAM_MODE = "neardup", "neardup_threshold", "neardup_mode"
HEADER_SWITCH, HEADER_THRESHOLD, HEADER_MODE = "X-Neardup", "X-Neardup-Threshold", "X-Neardup-Mode"
PARAM_SOURCE, HEADER_SOURCE = "neardup_source", "X-Neardup-Source"
PARAM_MISSING, HEADER_MISSING = "neardup_fingerprint_missing", "X-Neardup-Fingerprint-Missing"
_HEADER_OF = {PARAM_SWITCH: HEADER_SWITCH, PARAM_THRESHOLD: HEADER_THRESHOLD, PARAM_MODE: HEADER_MODE,
              PARAM_SOURCE: HEADER_SOURCE, PARAM_MISSING: HEADER_MISSING}
_SWITCH_VALUES = {"on": True, "true": True, "off": False, "false": False}


@dataclass(frozen=True)
class Controls:
    """What the request asked for; ``None`` means "use the configuration"."""

    enabled: bool | None = None
    threshold: float | None = None
    mode: Mode | None = None
    source: str | None = None      # ``_id`` whose fragments the page's hits are checked for
    fingerprint_missing: bool | None = None   # fingerprint hits without one at query time


@dataclass(frozen=True)
class Settings:
    """Collapsing settings in force for one request."""

    enabled: bool
    threshold: float
    mode: Mode
    #: The client asked for collapsing explicitly (``neardup=on``): a search that cannot be
    #: collapsed is then an error instead of a silent pass-through.
    forced: bool = False
    #: ``neardup_source``: the document the page's hits are checked against, read by
    #: :func:`neardup.proxy.handlers.source_check.settings_for`.
    source: SourceDocument | None = None
    #: Hits without a stored fingerprint are fingerprinted at query time
    #: (:mod:`neardup.proxy.handlers.missing_fingerprints`).
    fingerprint_missing: bool = True

    @property
    def text_fields(self) -> tuple[str, ...]:
        """The text fields the search must also fetch (only to check a source)."""
        return self.source.fields if self.source is not None else ()


@dataclass(frozen=True)
class SourceDocument:
    """The ``neardup_source`` document: its ``_id``, concrete index, the text of its ``fields``
    (``indexer.fields``) joined by newlines, and those field names."""

    id: str
    index: str
    text: str
    fields: tuple[str, ...]


_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def has_invalid_escape(raw: str) -> bool:
    """Whether a raw query part holds a ``%`` not followed by two hex digits, which
    Elasticsearch refuses (``unquote_plus`` would keep it as it is)."""
    return "%" in raw and _BAD_ESCAPE.search(raw) is not None


def split_query(raw_query: str) -> list[tuple[str, str, str]]:
    """``a=1&b`` → ``[(name, decoded value, raw part), ...]``; empty parts are dropped."""
    parts = []
    for raw in raw_query.split("&"):
        if not raw:
            continue
        name, _, value = raw.partition("=")
        parts.append((unquote_plus(name), unquote_plus(value), raw))
    return parts


def is_true(value: str) -> bool:
    """Elasticsearch's reading of a boolean parameter that is on: ``?flag`` or ``?flag=true``."""
    return value == "" or value == "true"


def wants_pretty(parts: list[tuple[str, str, str]]) -> bool:
    """``pretty`` is on (the last one given wins, as in Elasticsearch)."""
    pretty = False
    for name, value, _ in parts:
        if name == "pretty":
            pretty = is_true(value)
    return pretty


def join_query(parts: list[tuple[str, str, str]]) -> str:
    return "&".join(raw for _, _, raw in parts)


def _parse_switch(name: str, value: str) -> bool:
    switch = _SWITCH_VALUES.get(value.strip().lower())
    if switch is None:
        raise illegal_argument(f"Failed to parse value [{value}] for parameter [{name}]: "
                               "must be one of [on, off, true, false]")
    return switch


def _parse_threshold(name: str, value: str) -> float:
    try:
        threshold = float(value)
    except ValueError:
        threshold = math.nan
    if not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise illegal_argument(f"Failed to parse value [{value}] for parameter [{name}]: "
                               "must be a number from 0 to 1")
    return threshold


def _parse_mode(name: str, value: str) -> Mode:
    mode = value.strip().lower()
    if mode not in MODES:
        raise illegal_argument(f"Failed to parse value [{value}] for parameter [{name}]: "
                               f"must be one of [{', '.join(MODES)}]")
    return mode


def _parse_source(name: str, value: str) -> str:
    if not value:
        raise illegal_argument(f"Failed to parse value [{value}] for parameter [{name}]: "
                               "must be the _id of a document of the searched index")
    return value


_PARSERS = {PARAM_SWITCH: _parse_switch, PARAM_THRESHOLD: _parse_threshold, PARAM_MODE: _parse_mode,
            PARAM_SOURCE: _parse_source, PARAM_MISSING: _parse_switch}


def parse_controls(raw_query: str, headers: Mapping[str, str]
                   ) -> tuple[Controls, str, bool]:
    """Read the controls; return them, the query string without them, and whether any was given.

    ``headers`` is a case-insensitive mapping (aiohttp's ``CIMultiDictProxy``).
    """
    parts = split_query(raw_query)
    given: dict[str, str] = {}
    kept: list[tuple[str, str, str]] = []
    for name, value, raw in parts:
        if name != PARAM_SWITCH and not name.startswith(PARAM_SWITCH + "_"):
            kept.append((name, value, raw))
            continue
        if name not in _PARSERS:
            raise illegal_argument(f"request contains unrecognized parameter: [{name}] "
                                   f"(the proxy knows [{', '.join(_PARSERS)}])")
        if name in given and given[name] != value:
            raise illegal_argument(f"parameter [{name}] is given more than once with different "
                                   f"values [{given[name]}] and [{value}]")
        given[name] = value
    values: dict[str, object] = {}
    for name, parse in _PARSERS.items():
        if name in given:
            values[name] = parse(name, given[name])
            continue
        header_values = headers.getall(_HEADER_OF[name], []) if hasattr(headers, "getall") \
            else ([headers[_HEADER_OF[name]]] if _HEADER_OF[name] in headers else [])
        if len(set(header_values)) > 1:
            raise illegal_argument(f"header [{_HEADER_OF[name]}] is given more than once with "
                                   "different values")
        if header_values:
            values[name] = parse(_HEADER_OF[name], header_values[0])
    controls = Controls(values.get(PARAM_SWITCH), values.get(PARAM_THRESHOLD),  # type: ignore[arg-type]
                        values.get(PARAM_MODE), values.get(PARAM_SOURCE),  # type: ignore[arg-type]
                        values.get(PARAM_MISSING))  # type: ignore[arg-type]
    changed = len(kept) != len(parts)
    return controls, join_query(kept) if changed else raw_query, bool(values)


#: Settings already resolved, by (configuration's id, controls, index, TF-IDF threshold); each
#: entry keeps its configuration, so that the id is not reused while the entry lives (the
#: configuration is frozen: its settings for a key never change). Emptied when full. A request's
#: own threshold is not kept (``-0`` and ``0`` would be one key).
_RESOLVED: dict[tuple[int, Controls, str, float | None], tuple[CollapseConfig, Settings]] = {}
_RESOLVED_ENTRIES = 1024


def resolve(controls: Controls, config: CollapseConfig, index: str,
            tfidf_threshold: float | None = None) -> Settings:
    """Request controls over per-index configuration over global configuration.

    ``index`` is the index expression of the request; per-index overrides are matched against
    its first name (``news-*,archive`` → ``news-*``). In ``tfidf`` mode the threshold, unless the
    request gives one, is ``tfidf_threshold`` (``tfidf.threshold``: a cosine, another scale than
    the shingle similarities of ``collapse.threshold``). The settings of a key seen before are
    the same (immutable) object.
    """
    if controls.threshold is not None:
        return _resolve(controls, config, index, tfidf_threshold)
    key = (id(config), controls, index, tfidf_threshold)
    found = _RESOLVED.get(key)
    if found is not None and found[0] is config:
        return found[1]
    settings = _resolve(controls, config, index, tfidf_threshold)
    if len(_RESOLVED) >= _RESOLVED_ENTRIES:
        _RESOLVED.clear()
    _RESOLVED[key] = (config, settings)
    return settings


def _resolve(controls: Controls, config: CollapseConfig, index: str, tfidf_threshold: float | None) -> Settings:
    enabled, threshold, configured_mode = collapse_settings_for(config, index.split(",", 1)[0].strip())
    mode: Mode = controls.mode if controls.mode is not None else configured_mode
    if mode == "tfidf" and tfidf_threshold is not None:
        threshold = tfidf_threshold
    return Settings(
        enabled=controls.enabled if controls.enabled is not None else enabled,
        threshold=controls.threshold if controls.threshold is not None else threshold,
        mode=mode,
        forced=controls.enabled is True,
        fingerprint_missing=config.fingerprint_missing if controls.fingerprint_missing is None
        else controls.fingerprint_missing,
    )
