"""Prefix keys of requests, and a bounded index of which replica served which prefix.

A backend replica with a prefix cache (vLLM's automatic prefix caching,
SGLang's radix cache, llama-server's slots and ``--cache-ram``) answers a
prompt faster when it has served a prompt that starts the same way. To send
a request where its prefix is, the router needs two things, both here:

* a :class:`RouteKey`: the prompt cut into fixed-size blocks, each named by a
  hash chained over every block before it (block ``i``'s hash stands for the
  whole prefix up to ``i``, the scheme of vLLM's prefix-caching block hashes:
  ``vllm/v1/core/kv_cache_utils.py`` ``hash_block_tokens``); only whole
  blocks count. :meth:`RouteKey.of_chat` keys an OpenAI-style or Ollama chat
  body: the system messages, then the tools, then the other messages, in the
  order chat templates render them (the tools go into the system turn in the
  Hermes, Qwen and Llama 3 templates), each as compact JSON. Two requests
  whose keys share ``k`` blocks render prompts that share about as much,
  since a template renders equal messages equally. :meth:`RouteKey.of_tokens`
  keys a token list (the simulator's);
* a :class:`PrefixIndex`: per replica, the block hashes it was sent, least
  recently used first, bounded in blocks (an approximation of what the
  replica's cache holds, in the manner of SGLang's router, which keeps an
  approximate radix tree per worker, ``sgl-router`` ``cache_aware``).

Blocks of one prompt are inserted deepest first, so a block's whole prefix is
always more recent than it and eviction (least recent first) takes leaves
before their ancestors: what the index holds for a replica stays closed under
prefixes, and the deepest block it holds of a request is found by a binary
search. Block hashes use Python's ``hash``, keyed per process (SipHash): an
index lives in one process, and a client cannot make two prompts collide on
purpose. A collision would only misroute a request: the backend's own cache
reuses exact prefixes only, so routing never changes an answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol import fastjson

__all__ = ["RouteKey", "PrefixIndex", "BLOCK_CHARS", "CHARS_PER_TOKEN", "BLOCK_TOKENS"]

#: Characters per block of a text key (about 64 tokens of English or code).
BLOCK_CHARS = 256
#: Characters per token, to size the index from a token capacity (the
#: ``openai`` driver's estimate too).
CHARS_PER_TOKEN = 4
#: Tokens per block of a token key (vLLM's default block size).
BLOCK_TOKENS = 16


def _chain(chunks: Iterable[Hashable]) -> tuple[int, ...]:
    hashes: list[int] = []
    last = 0
    for chunk in chunks:
        last = hash((last, chunk))
        hashes.append(last)
    return tuple(hashes)


@dataclass(frozen=True)
class RouteKey:
    """What a replica policy routes a request by.

    Attributes:
        blocks: chained block hashes of the prompt (empty: no prefix to follow).
        session: the client's session id (``x-claude-code-session-id``...), or None.
    """

    blocks: tuple[int, ...] = ()
    session: str | None = None

    @classmethod
    def of_text(cls, text: str, session: str | None = None, *, block_chars: int = BLOCK_CHARS) -> RouteKey:
        """The key of a prompt's text: its whole ``block_chars`` blocks."""
        whole = len(text) - len(text) % block_chars
        return cls(_chain(text[i : i + block_chars] for i in range(0, whole, block_chars)), session)

    @classmethod
    def of_tokens(
        cls, tokens: Sequence[int], session: str | None = None, *, block_tokens: int = BLOCK_TOKENS
    ) -> RouteKey:
        """The key of a prompt's tokens: its whole ``block_tokens`` blocks."""
        whole = len(tokens) - len(tokens) % block_tokens
        return cls(
            _chain(tuple(tokens[i : i + block_tokens]) for i in range(0, whole, block_tokens)), session
        )

    @classmethod
    def of_chat(cls, body: Mapping[str, Any], session: str | None = None) -> RouteKey:
        """The key of a chat body (``messages``, ``tools``: OpenAI's chat
        completions or Ollama's ``/api/chat``): system messages, tools, then
        the other messages, each as compact JSON (see the module doc)."""
        messages = body.get("messages") or []
        system = [m for m in messages if isinstance(m, dict) and m.get("role") == "system"]
        rest = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
        parts = [fastjson.dumps(m) for m in system]
        if body.get("tools"):
            parts.append(fastjson.dumps(body["tools"]))
        parts.extend(fastjson.dumps(m) for m in rest)
        return cls.of_text(b"".join(parts).decode("utf-8", "replace"), session)


class PrefixIndex:
    """Which block hashes each replica was sent, bounded (see the module doc).

    Args:
        capacity: blocks kept per replica; beyond it the least recently sent go.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a prefix index needs room for at least one block")
        self.capacity = capacity
        self._held: dict[object, OrderedDict[int, None]] = {}
        self._stamp: dict[object, int] = {}
        self._clock = 0

    def insert(self, owner: object, blocks: Sequence[int]) -> None:
        """Note that ``owner`` was sent a prompt of ``blocks`` (deepest first,
        so its prefixes are the most recent)."""
        held = self._held.setdefault(owner, OrderedDict())
        for block in reversed(blocks):
            held[block] = None
            held.move_to_end(block)
        while len(held) > self.capacity:
            held.popitem(last=False)
        self._clock += 1
        self._stamp[owner] = self._clock

    def depth(self, owner: object, blocks: Sequence[int]) -> int:
        """How many leading ``blocks`` ``owner`` holds (binary search: what it
        holds is closed under prefixes)."""
        held = self._held.get(owner)
        if not held or not blocks or blocks[0] not in held:
            return 0
        low, high = 1, len(blocks)  # blocks[:low] held; blocks[:high + 1] not known
        while low < high:
            middle = (low + high + 1) // 2
            if blocks[middle - 1] in held:
                low = middle
            else:
                high = middle - 1
        return low

    def recency(self, owner: object) -> int:
        """When ``owner`` was last sent a prompt (larger: more recently; 0: never)."""
        return self._stamp.get(owner, 0)

    def size(self, owner: object) -> int:
        """Blocks held for ``owner``."""
        return len(self._held.get(owner, ()))

    def forget(self, owner: object) -> None:
        """Drop everything held for ``owner`` (a replica that went down lost its cache)."""
        self._held.pop(owner, None)
        self._stamp.pop(owner, None)
