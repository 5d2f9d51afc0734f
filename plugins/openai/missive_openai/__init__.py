"""missive-openai: a driver for any OpenAI-compatible chat completions server.

Modules: :mod:`.settings` (the model's ``settings`` table), :mod:`.convert`
(Messages request -> chat completions body), :mod:`.chunks` (stream chunks ->
Missive events), :mod:`.upstream_errors` (backend errors -> the Anthropic
envelope), :mod:`.driver` (the driver), :mod:`.testing` (a fake server that
reproduces vLLM's wire format, for tests).
"""
