"""Every file a run writes is named once, in RunFolder, and the README tells a user about it."""

from __future__ import annotations

from pathlib import Path

from ring_actors.storage.run_folder import RunFolder

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_lists_every_file_a_run_writes():
    names = [v for k, v in vars(RunFolder).items() if k.isupper() and isinstance(v, str)]
    assert len(names) >= 10
    text = README.read_text()
    assert [name for name in names if f"`{name}" not in text] == []


def test_a_folder_holds_a_run_once_its_coordinator_wrote_its_record(tmp_path):
    folder = RunFolder(tmp_path)
    assert not folder.holds_run()
    folder.coordinator_record.write_text("{}")
    assert folder.holds_run() and folder.client_checkpoint(3).name == "client-3.pt"
