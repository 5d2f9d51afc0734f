"""missive-vllm: the ``vllm`` driver (:mod:`.driver`), an extension of
``missive-openai`` for vLLM's OpenAI-compatible server. Its tests use
:class:`missive_openai.testing.FakeChatServer` with ``vllm=True``."""
