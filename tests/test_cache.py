"""The size bound on the readers' copies of remote shards: least recently used files go first."""

from __future__ import annotations

import os

from subzero.store import cache


def test_trim_removes_the_least_recently_used_files_first(tmp_path):
    for i in range(5):
        path = tmp_path / "a" / f"f{i}" if i % 2 else tmp_path / f"f{i}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    cache.touch(str(tmp_path / "f0"))  # used just now: kept
    assert cache.trim(str(tmp_path), 250) == 300
    left = sorted(p.name for p in tmp_path.rglob("f*"))
    assert left == ["f0", "f4"]


def test_downloads_trigger_a_trim_past_the_bound(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBZERO_CACHE_MAX_BYTES", "160")
    for i in range(4):
        (tmp_path / f"s{i}").write_bytes(b"y" * 50)
        os.utime(tmp_path / f"s{i}", (2000 + i, 2000 + i))
        cache.note_download(str(tmp_path), 50)  # 160 // 16 = 10 bytes: every download trims
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 160
    assert (tmp_path / "s3").exists() and not (tmp_path / "s0").exists()
