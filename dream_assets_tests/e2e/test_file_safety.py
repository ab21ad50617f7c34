"""A file replaced through file_safety holds the old content or the new one, whatever happens in between."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dream_assets.file_safety import atomic_write, atomic_writer, is_temp_file

ROOT = Path(__file__).resolve().parents[2]

_KILLED = """
import os, sys
from pathlib import Path

from dream_assets.file_safety import atomic_writer

path, size = Path(sys.argv[1]), int(sys.argv[2])
with atomic_writer(path) as fh:
    fh.write(b"n" * (size // 2))
    fh.flush()
    os.kill(os.getpid(), 9)  # killed half-way through the new content
    fh.write(b"n" * (size - size // 2))
"""


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_text_and_bytes_round_trip(tmp_path: Path) -> None:
    text = tmp_path / "report.md"
    atomic_write(text, "héllo\r\nwörld\n")
    assert text.read_bytes() == "héllo\r\nwörld\n".encode()  # UTF-8, newlines as given
    data = tmp_path / "part.bin"
    payload = bytes(range(256)) * 64
    atomic_write(data, payload)
    assert data.read_bytes() == payload
    atomic_write(data, b"shorter")
    assert data.read_bytes() == b"shorter"
    with atomic_writer(text, text=True) as fh:
        fh.write("streamed ")
        fh.write("text")
    assert text.read_text(encoding="utf-8") == "streamed text"
    assert _leftovers(tmp_path) == []


def test_an_exception_between_write_and_replace_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    atomic_write(path, '{"old": true}')
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_writer(path, text=True) as fh:
            fh.write('{"new": ')
            raise RuntimeError("disk on fire")
    assert path.read_text(encoding="utf-8") == '{"old": true}'
    assert _leftovers(tmp_path) == []


def test_a_failed_rename_keeps_the_old_file_and_removes_the_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "status.json"
    atomic_write(path, b"old")

    def refuse(src, dst):
        assert Path(src).read_bytes() == b"new content"  # written in full and synced before the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, b"new content")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_a_process_killed_mid_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "part.parquet"
    old = b"o" * 300_000
    atomic_write(path, old)
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, str(path), str(len(old))],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr
    assert path.read_bytes() == old
    left = [p for p in tmp_path.iterdir() if p != path]
    # A killed process cannot clean up: what it leaves is one temp file, named so sweeps can find it.
    assert len(left) == 1 and is_temp_file(left[0]) and left[0].name.startswith(".part.parquet.")
    assert not is_temp_file(path)


def test_permissions_and_times_are_set_on_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    atomic_write(path, b"line\n", permissions=0o640, times_ns=(1_000_000_000, 2_000_000_000))
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_mtime_ns == 2_000_000_000
    atomic_write(path, b"other\n")  # without them: a new file's usual permissions, the current time
    st = path.stat()
    assert st.st_mtime_ns > 2_000_000_000
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(st.st_mode) == 0o666 & ~umask


def test_replace_unless_changed_leaves_a_file_saved_in_the_instant_before_the_replace(tmp_path):
    from dream_assets.file_safety import replace_unless_changed

    path = tmp_path / "notes.md"
    path.write_text("old\n")
    done = replace_unless_changed(path, "dream\n", b"old\n", before_replace=lambda p: p.write_text("person\n"))
    assert not done.written and done.found == b"person\n"
    assert path.read_text() == "person\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"]  # no temp file left
    done = replace_unless_changed(path, "dream\n", b"person\n")
    assert done.written and path.read_text() == "dream\n"


def test_replace_unless_changed_never_overwrites_a_file_created_in_the_instant_before(tmp_path):
    from dream_assets.file_safety import replace_unless_changed

    path = tmp_path / "new.md"
    done = replace_unless_changed(path, "dream\n", None, before_replace=lambda p: p.write_text("person\n"))
    assert not done.written and path.read_text() == "person\n"
    assert replace_unless_changed(path, "dream\n", None).found == b"person\n"
