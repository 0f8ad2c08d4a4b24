"""Pure parts of the TF-IDF pipeline: configuration, the indexer's selection, statistics documents,
the proxy's tfidf mode (controls, plan, grouping of stored vectors)."""

from __future__ import annotations

import numpy as np
import pytest
from multidict import CIMultiDict

from neardup.config import CollapseConfig, Config, ConfigError, load_config
from neardup.fingerprint import Fingerprinter
from neardup.fingerprint.tfidf import CorpusStats, TfidfParams, TfidfWeigher
from neardup.indexer.query import already_current, selection
from neardup.indexer.tfidf_stats import (
    APPLIED_WRITERS,
    add_counts,
    already_applied,
    decode_part,
    encode_part,
    record_applied,
)
from neardup.indexer.tfidf_vectors import tf_properties
from neardup.proxy.grouping import collapse, tfidf_groups
from neardup.proxy.grouping.fingerprints import default_algorithms
from neardup.proxy.handlers.params import Controls, Settings, parse_controls, resolve, split_query
from neardup.proxy.handlers.search_plan import Plan, plan_search
from neardup.proxy.transport.errors import ProxyError
from neardup.tfidf_config import tfidf_version_of, weigher_from_config

TEXTS = [
    "The central bank raised interest rates by half a point to curb inflation, the governor said.",
    "Inflation to curb, the governor said the central bank raised by half a point interest rates.",
    "The football club won the cup final after extra time in front of a record crowd.",
    "Wheat exports fell sharply this year as drought cut the harvest in the southern region.",
]


# -- configuration ----------------------------------------------------------------------------

def test_defaults_and_environment_overrides():
    config = load_config(None, environ={
        "NEARDUP_TFIDF__ENABLED": "true", "NEARDUP_TFIDF__TOP_K": "32", "NEARDUP_TFIDF__THRESHOLD": "0.6"})
    assert (config.tfidf.enabled, config.tfidf.top_k, config.tfidf.threshold) == (True, 32, 0.6)
    assert Config().tfidf.threshold == 0.7 and Config().tfidf.top_k == 64 and not Config().tfidf.enabled


@pytest.mark.parametrize(("key", "value", "says"), [
    ("stats_index", "stats", "{index}"),
    ("stats_index", "{index}-stats", "fixed lowercase prefix"),
    ("stats_index", "Stats-{index}", "lowercase"),
    ("stats_parts", "12", "power of 2"),
    ("synonyms", "/no/such/synonyms.txt", "no such file"),
    ("top_k", "0", "greater than or equal to 1"),
    ("threshold", "1.5", "less than or equal to 1"),
])
def test_bad_values_name_the_key(key, value, says):
    with pytest.raises(ConfigError) as caught:
        load_config(None, environ={f"NEARDUP_TFIDF__{key.upper()}": value})
    assert f"tfidf.{key}" in str(caught.value) and says in str(caught.value)


def test_version_follows_synonyms_and_top_k(tmp_path):
    plain = Config()
    synonyms = tmp_path / "syn.txt"
    synonyms.write_text("bank, lender\n", encoding="utf-8")
    with_synonyms = Config.model_validate({"tfidf": {"synonyms": str(synonyms)}})
    fewer = Config.model_validate({"tfidf": {"top_k": 16}})
    versions = {tfidf_version_of(c) for c in (plain, with_synonyms, fewer)}
    assert len(versions) == 3 and all(v.startswith("t1-") for v in versions)
    assert weigher_from_config(with_synonyms).counts("lender") == weigher_from_config(with_synonyms).counts("bank")
    synonyms.write_text("bank\n", encoding="utf-8")   # a group of one: the error names the key and line
    with pytest.raises(ConfigError, match=r"tfidf\.synonyms.*line 1"):
        weigher_from_config(with_synonyms)


# -- the indexer ------------------------------------------------------------------------------

def test_selection_reads_documents_lacking_either_version():
    query = selection(version="2-x", force=False, since=None, since_field="@timestamp", tf_version="t1-y")
    assert query == {"bool": {"must_not": [{"bool": {"filter": [
        {"term": {"neardup.v": "2-x"}}, {"term": {"neardup.tf.v": "t1-y"}}]}}]}}
    assert selection(version="2-x", force=False, since=None, since_field="@timestamp") == {
        "bool": {"must_not": [{"term": {"neardup.v": "2-x"}}]}}
    assert already_current(version="2-x", since=None, since_field="t", tf_version="t1-y") == {"bool": {"filter": [
        {"term": {"neardup.v": "2-x"}}, {"term": {"neardup.tf.v": "t1-y"}}]}}
    assert selection(version="2-x", force=True, since=None, since_field="t", tf_version="t1-y") == {"match_all": {}}


def test_mapping_fragment_names_leaf_fields():
    assert tf_properties() == {"tf.v": {"type": "keyword"}, "tf.t": {"type": "binary", "doc_values": False},
                               "tf.w": {"type": "binary", "doc_values": False}}


