"""The collapsing proxy: an aiohttp server in front of Elasticsearch that folds near-duplicate hits.

Layers, each importing only itself and the ones below it:

* :mod:`neardup.proxy.transport`: the upstream nodes, the HTTP/1.1 client, HTTP framing, JSON, error
  bodies, access rules;
* :mod:`neardup.proxy.grouping`: pure grouping of hits (fingerprints, TF-IDF vectors, similarities);
* :mod:`neardup.proxy.handlers`: request handling (controls, search planning, the collapsed-search
  paths, forwarding, the ops endpoints, the playground);
* :mod:`neardup.proxy.app` (the aiohttp application and its middleware), then :mod:`neardup.proxy.server`
  (sockets and worker processes), then :mod:`neardup.cli.proxy`.
"""
