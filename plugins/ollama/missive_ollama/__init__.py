"""missive-ollama: a Missive driver for Ollama's native API.

:mod:`missive_ollama.plugin` registers the ``ollama`` driver;
:mod:`missive_ollama.driver` implements it, :mod:`missive_ollama.client` holds
every HTTP call to Ollama, :mod:`missive_ollama.convert` builds ``/api/chat``
bodies and :mod:`missive_ollama.estimate` estimates prompt tokens.
"""
