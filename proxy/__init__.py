"""The collapsing proxy: an aiohttp server in front of Elasticsearch that folds near-duplicate hits.

Layers, each importing only itself and the ones below it:

* :mod:`proxy.transport`: the upstream nodes, the HTTP/1.1 client, HTTP framing, JSON, error
  bodies, access rules;
* :mod:`proxy.grouping`: pure grouping of hits (fingerprints, TF-IDF vectors, similarities);
* :mod:`proxy.handlers`: request handling (controls, search planning, the collapsed-search
  paths, forwarding, the ops endpoints, the playground);
* :mod:`proxy.app` (the aiohttp application and its middleware), then :mod:`proxy.server`
  (sockets and worker processes), then :mod:`proxy.cli`.
"""
