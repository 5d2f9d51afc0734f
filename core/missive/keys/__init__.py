"""API keys as identities (issue 32): named, scoped, hashed keys
(:mod:`.entry`, :mod:`.ring`), the request's identity and the admin scope
(:mod:`.access`), limits per key with the API's 429 and rate-limit headers
(:mod:`.buckets`, :mod:`.limits`), usage per key (:mod:`.usage`,
:mod:`.metrics`), ``GET /v1/usage`` (:mod:`.routes`) and the ``missive keys``
and ``missive usage`` commands (:mod:`.cli`). See docs/configuration.md#keysname
and docs/operations.md#keys-limits-and-usage.

Nothing is imported here: :mod:`missive.config` imports :mod:`.entry`, and
the rest imports the configuration.
"""
