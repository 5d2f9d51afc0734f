"""Serving one request, below the HTTP shell (:mod:`missive.server`).

* :mod:`.service`: :class:`~missive.serving.service.Messages`, the seam
  ``POST /v1/messages``, ``count_tokens`` and each batch request go through;
  :mod:`.prepared` (who asks, what is ready to begin) and :mod:`.answer`
  (one answer under its admission permit);
* :mod:`.admission`: per-model slots and queues (429/529 before any work);
* :mod:`.record`: a request's record (its log line, metrics, usage) and
  :mod:`.logs`, the request log;
* :mod:`.choice`: which model answers (aliases, the key's scope, routing
  rules, fallbacks).

Nothing here imports Quart: the routes read the HTTP request and hand these
objects what it holds.
"""
