"""The proxy's request handling: controls, search planning, the collapsed-search paths, forwarding,
the ops endpoints and the playground.

Built on :mod:`neardup.proxy.transport` and :mod:`neardup.proxy.grouping`; never imports the app wiring
(:mod:`neardup.proxy.app`, :mod:`neardup.proxy.server`), which builds on it.
"""
