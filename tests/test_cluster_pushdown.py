"""Pure parts of the push-down to native collapse (proxy/pushdown.py), on recorded-shape responses."""

from __future__ import annotations

import pytest

from neardup.proxy.grouping.collapse import CollapseError
from neardup.proxy.handlers.native_collapse import (
    GROUPS_AGG,
    clusters_match,
    inner_options,
    inner_size_for,
    pushdown_body,
    pushdown_response,
    refusal,
)

READY = {"neardup_clusters": {"state": "ready", "threshold": 0.8, "mode": "resemblance", "version": "3-abc"}}


def test_clusters_match_needs_every_index_ready_with_the_same_settings():
    assert clusters_match({"a": READY, "b": READY}, 0.8, "resemblance", "3-abc")
    assert not clusters_match({"a": READY, "b": {}}, 0.8, "resemblance", "3-abc")
    assert not clusters_match({"a": READY}, 0.7, "resemblance", "3-abc")
    assert not clusters_match({"a": READY}, 0.8, "containment", "3-abc")
    assert not clusters_match({"a": READY}, 0.8, "resemblance", "3-other")
    building = {"neardup_clusters": {**READY["neardup_clusters"], "state": "building"}}
    assert not clusters_match({"a": building}, 0.8, "resemblance", "3-abc")
    assert not clusters_match({}, 0.8, "resemblance", "3-abc")


def test_body_adds_collapse_inner_hits_and_the_group_count():
    body = {"query": {"match_all": {}}, "_source": ["title"], "aggs": {"t": {"terms": {"field": "x"}}}}
    out = pushdown_body(body, 20, 10, inner_size=5)
    assert out["from"] == 20 and out["size"] == 10
    assert out["collapse"] == {"field": "neardup.cluster",
                               "inner_hits": {"name": "neardup", "size": 6, "_source": ["title"]}}
    assert set(out["aggs"]) == {"t", GROUPS_AGG}
    assert "collapse" not in body and set(body["aggs"]) == {"t"}  # the client's body is not changed


def recorded() -> dict:
    def hit(i: str, cluster: str, score: float) -> dict:
        return {"_index": "news", "_id": i, "_score": score, "_source": {"title": i}}
    top = hit("1", "c1", 3.0)
    top["fields"] = {"neardup.cluster": ["c1"]}
    top["inner_hits"] = {"neardup": {"hits": {"total": {"value": 3, "relation": "eq"}, "max_score": 3.0,
                                              "hits": [hit("1", "c1", 3.0), hit("7", "c1", 2.0)]}}}
    alone = hit("2", "c2", 1.0)
    alone["fields"] = {"neardup.cluster": ["c2"]}
    alone["inner_hits"] = {"neardup": {"hits": {"total": {"value": 1, "relation": "eq"}, "max_score": 1.0,
                                                "hits": [hit("2", "c2", 1.0)]}}}
    return {"took": 3, "hits": {"total": {"value": 40, "relation": "eq"}, "hits": [top, alone]},
            "aggregations": {GROUPS_AGG: {"value": 17}}}


def test_response_has_the_window_collapsing_format():
    out = pushdown_response(recorded(), {"query": {}}, 0.8, "resemblance")
    top, alone = out["hits"]["hits"]
    assert top["fields"] == {"neardup.group": ["c1"]}
    assert top["inner_hits"]["neardup"]["hits"] == {
        "total": {"value": 2, "relation": "eq"}, "max_score": 2.0,
        "hits": [{"_index": "news", "_id": "7", "_score": 2.0, "_source": {"title": "7"}}]}
    assert alone["inner_hits"]["neardup"]["hits"]["total"] == {"value": 0, "relation": "eq"}
    assert "aggregations" not in out and out["hits"]["total"]["value"] == 40
    assert out["neardup"] == {"threshold": 0.8, "mode": "resemblance", "groups": 2, "collapsed": 2, "window": 2,
                              "window_groups": 2, "fingerprinted": 2, "complete": True, "pushdown": True,
                              "groups_total": 17}


