"""The web console at ``/console``: the server's state, its recent requests,
graphs of the last hour, a playground and the message batches, in a browser
(docs/operations.md, "Web console").

:mod:`~missive.console.history` keeps what the page shows of the past (in
memory, per process); :mod:`~missive.server.routes.console` serves the page (the
static files in ``static/``, shipped in the package) and its JSON calls.
"""
