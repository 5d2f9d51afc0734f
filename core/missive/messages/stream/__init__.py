"""One code path from driver events to the API's stream events.

:class:`MessageStream` consumes a driver's :mod:`~missive.driver.events` and produces
the Messages API stream events as dicts (``message_start``,
``content_block_start``/``delta``/``stop``, ``message_delta``,
``message_stop``). Streaming requests serialize them as SSE
(:mod:`missive.protocol.sse`); non-streaming requests fold them with
:func:`accumulate` into the ``Message`` object. Both come from the same events,
so stream and non-stream answers are equivalent (contract section 4).

Rules applied here, for every driver (contract sections 3 and 4), each in
the module of its concern (:mod:`.message`: the loop, stop sequences and
errors; :mod:`.blocks`: block order, text and thinking; :mod:`.parsing`:
reasoning and calls written as text; :mod:`.tool_use`: client tool calls;
:mod:`.server_tools`: server tools; :mod:`.usage`: usage and the stop
reason; :mod:`.fold`: the non-streaming message). ``tests/test_message_stream_table.py``
specifies them event by event:

* blocks are opened and closed in index order, never interleaved;
* stop sequences are matched exactly on the text, with hold-back; on a match
  generation is stopped and ``stop_reason`` is ``stop_sequence``;
* reasoning written as text is separated by the driver's reasoning parser (if
  it returns one), then tool calls are parsed by its tool parser (if it
  returns one); only answer text outside calls is matched against stop
  sequences;
* thinking the client did not ask for (``thinking`` absent or ``disabled``)
  is dropped, though counted in ``output_tokens``; with ``display:
  "omitted"`` thinking blocks carry no text; every thinking block ends with
  exactly one ``signature_delta`` just before its ``content_block_stop``
  (:mod:`missive.thinking.signing`);
* ``stop_reason`` is ``tool_use`` whenever a tool call was emitted; with
  ``disable_parallel_tool_use`` generation stops after the first call;
* a call of a server tool (``web_search``, ``web_fetch``) is a
  ``server_tool_use`` block, answered at once by its result block: the
  tool's results when the server runs it
  (:class:`~missive.tools.server_runner.ServerToolRunner`), else the
  ``unavailable`` error; then the model goes on after the result, as with
  the API's server-side loop: generation is restarted on the conversation
  plus the answer so far (:func:`~missive.messages.conversation.continue_after`), in
  the same message (:mod:`missive.tools.server`); a call the server makes
  itself (``GenerationRequest.server_call``) comes first, before the model
  answers;
* ``message_delta`` carries cumulative usage, input and cache fields repeated
  (corrected by :class:`~missive.driver.events.Finished` when the driver learned the
  exact prompt split only at the end).
"""

from __future__ import annotations

from .fold import accumulate
from .message import MessageStream

__all__ = ["MessageStream", "accumulate"]