def test_response_keeps_what_the_client_asked_for():
    answer = recorded()
    answer["aggregations"]["t"] = {"buckets": []}
    out = pushdown_response(answer, {"fields": ["neardup.cluster"]}, 0.8, "resemblance", total_as_int=True)
    assert out["aggregations"] == {"t": {"buckets": []}}
    assert out["hits"]["hits"][0]["fields"]["neardup.cluster"] == ["c1"]
    assert out["hits"]["hits"][0]["inner_hits"]["neardup"]["hits"]["total"] == 2


def test_the_cluster_id_stays_out_of_completion_options_unless_asked_for():
    """Native collapse writes the cluster id into every fetched hit's fields, a completion
    suggester's options too (Elasticsearch 8.19, tests/test_proxy.py): removed there as from
    the hits, kept when the client's ``fields`` ask for it."""
    def answer() -> dict:
        out = recorded()
        out["suggest"] = {"completion#t": [{"text": "st", "offset": 0, "length": 2, "options": [
            {"text": "story", "_index": "news", "_id": "7", "_score": 1.0, "fields": {"neardup.cluster": ["c1"]}},
            {"text": "stub", "_index": "news", "_id": "8", "_score": 1.0,
             "fields": {"neardup.cluster": ["c8"], "rank": [3]}}]}]}
        return out

    options = pushdown_response(answer(), {}, 0.8, "resemblance")["suggest"]["completion#t"][0]["options"]
    assert [o.get("fields") for o in options] == [None, {"rank": [3]}]
    options = pushdown_response(answer(), {"fields": ["neardup.*"]}, 0.8, "resemblance")["suggest"]["completion#t"]
    assert [o["fields"] for o in options[0]["options"]] == [{"neardup.cluster": ["c1"]},
                                                           {"neardup.cluster": ["c8"], "rank": [3]}]


def test_a_response_without_groups_is_refused_for_fail_open():
    answer = recorded()
    del answer["hits"]["hits"][0]["inner_hits"]
    with pytest.raises(CollapseError):
        pushdown_response(answer, {}, 0.8, "resemblance")
    with pytest.raises(CollapseError):
        pushdown_response({"hits": "no"}, {}, 0.8, "resemblance")


# --- what reaches the inner hits, and when a search stays on the window path -----------------------------

def test_query_string_options_reach_the_members_too():
    params = [("_source_includes", "title,body", "_source_includes=title,body"),
              ("_source_excludes", "body", "_source_excludes=body"), ("sort", "date:desc,_score", "sort=..."),
              ("version", "true", "version=true"), ("typed_keys", "true", "typed_keys=true")]
    inner = inner_options({"highlight": {"fields": {"body": {}}}, "fields": ["neardup.v"], "sort": ["x"]}, params)
    # Elasticsearch appends the query string's sort to the body's (RestSearchAction.parseSearchSource
    # calls SearchSourceBuilder.sort, which adds): the members are sorted as the kept hits are.
    assert inner == {"highlight": {"fields": {"body": {}}}, "fields": ["neardup.v"],
                     "_source": {"includes": ["title", "body"], "excludes": ["body"]},
                     "sort": ["x", {"date": {"order": "desc"}}, "_score"], "version": True}
    assert inner_options({"_source": ["title"]}, [("_source", "false", "_source=false")])["_source"] is False
    assert inner_options({}, [("_source", "title", "_source=title")])["_source"] == {"includes": ["title"],
                                                                                     "excludes": []}
    assert inner_options({"_source": ["title"]}, []) == {"_source": ["title"]}
    # stored_fields turns _source off for top-level hits only: inner hits are told so
    assert inner_options({"stored_fields": []}, []) == {"stored_fields": [], "_source": False}
    assert inner_options({"stored_fields": [], "_source": True}, [])["_source"] is True
    assert inner_options({"stored_fields": []}, [("_source", "true", "_source=true")])["_source"] is True


