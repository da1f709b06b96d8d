"""The prediction-path table reads what a fidelity run recorded, seed by seed."""

from __future__ import annotations

from benchmarks.prediction_paths import rows, table


def run(spec: str, seed: int, acc: float, gmm: float, gain: float) -> dict:
    final = {
        "local_paths": {"acc": [acc, acc], "acc_gmm": [gmm, gmm]},
        "global_paths": {"acc": [acc / 2, acc / 2]},
        "diagnostics": {"rec_loss_zl_gain": [gain, 3 * gain]},
        "shared_spread": {"learngene": 0.5},
    }
    early = {**final, "local_paths": {"acc": [0.0, 0.0], "acc_gmm": [0.0, 0.0]}}
    return {
        "spec": spec,
        "seed": seed,
        "rounds": [early, final],
        "partition": {"sha256": "ab" * 32},
    }


def test_paths_are_averaged_over_the_last_rounds_and_clients_then_listed_per_seed():
    runs = [run("drdfl", 0, 0.8, 0.4, 1.0), run("drdfl", 1, 0.6, 0.2, 2.0)]
    cols = rows(runs, last=1)["drdfl"]
    assert cols["local acc"] == [0.8, 0.6] and cols["local acc_gmm"] == [0.4, 0.2]
    assert cols["rec_loss_zl_gain"] == [2.0, 4.0]  # client mean at the final evaluation
    assert rows(runs, last=2)["drdfl"]["local acc"] == [0.4, 0.3]
    text = table(runs, last=1)
    assert "| drdfl | 70.0 ± 14.1 | 30.0 ± 14.1 | 35.0 ± 7.1 | 3.0 ± 1.4 | 0.500 ± 0.000" in text
    assert text.rstrip().endswith("abababab abababab |")
