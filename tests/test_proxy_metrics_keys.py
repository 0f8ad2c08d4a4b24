"""``Metrics.answered`` and ``Metrics.searched``: the same series as ``inc`` and ``observe`` with
the request's labels."""

from __future__ import annotations

from neardup.proxy.handlers.metrics import Metrics


def test_answered_is_inc_and_observe_with_the_route_and_status() -> None:
    ours, labelled = Metrics(), Metrics()
    for route, status, seconds in [("passthrough", 200, 0.003), ("search", 200, 0.02),
                                   ("passthrough", 200, 0.7), ("passthrough", 404, 0.001)]:
        ours.answered(route, status, seconds)
        labelled.inc("neardup_proxy_requests_total", route=route, status=str(status))
        labelled.observe(seconds, route=route)
    assert ours.snapshot() == labelled.snapshot()
    assert ours.render() == labelled.render()


def test_searched_is_inc_with_the_outcome_and_its_reason() -> None:
    ours, labelled = Metrics(), Metrics()
    for outcome in ["collapsed", "passed:off", "passed:off", "passed:scroll", "fail_open", "collapsed"]:
        ours.searched(outcome)
        kind, _, reason = outcome.partition(":")
        labelled.inc("neardup_proxy_searches_total", outcome=kind, reason=reason)
    assert ours.snapshot() == labelled.snapshot()
    assert ours.render() == labelled.render()