def test_searches_native_collapse_cannot_take_stay_on_the_window_path():
    assert refusal({"query": {}}, [("routing", "a", "routing=a")], "news-*,archive") is None
    assert refusal({"rescore": {}}, []) == "body_rescore"
    assert refusal({"pit": {"id": "x"}}, []) == "body_pit"
    assert refusal({}, [("expand_wildcards", "all", "expand_wildcards=all")]) == "param_expand_wildcards"
    assert refusal({}, [("stored_fields", "a", "stored_fields=a")]) == "param_stored_fields"
    assert refusal({}, [], "remote:news") == "remote_index"
    assert refusal({"min_score": 1.5}, []) == "body_min_score"   # inner hits would ignore it


def test_members_per_group_stay_within_the_inner_window_and_the_page_budget():
    assert inner_size_for(10, 1000) == 99
    assert inner_size_for(100, 1000) == 9
    assert inner_size_for(5000, 1000) == 0


def test_group_count_with_a_post_filter_and_typed_keys():
    body = pushdown_body({"post_filter": {"term": {"t": "x"}}}, 0, 10, inner_size=3)
    assert body["aggs"][GROUPS_AGG] == {"filter": {"term": {"t": "x"}}, "aggs": {GROUPS_AGG: {"cardinality": {
        "field": "neardup.cluster", "precision_threshold": 40000}}}}
    answer = recorded()
    answer["aggregations"] = {f"filter#{GROUPS_AGG}": {"doc_count": 9, f"cardinality#{GROUPS_AGG}": {"value": 5}},
                              "sterms#t": {"buckets": []}}
    out = pushdown_response(answer, {}, 0.8, "resemblance", inner_size=0)
    assert out["neardup"]["groups_total"] == 5 and out["aggregations"] == {"sterms#t": {"buckets": []}}
    assert out["hits"]["hits"][0]["inner_hits"]["neardup"]["hits"]["hits"] == []  # inner_size 0
    assert out["hits"]["hits"][0]["inner_hits"]["neardup"]["hits"]["total"]["value"] == 2  # still counted


def test_a_document_without_a_cluster_id_makes_the_answer_unusable():
    answer = recorded()
    del answer["hits"]["hits"][1]["fields"]  # native collapse groups the documents without a value
    with pytest.raises(CollapseError):
        pushdown_response(answer, {}, 0.8, "resemblance")


def test_cached_facts_are_shared_and_expire():
    import asyncio

    from neardup.proxy.handlers.cluster_facts import Facts, FactsCache

    calls = []

    async def check() -> Facts:
        calls.append(1)
        await asyncio.sleep(0.01)
        return Facts({"a": READY}, True)

    async def scenario() -> None:
        cache = FactsCache(seconds=0.2)
        first = await asyncio.gather(*(cache.get(("a", ""), check) for _ in range(5)))
        assert len(calls) == 1 and all(f.allow(0.8, "resemblance", "3-abc") for f in first)
        settled = cache.get(("a", ""), check)   # fresh facts: the settled future itself, no shield
        assert settled.done() and settled.result() is first[0] and settled is cache.get(("a", ""), check)
        pending = cache.get(("a", "someone else"), check)
        assert not pending.done()   # being checked: awaited
        await pending
        assert len(calls) == 2
        await asyncio.sleep(0.25)
        expired = cache.get(("a", ""), check)
        assert not expired.done()   # expired: checked again
        await expired
        assert len(calls) == 3
        cache.forget(("a", ""))
        forgotten = cache.get(("a", ""), check)
        assert not forgotten.done()   # forgotten: checked again
        await forgotten
        assert len(calls) == 4

    asyncio.run(scenario())
    assert not Facts({"a": READY}, False).allow(0.8, "resemblance", "3-abc")