def test_statistics_parts_round_trip_and_add():
    stats = CorpusStats.of([np.array([5, 9], np.uint64), np.array([9, 12], np.uint64)])
    terms, df = decode_part(encode_part(stats.terms, stats.df))
    assert terms.tolist() == [5, 9, 12] and df.tolist() == [1, 2, 1]
    terms, df = add_counts(terms, df, CorpusStats.of([np.array([9, 30], np.uint64)]))
    assert terms.tolist() == [5, 9, 12, 30] and df.tolist() == [1, 3, 1, 1]


def test_applied_batches_are_remembered_for_recent_writers():
    source = {"applied": record_applied(None, "a", 3)}
    assert already_applied(source, "a", 3) and already_applied(source, "a", 2)
    assert not already_applied(source, "a", 4) and not already_applied(source, "b", 1)
    for k in range(APPLIED_WRITERS + 5):
        source = {"applied": record_applied(source, f"w{k}", 1)}
    assert len(source["applied"]) == APPLIED_WRITERS and not already_applied(source, "a", 3)
    assert already_applied({"applied": record_applied(source, "w0", 7)}, "w0", 7)


# -- the proxy --------------------------------------------------------------------------------

def test_tfidf_mode_control_and_its_own_threshold():
    controls, _, _ = parse_controls("neardup_mode=tfidf", CIMultiDict())
    assert controls.mode == "tfidf"
    collapse_config = CollapseConfig()
    assert resolve(controls, collapse_config, "news", 0.7).threshold == 0.7
    assert resolve(Controls(mode="tfidf", threshold=0.55), collapse_config, "news", 0.7).threshold == 0.55
    assert resolve(Controls(mode="resemblance"), collapse_config, "news", 0.7).threshold == 0.8
    with pytest.raises(ProxyError) as caught:
        parse_controls("neardup_mode=cosine", CIMultiDict())
    assert caught.value.status == 400
    assert "[neardup_mode]" in str(caught.value.body()) and "tfidf" in str(caught.value.body())


def vectors_of(texts: list[str], top_k: int = 64) -> list[dict]:
    weigher = TfidfWeigher(Fingerprinter(), TfidfParams(top_k=top_k))
    return [v.to_source() for v in weigher.vectors(texts)]


def test_vector_pairs_ignore_unusable_vectors():
    stored = vectors_of(TEXTS)
    version = stored[0]["v"]
    positions, i, j = tfidf_groups.vector_pairs(stored, 0.7, version)
    assert positions.tolist() == [0, 1, 2, 3] and list(zip(i.tolist(), j.tolist())) == [(0, 1)]
    other = vectors_of(TEXTS, top_k=8)[1]   # another version
    broken = {**stored[1], "t": "###"}
    empty = {**stored[1], "t": "", "w": ""}
    for bad in (other, broken, empty, None, "x"):
        positions, i, j = tfidf_groups.vector_pairs([stored[0], bad, stored[2]], 0.7, version)
        assert positions.tolist() == [0, 2] and len(i) == 0


def hit(k: int, tf: dict, channel: str) -> dict:
    if channel == "_source":
        return {"_index": "i", "_id": str(k), "_source": {"neardup": {"tf": tf}}}
    return {"_index": "i", "_id": str(k), "fields": {f"neardup.tf.{key}": [tf[key]] for key in ("v", "t", "w")}}


@pytest.mark.parametrize("channel", ["_source", "fields"])
def test_group_in_tfidf_mode_folds_the_reordered_text(channel):
    stored = vectors_of(TEXTS)
    hits = [hit(k, tf, channel) for k, tf in enumerate(stored)]
    algorithms = default_algorithms(Fingerprinter().params, stored[0]["v"])
    groups, fingerprinted = collapse.group(hits, channel, 0.7, "tfidf", algorithms)
    assert groups == [[0, 1], [2], [3]] and fingerprinted == 4
    nothing, _ = collapse.group(hits, channel, 0.7, "tfidf", default_algorithms(Fingerprinter().params))
    assert nothing == [[0], [1], [2], [3]]   # no configured version: never grouped


def test_plan_fetches_the_vector_through_fields_in_tfidf_mode():
    settings = Settings(enabled=True, threshold=0.7, mode="tfidf")
    planned = plan_search({"_source": False}, split_query(""), settings, 1000)
    assert isinstance(planned, Plan) and planned.added_fields == tfidf_groups.TFIDF_FIELDS
    asked = plan_search({"_source": False, "fields": ["neardup.tf.*"]}, split_query(""), settings, 1000)
    assert isinstance(asked, Plan) and asked.added_fields == ()
    resemblance = plan_search({"_source": False}, split_query(""), Settings(True, 0.8, "resemblance"), 1000)
    assert isinstance(resemblance, Plan) and not set(resemblance.added_fields) & set(tfidf_groups.TFIDF_FIELDS)
