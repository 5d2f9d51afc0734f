"""Tool calls whose arguments are tagged parameters: Qwen3-Coder / Qwen3.5 /
Nemotron 3 (``qwen3_xml``), Seed-OSS (``seed_oss``), MiniMax-M2
(``minimax_m2``), GLM-4.5/4.6/4.7 (``glm45``) and DeepSeek-V3.2's DSML
(``deepseek_v32``).

Each writes one tag per argument holding its value as raw text (a string as
it is, other values as JSON), so values are typed from the tool's
``input_schema`` (:mod:`missive.tools.parsers.values`). Calls are read one by
one as their end tag arrives (:mod:`missive.tools.parsers.blocks`), so each
call's arguments arrive as one ``input_json_delta``.

The syntax of each, from the models' own chat templates (which render past
calls exactly as the model writes new ones) and the parsers of vLLM
(``vllm/tool_parsers/``) and llama.cpp (``common/chat.cpp``):

* **qwen3_xml** (Qwen3-Coder's ``chat_template.jinja``, Qwen3.5/3.6, NVIDIA
  Nemotron 3 Nano; vLLM ``qwen3coder_tool_parser.py``)::

      <tool_call>
      <function=get_weather>
      <parameter=city>
      Paris
      </parameter>
      </function>
      </tool_call>

  Qwen3-Coder sometimes leaves out ``<tool_call>`` and starts at
  ``<function=`` (vLLM accepts that too): read the same way.
* **seed_oss** (ByteDance Seed-OSS template, llama.cpp
  ``models/templates/ByteDance-Seed-OSS.jinja``): the same call inside
  ``<seed:tool_call>...</seed:tool_call>``, values usually inline.
* **minimax_m2** (MiniMax-M2 template, llama.cpp
  ``models/templates/unsloth-MiniMax-M2.jinja``; vLLM
  ``minimax_m2_tool_parser.py``): several calls in one block::

      <minimax:tool_call>
      <invoke name="get_weather">
      <parameter name="city">Paris</parameter>
      </invoke>
      </minimax:tool_call>

* **glm45** (GLM-4.5/4.6 templates, llama.cpp ``models/templates/GLM-4.6.jinja``;
  vLLM ``glm4_moe_tool_parser.py``, ``glm47_moe_tool_parser.py``): the name
  right after the tag, then key/value pairs; GLM-4.7 writes no newline after
  the name::

      <tool_call>get_weather
      <arg_key>city</arg_key>
      <arg_value>Paris</arg_value>
      </tool_call>

* **deepseek_v32** (DeepSeek-V3.2 template, llama.cpp
  ``models/templates/DeepSeek-V3.2.jinja``; vLLM ``deepseekv32_tool_parser.py``):
  ``｜DSML｜``-prefixed tags, each parameter saying whether it is a string::

      <｜DSML｜function_calls>
      <｜DSML｜invoke name="get_weather">
      <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
      </｜DSML｜invoke>
      </｜DSML｜function_calls>

Rules beyond :mod:`missive.tools.parsers.blocks`: in ``qwen3_xml``, one
newline right after an opening value tag and one right before its closing
tag are not part of the value (Qwen's layout, as vLLM reads it); the other
formats write values inline and keep them exactly; anything but whitespace between the tags of a call
makes it malformed (given back as text); a parameter cut before its closing
tag is never completed.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from ._common import InvalidCall, InvalidCallHeader
from .blocks import BlockParser, ParsedCall
from .values import arguments_json, property_schema, strip_value_newlines, typed_value

__all__ = [
    "QwenXmlParser",
    "SeedOssParser",
    "MiniMaxM2Parser",
    "Glm45Parser",
    "DeepSeekV32Parser",
    "DeepSeekV4Parser",
    "DeepSeekV41Parser",
]

_NAME = r"[A-Za-z0-9_.:\-]{1,64}"


class _ParameterParser(BlockParser):
    """A block format whose calls are a header naming the tool, then
    parameters ``PARAM`` ... ``VALUE_END``."""

    arguments_format = "parameters"
    #: The call's header; group ``name`` is the tool.
    HEADER: ClassVar[re.Pattern[str]]
    #: One parameter's opening tag; group ``key``, optional group ``string``.
    PARAM: ClassVar[re.Pattern[str]]
    VALUE_END: ClassVar[str]
    #: Whether the format puts a newline after an opening value tag and before
    #: its closing tag (Qwen's layout), which are then not part of the value;
    #: formats that write values inline keep them exactly.
    VALUE_NEWLINES: ClassVar[bool] = False
    #: Literal text of a forced call around its parameters (``{name}`` is the tool).
    CALL_PREFIX: ClassVar[str]
    CALL_SUFFIX: ClassVar[str]
    #: Literal text around one parameter's value (``{key}``, ``{string}``).
    PARAM_PREFIX: ClassVar[str]
    PARAM_SUFFIX: ClassVar[str]

    _close = ""  # the value's closing tag in the call being read (value_close)

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return cls.CALL_PREFIX.format(name=name), cls.CALL_SUFFIX

    @classmethod
    def parameter_syntax(cls, key: str, string: bool) -> tuple[str, str]:
        flag = "true" if string else "false"
        return cls.PARAM_PREFIX.format(key=key, string=flag), cls.PARAM_SUFFIX

    @classmethod
    def value_forbids(cls) -> tuple[tuple[str, ...], ...]:
        """A value ends where its closing tag is followed by the next
        parameter, or where a parameter opens (a missing closing tag: at a
        line start in Qwen's layout); the call ends where its end marker is
        followed by what may follow a call (:meth:`_value_end`,
        :attr:`FOLLOWERS`). Nothing else ends a value."""
        return cls._forbids(cls.VALUE_END, cls.CALL_END or next(iter(cls.BLOCKS.values())))

    @classmethod
    def _forbids(cls, value_end: str, call_end: str) -> tuple[tuple[str, ...], ...]:
        param_open = cls.PARAM_PREFIX.split("{", 1)[0]
        out: list[tuple[str, ...]] = [
            (value_end, param_open),
            ("\n" + param_open,) if cls.VALUE_NEWLINES else (param_open,),
        ]
        out += [(call_end, follower) for follower in cls.FOLLOWERS]
        if cls.CALL_END is None:
            # The block's close ends the call, and text may follow it: a
            # closed value right before it ends the call (GLM).
            out.append((value_end, call_end))
        return tuple(out)

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        header = self.HEADER.match(text)
        if header is None:
            raise InvalidCallHeader("no tool name")
        name = self._unescape(header.group("name"))
        if name not in self.tool_names:
            raise InvalidCallHeader(f"tool {name!r} was not offered")
        self._close = self.value_close(opener)
        schema = self.schemas.get(name)
        properties = (schema or {}).get("properties") or {}
        pairs: list[tuple[str, Any]] = []
        pos = header.end()
        while True:
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos == len(text):
                break
            tag = self.PARAM.match(text, pos)
            if tag is None:
                raise InvalidCall(f"unexpected text in a call: {text[pos : pos + 40]!r}")
            key = self._unescape(tag.group("key").strip())
            seen = {k for k, _ in pairs} | {key}
            end, pos = self._value_end(text, tag.end(), properties, seen)
            raw = text[tag.end() : end]
            if self.VALUE_NEWLINES:
                raw = strip_value_newlines(raw)
            pairs.append((key, self._value(raw, key, tag, schema)))
        return [(name, arguments_json(pairs))]

    def value_close(self, opener: str) -> str:
        """The tag closing a value in the block ``opener`` opened."""
        return self.VALUE_END

    @staticmethod
    def _unescape(name: str) -> str:
        """A name as the format writes it in an attribute (Kimi-K3 escapes
        ``&`` and ``"``); as it is elsewhere."""
        return name

    def _value_end(self, text: str, start: int, properties: Any, seen: set[str]) -> tuple[int, int]:
        """Where the value starting at ``start`` ends, and where the next
        parameter may start.

        Rules (what llama.cpp's parsers recover; the formats' own templates
        write every closing tag): a closing tag ends the value only where
        whitespace and then the next parameter or the end of the call
        follow it (a closing tag inside a value, in code a model writes
        about the format, is text); a parameter opening tag for another
        of the tool's properties, not given yet, ends a value whose closing
        tag is missing (at the start of a line in a layout with newlines);
        the value of the last parameter may run to the end of a call that
        ended at its end marker (not at the end of the generation: a value
        cut there is never completed)."""
        at = start
        close = -1
        end_tag = self._close
        while (k := text.find(end_tag, at)) >= 0:
            after = k + len(end_tag)
            rest = after
            while rest < len(text) and text[rest] in " \t\r\n":
                rest += 1
            if rest == len(text) or self.PARAM.match(text, rest):
                close = k
                break
            at = k + 1
        limit = close if close >= 0 else len(text)
        for tag in self.PARAM.finditer(text, start, limit):
            key = self._unescape(tag.group("key").strip())
            if key in seen or key not in properties:
                continue
            if self.VALUE_NEWLINES and text[tag.start() - 1 : tag.start()] != "\n":
                continue
            self._lenient = True
            return tag.start(), tag.start()
        if close >= 0:
            return close, close + len(end_tag)
        if not self._bounded:
            raise InvalidCall("parameter without its closing tag")
        self._lenient = True
        return len(text), len(text)

    def _value(self, raw: str, key: str, tag: re.Match[str], schema: Any) -> Any:
        return typed_value(raw, property_schema(schema, key), schema)


class QwenXmlParser(_ParameterParser):
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``."""

    name = "qwen3_xml"
    BLOCKS = {"<tool_call>": "</tool_call>", "<function=": ""}
    KEEP_OPENER = frozenset({"<function="})
    CALL_END = "</function>"
    FOLLOWERS = ("</tool_call>", "<tool_call>", "<function=")
    HEADER = re.compile(rf"<function=(?P<name>{_NAME})>")
    PARAM = re.compile(r"<parameter=(?P<key>[^>\n]{1,200})>")
    VALUE_END = "</parameter>"
    VALUE_NEWLINES = True
    CALL_PREFIX = "<tool_call>\n<function={name}>\n"
    CALL_SUFFIX = "</function>\n</tool_call>"
    PARAM_PREFIX = "<parameter={key}>\n"
    PARAM_SUFFIX = "\n</parameter>\n"
    call_separator = "\n"
    output_markers = ("<function=",)
    call_openers = ("<tool_call>\n<function=", "<tool_call><function=")


class SeedOssParser(QwenXmlParser):
    """``<seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></seed:tool_call>``."""

    name = "seed_oss"
    BLOCKS = {"<seed:tool_call>": "</seed:tool_call>"}
    KEEP_OPENER = frozenset()
    FOLLOWERS = ("</seed:tool_call>", "<seed:tool_call>", "<function=")
    VALUE_NEWLINES = False
    CALL_PREFIX = "<seed:tool_call>\n<function={name}>\n"
    CALL_SUFFIX = "</function>\n</seed:tool_call>"
    PARAM_PREFIX = "<parameter={key}>"
    PARAM_SUFFIX = "</parameter>\n"
    output_markers = ("<seed:tool_call>",)


class MiniMaxM2Parser(_ParameterParser):
    """MiniMax-M2's calls::

    <minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke>...</minimax:tool_call>
    """  # noqa: E501 - the sample is one line, as the model writes it

    name = "minimax_m2"
    BLOCKS = {"<minimax:tool_call>": "</minimax:tool_call>"}
    CALL_END = "</invoke>"
    FOLLOWERS = ("</minimax:tool_call>", "<invoke", "<minimax:tool_call>")
    HEADER = re.compile(rf"<invoke name=\"?(?P<name>{_NAME})\"?>")
    PARAM = re.compile(r"<parameter name=\"?(?P<key>[^\">\n]{1,200})\"?>")
    VALUE_END = "</parameter>"
    CALL_PREFIX = '<minimax:tool_call>\n<invoke name="{name}">\n'
    CALL_SUFFIX = "</invoke>\n</minimax:tool_call>"
    PARAM_PREFIX = '<parameter name="{key}">'
    PARAM_SUFFIX = "</parameter>\n"
    call_separator = "\n"
    output_markers = ("<minimax:tool_call>", "<invoke name=")


class Glm45Parser(_ParameterParser):
    """``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>``."""

    name = "glm45"
    BLOCKS = {"<tool_call>": "</tool_call>"}
    CALL_END = None
    FOLLOWERS = ("<tool_call>",)
    HEADER = re.compile(rf"(?P<name>{_NAME})")
    PARAM = re.compile(r"<arg_key>(?P<key>[^<\n]{1,200})</arg_key>\s*<arg_value>")
    VALUE_END = "</arg_value>"
    CALL_PREFIX = "<tool_call>{name}\n"
    CALL_SUFFIX = "</tool_call>"
    PARAM_PREFIX = "<arg_key>{key}</arg_key>\n<arg_value>"
    PARAM_SUFFIX = "</arg_value>\n"
    call_separator = "\n"
    output_markers = ("<arg_key>",)


class DeepSeekV32Parser(_ParameterParser):
    """DeepSeek DSML: ``<｜DSML｜function_calls><｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>...``.

    ``string="true"``: the value is the raw text; ``"false"``: JSON (typed
    from the schema when it is not JSON).

    Every DSML generation is read, whichever model writes it: V3.2's
    ``function_calls`` block, V4's ``tool_calls`` and V4.1's, whose tags
    have a space after the ``｜DSML｜`` token (``<｜DSML｜ calls>``,
    ``<｜DSML｜ invoke ...>``; DeepSeek's ``encoding/encoding_dsv4.py`` and
    ``encoding/encoding.py`` of the V4 and V4.1 repositories, as the
    canitoolcall corpus records them). A forced call is written in the
    parser's own generation (:attr:`CALL_PREFIX`)."""

    name = "deepseek_v32"
    BLOCKS = {
        "<｜DSML｜function_calls>": "</｜DSML｜function_calls>",
        "<｜DSML｜tool_calls>": "</｜DSML｜tool_calls>",
        "<｜DSML｜ calls>": "</｜DSML｜ calls>",
    }
    CALL_END = "</｜DSML｜invoke>"
    FOLLOWERS = (*BLOCKS.values(), "<｜DSML｜invoke", "<｜DSML｜ invoke")
    HEADER = re.compile(rf"<｜DSML｜ ?invoke name=\"(?P<name>{_NAME})\"/?>")
    PARAM = re.compile(
        r"<｜DSML｜ ?parameter name=\"(?P<key>[^\">\n]{1,200})\"(?: string=\"(?P<string>true|false)\")?>"
    )
    VALUE_END = "</｜DSML｜parameter>"
    CALL_PREFIX = '<｜DSML｜function_calls>\n<｜DSML｜invoke name="{name}">\n'
    CALL_SUFFIX = "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    PARAM_PREFIX = '<｜DSML｜parameter name="{key}" string="{string}">'
    PARAM_SUFFIX = "</｜DSML｜parameter>\n"
    call_separator = "\n"
    output_markers = ("｜DSML｜invoke", "｜DSML｜ invoke")

    def call_end(self, opener: str) -> str:
        return "</｜DSML｜ invoke>" if opener.startswith("<｜DSML｜ ") else "</｜DSML｜invoke>"

    def value_close(self, opener: str) -> str:
        return "</｜DSML｜ parameter>" if opener.startswith("<｜DSML｜ ") else "</｜DSML｜parameter>"

    @classmethod
    def value_forbids(cls) -> tuple[tuple[str, ...], ...]:
        # Every DSML generation is read: the spaced tags end a value too.
        spaced: tuple[tuple[str, ...], ...] = (
            ("</｜DSML｜ parameter>", "<｜DSML｜ parameter"),
            ("<｜DSML｜ parameter name=",),
            *(("</｜DSML｜ invoke>", f) for f in cls.FOLLOWERS),
        )
        return cls._forbids("</｜DSML｜parameter>", "</｜DSML｜invoke>") + spaced

    def _value(self, raw: str, key: str, tag: re.Match[str], schema: Any) -> Any:
        if tag.group("string") == "true":
            return raw
        if tag.group("string") == "false":
            try:
                return json.loads(raw)
            except ValueError:
                pass
        return super()._value(raw, key, tag, schema)


class DeepSeekV4Parser(DeepSeekV32Parser):
    """DeepSeek-V4's DSML: the V3.2 syntax in a ``<｜DSML｜tool_calls>`` block."""

    name = "deepseek_v4"
    CALL_PREFIX = '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="{name}">\n'
    CALL_SUFFIX = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"


class DeepSeekV41Parser(DeepSeekV32Parser):
    """DeepSeek-V4.1's DSML: a space after each ``｜DSML｜`` token,
    ``<｜DSML｜ calls><｜DSML｜ invoke name="NAME"><｜DSML｜ parameter ...>``."""

    name = "deepseek_v41"
    CALL_PREFIX = '<｜DSML｜ calls>\n<｜DSML｜ invoke name="{name}">\n'
    CALL_SUFFIX = "</｜DSML｜ invoke>\n</｜DSML｜ calls>"
    PARAM_PREFIX = '<｜DSML｜ parameter name="{key}" string="{string}">'
    PARAM_SUFFIX = "</｜DSML｜ parameter>\n"
