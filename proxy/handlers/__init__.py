"""The proxy's request handling: controls, search planning, the collapsed-search paths, forwarding,
the ops endpoints and the playground.

Built on :mod:`proxy.transport` and :mod:`proxy.grouping`; never imports the app wiring
(:mod:`proxy.app`, :mod:`proxy.server`), which builds on it.
"""
