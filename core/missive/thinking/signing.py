"""Signatures of thinking blocks.

The API returns every thinking block with an opaque ``signature`` and checks
it when the block comes back in a later request, so a client cannot feed the
model reasoning it did not write. Missive does the same with an HMAC-SHA256
under a server key:

``signature = "msv1." + base64url(HMAC(key, "missive-thinking-v1" | turn | block | thinking))``

or, when the client asked for ``display: "omitted"`` (Claude Code does) and so
receives an empty ``thinking``, the sealed form that carries the reasoning
itself, so it can reach the prompt again when the block is replayed (the real
API's signatures carry the thinking encrypted for the same reason):

``signature = "msv1z." + base64url(HMAC(...same...) + zlib(thinking))``

The sealed text is compressed, not encrypted: whoever holds the response can
read the reasoning; the HMAC only proves this server produced it there.

* ``turn``: the ordinal of the assistant message among the request's
  assistant messages (0 for the first answer), so a block cannot be moved to
  another turn;
* ``block``: the ordinal of the thinking block among that message's thinking
  blocks;
* ``thinking``: the exact thinking text the client received (empty with
  ``display: "omitted"``).

Each part is length-prefixed, so no two inputs encode alike. ``compaction``
blocks (conversation summaries, :mod:`missive.context_management.compaction`) are
signed with the same key under their own domain, so a thinking signature
never passes for a summary's or the other way round. The signature records
the SHA-256 digest of the content it was made for, so that a block whose
text was edited under a genuine signature (the API's
``compaction_content_mismatch``: "the `compaction` block's `content` differs
from the text its `signature` recorded", SDK 2.16
``CompactionContentMismatchErrorDetails``) is told apart from a signature
this server never made (``compaction_signature_invalid``):

``signature = "msvc2." + base64url(HMAC(key, "missive-compaction-v2" | digest) + digest)``,
``digest = SHA-256(content)``

Signatures made before (``"msvc1." + base64url(HMAC(key,
"missive-compaction-v1" | content))``) still verify for their content; they
record no digest, so an edited block signed so is only "not verified".

The key comes
from ``thinking.signing_key`` in the configuration, else from
``thinking.key_file`` (default ``thinking.key`` in the state directory,
:func:`missive.config.state_dir.state_dir`: ``$MISSIVE_STATE_DIR``, else
``$XDG_STATE_HOME/missive``, i.e. ``~/.local/state/missive``), created with 32 random bytes and
mode 0600 on first use, so signatures stay valid across restarts. Replicas
behind one load balancer share the key: the same ``signing_key``, or the same
``key_file`` on shared storage (docs/deployment.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import zlib
from pathlib import Path
from typing import Literal

from ..config import ConfigError
from ..config.state_dir import state_dir

__all__ = [
    "Signer",
    "default_key_file",
    "load_signer",
    "SIGNATURE_PREFIX",
    "SEALED_PREFIX",
    "COMPACTION_PREFIX",
    "CompactionCheck",
]

log = logging.getLogger("missive.thinking")

#: What :meth:`Signer.check_compaction` finds.
CompactionCheck = Literal["valid", "content_mismatch", "invalid"]

SIGNATURE_PREFIX = "msv1."
SEALED_PREFIX = "msv1z."
COMPACTION_PREFIX = "msvc2."
_COMPACTION_V1_PREFIX = "msvc1."
_DOMAIN = b"missive-thinking-v1"
_COMPACTION_DOMAIN = b"missive-compaction-v2"
_COMPACTION_V1_DOMAIN = b"missive-compaction-v1"
_MAC_BYTES = 32
#: Largest thinking text a sealed signature may expand to (bytes): a replayed
#: signature must not be a decompression bomb.
MAX_SEALED_BYTES = 4 * 1024 * 1024


def default_key_file() -> Path:
    """``thinking.key`` in the state directory (:func:`missive.config.state_dir.state_dir`:
    ``$MISSIVE_STATE_DIR``, else ``$XDG_STATE_HOME/missive``, else
    ``~/.local/state/missive``)."""
    return state_dir() / "thinking.key"


class Signer:
    """Signs and verifies thinking blocks with one key (bytes, at least 16)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the thinking signing key must have at least 16 bytes")
        self._key = key

    def _mac(self, turn: int, block: int, thinking: str) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (
            _DOMAIN,
            str(turn).encode(),
            str(block).encode(),
            thinking.encode("utf-8", "surrogatepass"),
        ):
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()

    def sign(self, thinking: str, *, turn: int, block: int) -> str:
        """The signature of ``thinking`` at assistant turn ``turn``, thinking block ``block``."""
        return SIGNATURE_PREFIX + base64.urlsafe_b64encode(self._mac(turn, block, thinking)).decode().rstrip(
            "="
        )

    def seal(self, thinking: str, *, turn: int, block: int) -> str:
        """The sealed signature of ``thinking``: it also carries the text, for
        blocks sent with an empty ``thinking`` (``display: "omitted"``)."""
        packed = self._mac(turn, block, thinking) + zlib.compress(thinking.encode("utf-8", "surrogatepass"))
        return SEALED_PREFIX + base64.urlsafe_b64encode(packed).decode().rstrip("=")

    def open(self, signature: str | None, thinking: str, *, turn: int, block: int) -> str | None:
        """The reasoning a replayed block stands for, or None if ``signature``
        is not this server's for that block at that position.

        A plain signature must match ``thinking``; a sealed one gives its
        carried text, and the block's ``thinking`` must be empty or that text.
        Comparisons are constant-time; a malformed signature is None.
        """
        if not signature or not signature.isascii():
            return None  # this server's signatures are base64url ASCII
        if signature.startswith(SEALED_PREFIX):
            try:
                payload = signature[len(SEALED_PREFIX) :]
                raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
                inflater = zlib.decompressobj()
                data = inflater.decompress(raw[_MAC_BYTES:], MAX_SEALED_BYTES)
                if inflater.unconsumed_tail or not inflater.eof:
                    return None
                text = data.decode("utf-8", "surrogatepass")
            except (ValueError, zlib.error):
                return None
            if thinking not in ("", text):
                return None
            return text if hmac.compare_digest(raw[:_MAC_BYTES], self._mac(turn, block, text)) else None
        if signature.startswith(SIGNATURE_PREFIX):
            return (
                thinking
                if hmac.compare_digest(signature, self.sign(thinking, turn=turn, block=block))
                else None
            )
        return None

    def verify(self, signature: str | None, thinking: str, *, turn: int, block: int) -> bool:
        """Whether ``signature`` is this server's for that block and position."""
        return self.open(signature, thinking, turn=turn, block=block) is not None

    def _domain_mac(self, domain: bytes, data: bytes) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (domain, data):
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()

    def sign_compaction(self, content: str) -> str:
        """The signature of a ``compaction`` block's ``content`` (it records
        the content's digest)."""
        digest = hashlib.sha256(content.encode("utf-8", "surrogatepass")).digest()
        packed = self._domain_mac(_COMPACTION_DOMAIN, digest) + digest
        return COMPACTION_PREFIX + base64.urlsafe_b64encode(packed).decode().rstrip("=")

    def check_compaction(self, signature: str | None, content: str) -> CompactionCheck:
        """``valid``: ``signature`` is this server's for ``content``;
        ``content_mismatch``: it is this server's, for other content;
        ``invalid``: it is not this server's (or it is a digest-less ``msvc1.``
        signature for other content). Comparisons are constant-time."""
        if not signature or not signature.isascii():
            return "invalid"
        data = content.encode("utf-8", "surrogatepass")
        if signature.startswith(_COMPACTION_V1_PREFIX):
            expected = base64.urlsafe_b64encode(self._domain_mac(_COMPACTION_V1_DOMAIN, data)).decode()
            ok = hmac.compare_digest(signature[len(_COMPACTION_V1_PREFIX) :], expected.rstrip("="))
            return "valid" if ok else "invalid"
        if not signature.startswith(COMPACTION_PREFIX):
            return "invalid"
        payload = signature[len(COMPACTION_PREFIX) :]
        try:
            raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        except ValueError:
            return "invalid"
        if len(raw) != 2 * _MAC_BYTES:
            return "invalid"
        mac, digest = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._domain_mac(_COMPACTION_DOMAIN, digest)):
            return "invalid"
        same = hmac.compare_digest(digest, hashlib.sha256(data).digest())
        return "valid" if same else "content_mismatch"

    def verify_compaction(self, signature: str | None, content: str) -> bool:
        """Whether ``signature`` is this server's for that ``content`` (constant time)."""
        return self.check_compaction(signature, content) == "valid"


