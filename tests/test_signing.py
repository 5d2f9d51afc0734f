"""Thinking-block signatures and the server key (issue 4)."""

from __future__ import annotations

import base64
import stat
import zlib
from pathlib import Path

import pytest

from missive.config import ConfigError
from missive.thinking.signing import SEALED_PREFIX, Signer, load_signer

SIGNER = Signer(b"k" * 32)


def test_plain_signature_binds_text_and_position() -> None:
    sig = SIGNER.sign("reasoning", turn=2, block=1)
    assert SIGNER.open(sig, "reasoning", turn=2, block=1) == "reasoning"
    assert SIGNER.open(sig, "reasoning!", turn=2, block=1) is None
    assert SIGNER.open(sig, "reasoning", turn=1, block=1) is None
    assert SIGNER.open(sig, "reasoning", turn=2, block=0) is None
    assert SIGNER.open(sig, "", turn=2, block=1) is None  # a plain signature does not carry the text
    assert Signer(b"x" * 32).open(sig, "reasoning", turn=2, block=1) is None  # another server's key


def test_sealed_signature_carries_the_text() -> None:
    sig = SIGNER.seal("ünïcode reasoning\n", turn=0, block=0)
    assert sig.startswith(SEALED_PREFIX)
    assert SIGNER.open(sig, "", turn=0, block=0) == "ünïcode reasoning\n"
    assert SIGNER.open(sig, "something else", turn=0, block=0) is None
    assert SIGNER.open(sig, "", turn=0, block=1) is None
    raw = bytearray(base64.urlsafe_b64decode(sig[len(SEALED_PREFIX) :] + "=="))
    raw[-3] ^= 1  # flip a bit of the compressed text
    forged = SEALED_PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    assert SIGNER.open(forged, "", turn=0, block=0) is None


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "msv1.é",
        "msv1.١٢٣",
        "msv1z.é",
        "msv1.",
        "msv1z.",
        "msv1z.!!!",
        "msv1z." + "A" * 50,
        "ErUBCkYIBhgC",
        "msv2.abc",
    ],
)
def test_malformed_signatures_are_rejected_not_errors(signature: str) -> None:
    assert SIGNER.open(signature, "", turn=0, block=0) is None


def test_sealed_decompression_is_capped() -> None:
    bomb = b"\0" * 32 + zlib.compress(b"a" * (8 * 1024 * 1024), 9)  # 8 MiB from ~8 KiB
    sig = SEALED_PREFIX + base64.urlsafe_b64encode(bomb).decode()
    assert len(sig) < 20_000
    assert SIGNER.open(sig, "", turn=0, block=0) is None


def test_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "state" / "missive" / "thinking.key"
    first = load_signer(None, str(path))
    assert path.stat().st_size == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    second = load_signer(None, str(path))
    sig = first.sign("t", turn=0, block=0)
    assert second.verify(sig, "t", turn=0, block=0)  # signatures survive a restart


def test_configured_key_and_errors(tmp_path: Path) -> None:
    a, b = load_signer("a-secret-of-sixteen+", None), load_signer("a-secret-of-sixteen+", None)
    assert b.verify(a.sign("t", turn=0, block=0), "t", turn=0, block=0)  # replicas sharing a key
    with pytest.raises(ConfigError, match="16 bytes"):
        load_signer("short", None)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="key_file"):
        load_signer(None, str(blocker / "thinking.key"))  # its folder is a file


def test_replicas_creating_a_shared_key_file_together_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas starting at once on one key_file (shared storage): the
    one that loses the race to create it uses the winner's key, and the file
    only ever appears whole (it is linked into place after being written)."""
    import os

    path = tmp_path / "shared" / "thinking.key"
    real_link = os.link
    other: list[object] = []

    def racing_link(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        assert Path(src).stat().st_size == 32  # whole before it becomes visible
        if not other:  # the other replica starts now, finds no file yet, and wins
            monkeypatch.setattr(os, "link", real_link)
            other.append(load_signer(None, str(path)))
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    loser = load_signer(None, str(path))
    [winner] = other
    assert isinstance(winner, Signer)
    assert loser.verify(winner.sign("t", turn=0, block=0), "t", turn=0, block=0)
    assert winner.verify(loser.sign("t", turn=0, block=0), "t", turn=0, block=0)
    assert load_signer(None, str(path)).verify(loser.sign("t", turn=0, block=0), "t", turn=0, block=0)
    assert sorted(p.name for p in path.parent.iterdir()) == ["thinking.key"]  # no temporary file left
