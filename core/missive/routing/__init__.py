"""Routing across a fleet: which replica (:mod:`.policy`, :mod:`.prefix`)
and which model (:mod:`.rules`, :mod:`.fallbacks`) answers a request."""
