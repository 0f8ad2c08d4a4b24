"""scripts/demo, the second of the README's two commands (``make demo`` starts its node first),
on the suite's node: it loads a plain index with the engine's own client, enriches it with
``neardup index`` and prints one search directly and through the proxy, where copies fold."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from neardup.upstream import ClusterInfo
from tests.engine_support import delete_index
from tests.plugins.corpora import ROOT, neardup_env

#: Enough stories for Reuters' re-sent and corrected stories to show up as copies.
DOCS = 600


def test_the_demo_loads_enriches_and_folds_copies_through_the_proxy(es: Any, es_url: str,
                                                                     engine: ClusterInfo) -> None:
    try:
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo"), "--docs", str(DOCS)],
                                capture_output=True, text=True, timeout=600, cwd=ROOT,
                                env=neardup_env(es_url, NEARDUP_DEMO_ES_URL=es_url))
    finally:
        delete_index(es, "reuters-demo")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout
    assert f"on {engine.engine} {engine.version} at" in out
    assert f"demo: loaded {DOCS} stories" in out
    direct, proxied = out.split("== directly from", 1)[1].split("== through the neardup proxy", 1)
    ids = [re.findall(r"^\s*\d+\.\s+(\d+)", part, re.M) for part in (direct, proxied)]
    folded = re.findall(r"\[\+(\d+) near-duplicates folded: ([\d, ]+)\]", proxied)
    assert folded, proxied
    # The page through the proxy holds no copy it folded, and as many stories as the direct one.
    members = {member.strip() for _, listed in folded for member in listed.split(",")}
    assert len(ids[1]) == len(ids[0]) == 10 and not members & set(ids[1])
    assert '"collapsed": ' in proxied and "Traceback" not in result.stderr