def _read_or_create(path: Path) -> bytes:
    """The key in ``path``, created if missing.

    Replicas sharing the file (shared storage) may start together: the key
    is written whole to a temporary file beside it, then linked to ``path``,
    which fails if another replica's link came first; that key is then used.
    So ``path`` never appears partly written, and every replica ends up with
    the same key. Where hard links are not supported, the file is created
    exclusively and written in place.
    """
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = b""
    except OSError as exc:
        raise ConfigError(f"thinking.key_file {path} cannot be read: {exc}") from exc
    if key:
        return key
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _link_new(path, key):
            return path.read_bytes()  # another replica created it first: use theirs
    except OSError as exc:
        raise ConfigError(
            f"thinking.key_file {path} cannot be created ({exc}); "
            "set thinking.key_file or thinking.signing_key"
        ) from exc
    log.info("created the thinking signing key %s", path)
    return key


def _link_new(path: Path, key: bytes) -> bool:
    """Create ``path`` holding ``key`` (mode 0600) in one step; False if it
    exists already."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links on this file system
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as out:
                out.write(key)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def load_signer(signing_key: str | None, key_file: str | None) -> Signer:
    """The server's :class:`Signer`: ``signing_key`` (a secret string of at
    least 16 characters) if set, else the key in ``key_file`` (default
    :func:`default_key_file`), created when missing.

    Raises:
        ConfigError: the key is too short, or the key file cannot be read or created.
    """
    if signing_key is not None:
        key = signing_key.encode("utf-8")
        source = "thinking.signing_key"
    else:
        path = Path(key_file).expanduser() if key_file else default_key_file()
        key = _read_or_create(path)
        source = f"thinking.key_file {path}"
    if len(key) < 16:
        raise ConfigError(f"{source}: the signing key must have at least 16 bytes")
    return Signer(key)
