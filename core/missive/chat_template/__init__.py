"""Chat templates: rendering a conversation with a model's Jinja chat template.

* :mod:`.rendering`: compile and render templates in jinja2's sandbox, with
  the Hugging Face extensions templates use;
* :mod:`.system_turns`: where a mid-conversation system message goes (a
  system turn where the template accepts one, else a marked note).

Used by the in-process engine's prompt and by the tool renderers; below
both, above the driver contract.
"""
