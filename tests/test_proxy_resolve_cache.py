""":func:`proxy.handlers.params.resolve` remembers settings per configuration, controls and index:
the same settings as resolving them afresh, for every configuration and request."""

from __future__ import annotations

import itertools

from neardup.config import CollapseConfig
from neardup.proxy.handlers import params
from neardup.proxy.handlers.params import Controls, resolve

CONFIGS = [
    CollapseConfig(),
    CollapseConfig(threshold=0.6, mode="containment", fingerprint_missing=False),
    CollapseConfig(enabled=False, indices={"news-*": {"threshold": 0.9, "mode": "containment"}, "off": {"enabled": False}}),
]
CONTROLS = [Controls(), Controls(enabled=True), Controls(enabled=False), Controls(threshold=0.0),
            Controls(threshold=-0.0), Controls(mode="tfidf"), Controls(fingerprint_missing=False),
            Controls(source="doc-1")]
INDICES = ["", "news-1", "news-*,archive", "off", "archive"]


def test_remembered_settings_are_fresh_settings() -> None:
    for _ in range(2):   # the second time from the cache
        for config, controls, index, tfidf in itertools.product(CONFIGS, CONTROLS, INDICES, (None, 0.7)):
            got = resolve(controls, config, index, tfidf)
            assert got == params._resolve(controls, config, index, tfidf)
            assert repr(got.threshold) == repr(params._resolve(controls, config, index, tfidf).threshold)


def test_a_new_configuration_is_not_answered_from_another() -> None:
    first = resolve(Controls(), CollapseConfig(threshold=0.7), "x")
    second = resolve(Controls(), CollapseConfig(threshold=0.9), "x")
    assert (first.threshold, second.threshold) == (0.7, 0.9)


def test_the_cache_is_bounded() -> None:
    config = CollapseConfig()
    for number in range(params._RESOLVED_ENTRIES + 10):
        resolve(Controls(), config, f"index-{number}")
    assert len(params._RESOLVED) <= params._RESOLVED_ENTRIES
