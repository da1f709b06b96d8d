"""Files no longer needed are kept, up to a number, for the next writes to go over."""

from __future__ import annotations

from ring_actors.storage.spare_files import SpareFiles


def test_retired_files_are_kept_up_to_the_most_then_deleted(tmp_path):
    files = [tmp_path / f"{n}.pt" for n in range(3)]
    for n, path in enumerate(files):
        path.write_bytes(bytes([n]) * 10)
    spares = SpareFiles(tmp_path, most=2)
    for path in files:
        spares.retire(path)
    spares.retire(tmp_path / "gone.pt")  # already deleted: nothing to keep
    assert not any(path.exists() for path in files)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == 2 and all(name.startswith(".") and name.endswith(".tmp") for name in kept)
    taken = [spares.take(), spares.take()]
    assert sorted(p.name for p in taken if p is not None) == kept
    assert spares.take() is None


def test_clearing_deletes_every_spare(tmp_path):
    spares = SpareFiles(tmp_path, most=4)
    for n in range(3):
        (tmp_path / f"{n}.pt").write_bytes(b"x")
        spares.retire(tmp_path / f"{n}.pt")
    spares.clear()
    assert list(tmp_path.iterdir()) == [] and spares.take() is None
