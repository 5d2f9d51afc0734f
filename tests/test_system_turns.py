"""Mid-conversation system messages stay where they are sent (:mod:`missive.chat_template.system_turns`).

Units: which chat templates take a late system turn, and how the
conversation renders for each. Then the default model (SmolLM2, whose
ChatML template takes system turns anywhere): a conversation that gets a new
system message every turn reads every earlier turn from the cache.
"""

from __future__ import annotations

from typing import Any

import anthropic

from missive.chat_template.rendering import render_prompt
from missive.chat_template.system_turns import NOTE_CLOSE, NOTE_OPEN, SystemNote, template_accepts_system
from missive.driver.media import ImageInput
from missive.messages.conversation import Conversation, Turn, build_conversation
from missive.protocol.schema.request import CountTokensRequest
from missive.tools.render import hermes_messages, native_messages

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: Gemma's rule: roles must alternate after an optional leading system message.
ALTERNATING = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{% if not loop.first %}"
    "{{ raise_exception('System role only first') }}{% endif %}{% else %}"
    "<{{ message['role'] }}>{{ message['content'] }}</{{ message['role'] }}>{% endif %}{% endfor %}"
)
#: A template that drops every system message but the first (quietly).
DROPPING = (
    "{% for message in messages %}{% if message['role'] != 'system' or loop.first %}"
    "[{{ message['role'] }}] {{ message['content'] }}\n{% endif %}{% endfor %}"
)


def conversation(messages: list[dict[str, Any]], **extra: Any) -> Any:
    return build_conversation(
        CountTokensRequest.model_validate({"model": "m", "messages": messages, **extra})
    )


def test_which_templates_take_a_late_system_turn() -> None:
    assert template_accepts_system(CHATML)
    assert not template_accepts_system(ALTERNATING)
    assert not template_accepts_system(DROPPING)


def test_leading_system_messages_join_the_system_prompt_later_ones_stay() -> None:
    conv = conversation(
        [
            {"role": "system", "content": "first"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "# Environment"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"},
        ],
        system="top",
    )
    assert conv.system == "top\n\nfirst"
    assert [t.role for t in conv.turns] == ["user", "assistant", "user"]
    note = conv.turns[0].blocks[1]
    assert isinstance(note, SystemNote) and note.system == "# Environment"
    # Renderers that know nothing of system turns see a marked note in place.
    assert conv.turns[0].text() == f"hi\n{NOTE_OPEN}# Environment{NOTE_CLOSE}"
    assert conv.chat_messages(system_turns=True) == [
        {"role": "system", "content": "top\n\nfirst"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "# Environment"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
    ]


def test_tool_renderings_keep_results_first_and_the_system_turn_in_place() -> None:
    conv = conversation(
        [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
            {"role": "system", "content": "reminder"},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ]
    )
    native = native_messages(conv, system_turns=True)
    assert [m["role"] for m in native] == ["user", "assistant", "tool", "system", "user"]
    assert native[3]["content"] == "reminder" and native[4]["content"] == "thanks"
    hermes = hermes_messages(conv, (), system_turns=True)
    assert [m["role"] for m in hermes] == ["system", "user", "assistant", "user", "system", "user"]
    assert hermes[3]["content"] == "<tool_response>\nsunny\n</tool_response>"
    plain = native_messages(conv)
    assert plain[-1] == {"role": "user", "content": f"{NOTE_OPEN}reminder{NOTE_CLOSE}\nthanks"}


def test_each_image_is_marked_once_beside_a_system_turn() -> None:
    """Every renderer asks the image marker once per image and shows each
    marker once, also in a turn split at a system message: a marker records
    its image (``ImageMarks.mark``), so a turn rendered twice would count an
    image the prompt holds once, and llama.cpp would answer that the template
    left one out (Claude Code's ``@shot.png``, seen in CI)."""
    image = ImageInput(media_type="image/png", data=b"png", width=1, height=1)
    conv = conversation([{"role": "user", "content": "look"}, {"role": "system", "content": "env"}])
    turn = conv.turns[0]
    conv = Conversation(system="top", turns=[Turn("user", [image, *turn.blocks])])
    renderings = {
        "chat": lambda marker: conv.chat_messages(marker, system_turns=True),
        "native": lambda marker: native_messages(conv, marker, system_turns=True),
        "hermes": lambda marker: hermes_messages(conv, (), marker, system_turns=True),
        "hermes, notes inline": lambda marker: hermes_messages(conv, (), marker),
    }
    for name, render in renderings.items():
        marked: list[ImageInput] = []

        def marker(img: ImageInput, marked: list[ImageInput] = marked) -> str:
            marked.append(img)
            return f"[image {len(marked) - 1}]"

        messages = render(marker)
        shown = "".join(m["content"] for m in messages)
        assert len(marked) == 1, (name, marked)
        assert shown.count("[image 0]") == 1 and "env" in shown, (name, messages)


def test_a_new_system_message_moves_no_earlier_token() -> None:
    """Appending a turn and a system message leaves the rendered prompt of
    the turns before as it was (a prefix), in both renderings."""
    before = [{"role": "user", "content": "one"}, {"role": "system", "content": "env 1"}]
    after = [
        *before,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "two"},
        {"role": "system", "content": "env 2"},
    ]
    for system_turns in (True, False):
        short = render_prompt(
            CHATML, conversation(before, system="top").chat_messages(system_turns=system_turns)
        )
        long = render_prompt(
            CHATML, conversation(after, system="top").chat_messages(system_turns=system_turns)
        )
        assert long.startswith(short.removesuffix("<|im_start|>assistant\n"))


def test_four_turns_with_a_system_message_each_read_earlier_turns_from_the_cache(
    smol: anthropic.Anthropic,
) -> None:
    """Each request resends the conversation with the answer, a new user turn
    and a new system message; the prompt of the request before is read from
    the cache (all of it but the last token, which the runner decodes again
    for fresh logits), and ``count_tokens`` agrees with ``usage``."""
    messages: list[dict[str, Any]] = []
    previous_prompt = 0
    reads = []
    for turn in range(1, 5):
        messages += [
            {"role": "user", "content": f"Question {turn}: name a colour."},
            {"role": "system", "content": f"# Environment\nturn: {turn}\ncwd: /tmp/project"},
        ]
        msg = smol.messages.create(
            model="smollm2-135m",
            max_tokens=8,
            system="You are terse.",
            messages=messages,
            extra_body={"temperature": 0.0},
        )
        prompt = msg.usage.input_tokens + msg.usage.cache_read_input_tokens
        counted = smol.messages.count_tokens(model="smollm2-135m", system="You are terse.", messages=messages)
        assert counted.input_tokens == prompt
        if turn > 1:
            assert msg.usage.cache_read_input_tokens >= previous_prompt - 1, (
                turn,
                msg.usage,
                previous_prompt,
            )
            reads.append((msg.usage.cache_read_input_tokens, prompt))
        previous_prompt = prompt
        text = "".join(b.text for b in msg.content if b.type == "text") or "..."
        messages.append({"role": "assistant", "content": text})
    print("cache reads (read, prompt) for turns 2-4:", reads)
