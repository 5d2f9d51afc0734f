"""Image and document blocks: safe fetching, checking, decoding and conversion.

Modules, one job each:

* :mod:`.types`: :class:`ImageInput` (what drivers get for an image), the
  processor interfaces and the shapes they pass around;
* :mod:`.addresses`: which IP addresses URL fetching may reach, the allow-list;
* :mod:`.fetch`: fetching a URL under size, time and address rules;
* :mod:`.images`: the Pillow image processor and the placeholder fallback;
* :mod:`.documents`: PDF (pypdf) and text documents, and rendering them as text;
* :mod:`.office`: docx, xlsx and pptx (the ``office`` extra);
* :mod:`.tokens`: the image token estimate;
* :mod:`.pipeline`: runs the processors over a request's blocks.

The limits and every source are listed in docs/media.md.
"""

from ..driver.media import IMAGE_MEDIA_TYPES, ImageInput, Section

__all__ = ["IMAGE_MEDIA_TYPES", "ImageInput", "Section"]
