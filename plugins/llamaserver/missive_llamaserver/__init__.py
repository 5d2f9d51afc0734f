"""missive-llamaserver: the ``llamaserver`` driver, for llama.cpp's ``llama-server``
and the ik_llama.cpp fork.

Modules: :mod:`.settings` (the model's ``settings`` table), :mod:`.props`
(``/props`` and ``/v1/models``), :mod:`.forced` (forced tool calls by a
JSON-schema grammar), :mod:`.chunks` (stream chunks -> events),
:mod:`.errors` (llama-server's errors -> the Anthropic envelope),
:mod:`.upstream` (HTTP with replicas), :mod:`.driver` (the driver),
:mod:`.testing` (a real ``llama-server`` for tests, and a fake reproducing
its wire format for the error paths).
"""
