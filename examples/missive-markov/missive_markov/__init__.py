"""missive-markov: an example third-party Missive driver and the toy backend it talks to.

:mod:`.plugin` registers the ``markov`` driver (entry point group
``missive``); :mod:`.driver` talks to a :mod:`.backend` process over HTTP;
:mod:`.settings` validates a model's ``settings`` table.
"""

__version__ = "0.1.0"
