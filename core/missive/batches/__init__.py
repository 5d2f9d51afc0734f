"""Message Batches: the API's ``/v1/messages/batches`` endpoints on local models.

* :mod:`~missive.batches.shapes`: the API's objects (batch, result lines,
  deleted) and the create body's own rules;
* :mod:`~missive.batches.store`: batches and requests in SQLite, durable;
* :mod:`~missive.batches.execute`: one request checked and run as
  ``POST /v1/messages`` would run it;
* :mod:`~missive.batches.runner`: pending requests onto free slots, below
  interactive traffic (preempted when an interactive request waits);
* :mod:`~missive.batches.service`: the operations the routes call, expiry,
  archiving, the database's lifecycle;
* :mod:`~missive.batches.metrics`: their Prometheus metrics;
* :mod:`~missive.cli.batches`: ``missive batches`` (list, show, results).
"""
