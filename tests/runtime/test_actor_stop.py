import time
from pathlib import Path

import pytest
import ray

from ring_actors.runtime.actor_stop import stop_actors


@ray.remote(num_cpus=0)
class Scribbler:
    """Writes a file into a folder over and over, as a coordinator's timer saves its record."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def scribble(self) -> None:
        n = 0
        while True:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / f"{n % 8}.txt").write_text("x")
            n += 1


@pytest.mark.slow
def test_stopped_actors_write_nothing_after_the_call_returns(ray_local, tmp_path):
    folders = [tmp_path / f"out-{i}" for i in range(3)]
    actors = [Scribbler.remote(str(f)) for f in folders]
    for actor in actors:
        actor.scribble.remote()
    while not all(f.exists() for f in folders):
        time.sleep(0.01)
    stop_actors(actors, wait_s=30)
    for folder in folders:
        for path in sorted(folder.iterdir()):
            path.unlink()
        folder.rmdir()
    time.sleep(1.0)
    assert not any(f.exists() for f in folders)  # no writer outlived the call


def test_stopping_an_actor_that_is_already_dead_returns_at_once(ray_local, tmp_path):
    actor = Scribbler.remote(str(tmp_path))
    ray.kill(actor)
    began = time.monotonic()
    stop_actors([actor], wait_s=30)
    assert time.monotonic() - began < 10
