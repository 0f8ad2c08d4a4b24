"""Pure parts of the push-down to native collapse (proxy/pushdown.py), on recorded-shape responses."""

from __future__ import annotations

import pytest

from proxy.collapse import CollapseError
from proxy.pushdown import GROUPS_AGG, clusters_match, pushdown_body, pushdown_response

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


def test_a_response_without_groups_is_refused_for_fail_open():
    answer = recorded()
    del answer["hits"]["hits"][0]["inner_hits"]
    with pytest.raises(CollapseError):
        pushdown_response(answer, {}, 0.8, "resemblance")
    with pytest.raises(CollapseError):
        pushdown_response({"hits": "no"}, {}, 0.8, "resemblance")
