"""A state file written without its checksums loads back the same, on any thread, and a
checksum was never what kept a damaged file out: torch.load does not read it."""

from __future__ import annotations

import io
import threading
import zipfile

import pytest
import torch

from ring_actors.storage.state_files import is_whole, save_checked, save_state

pytestmark = pytest.mark.skipif(
    not hasattr(torch.serialization, "set_crc32_options"),
    reason="torch before 2.6 always writes them",
)


def records(data: bytes) -> list[zipfile.ZipInfo]:
    return [r for r in zipfile.ZipFile(io.BytesIO(data)).infolist() if r.file_size]


def test_a_state_saved_on_a_thread_of_its_own_has_no_checksums_and_loads_back_the_same():
    state = {"weight": torch.randn(64, 32), "step": torch.tensor(7)}
    buffer = io.BytesIO()
    writer = threading.Thread(target=save_state, args=(state, buffer))  # as the round loop
    writer.start()
    writer.join()
    assert records(buffer.getvalue()) and all(r.CRC == 0 for r in records(buffer.getvalue()))
    loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert torch.equal(loaded["weight"], state["weight"]) and int(loaded["step"]) == 7
    assert torch.serialization.get_crc32_options()  # this process's own saves unchanged


def test_torch_load_never_reads_the_checksum_it_skips():
    buffer = io.BytesIO()
    torch.save({"zeros": torch.zeros(1000)}, buffer)
    data = bytearray(buffer.getvalue())
    assert all(r.CRC for r in records(bytes(data)))
    data[data.index(bytes(4000)) + 100] = 1  # one byte of the tensor flipped
    loaded = torch.load(io.BytesIO(bytes(data)), weights_only=True)
    assert int((loaded["zeros"] != 0).sum()) == 1  # loaded as if whole: the CRC guarded nothing


def test_a_checked_file_is_whole_until_one_byte_changes(tmp_path):
    path = tmp_path / "push.pt"
    with open(path, "wb") as file:
        save_checked({"zeros": torch.zeros(1000)}, file)
    assert is_whole(path)
    data = bytearray(path.read_bytes())
    data[data.index(bytes(4000)) + 100] = 1
    path.write_bytes(bytes(data))
    assert not is_whole(path)
    path.write_bytes(bytes(data[: len(data) // 2]))
    assert not is_whole(path)
