"""The proxy's bottom layer: the upstream nodes, HTTP details, JSON, error bodies, access rules.

Nothing here knows about collapsing; everything above may import it.
"""
