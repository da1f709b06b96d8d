"""Run one decentralised experiment: ``python -m jobs.train [--config PATH] [key=value ...]``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from ring_actors.config import Config, ConfigError, load_config
from ring_actors.preflight.output_folder import RunFolderError, resume_config
from ring_actors.run_setting import METHOD, resolved_setting, setting_keys
from ring_actors.storage.run_folder import RunFolder

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "quickstart.yaml"
INTERRUPTED = 130  # 128 + SIGINT: the status a shell gives a command Ctrl-C stopped


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.train",
        description="Train clients in a ring of Ray actors and write the run's outputs.",
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="YAML config file")
    parser.add_argument("--output-dir", type=Path, default=None, help="where outputs go")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--list", action="store_true", help="list methods, datasets, topologies, paper configs"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="check the config and data, print the plan, exit"
    )
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR (its config.yaml) from its last checkpoints",
    )
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. clients.count=4")
    return parser.parse_args(argv)


def format_table(summary: dict[str, Any], baseline: Path | None = None) -> str:
    """Per-client Local-T / Global-T and their means, then the run against ``local``.

    No run trains a ``local`` side by side, so the comparison uses the reference recorded for
    the same setting (``baseline``: default the quickstart's), labelled as such, or says that
    none exists.
    """
    local, global_ = summary["local_acc"]["per_client"], summary["global_acc"]["per_client"]
    lines = [f"{'client':>6}  {'Local-T':>8}  {'Global-T':>8}"]
    for client in sorted(local, key=int):
        lines.append(
            f"{client:>6}  {100 * local[client]:8.2f}  {100 * global_.get(client, 0):8.2f}"
        )
    lines.append(
        f"{'mean':>6}  {100 * summary['local_acc']['mean']:8.2f}  "
        f"{100 * summary['global_acc']['mean']:8.2f}"
    )
    lines.extend(_against_local(summary, baseline or DEFAULT_CONFIG.with_suffix(".baseline.json")))
    return "\n".join(lines)


def _against_local(summary: dict[str, Any], path: Path) -> list[str]:
    """Lines comparing the run's means with ``local``'s reference when ``path`` fits the run."""
    config_file = RunFolder(Path(summary.get("output_dir", ""))).config
    reference = json.loads(path.read_text()) if path.is_file() else None
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None

    def pm(stat: dict[str, float]) -> str:  # a reference figure: mean ± std over its seeds
        return f"{100 * stat['mean']:.2f} ± {100 * stat['std']:.2f}"

    if reference is None or config is None or "local" not in reference["methods"]:
        return [f"vs local: no reference for this setting ({path} has none)"]
    if setting_keys(config, METHOD) != resolved_setting(reference["config"], METHOD):
        return [f"vs local: no reference for this setting (the one in {path} is for another)"]
    ref = reference["methods"]["local"]
    run_local, run_global = summary["local_acc"]["mean"], summary["global_acc"]["mean"]
    gap = 100 * (run_global - ref["global_acc"]["mean"])
    spread = 200 * ref["global_acc"]["std"]
    if gap > spread:
        verdict = "above local by more than twice its seed spread"
    elif gap > 0:
        verdict = "above local's mean, within twice its seed spread"
    else:
        verdict = "not above local"
    seeds = " ".join(str(s) for s in reference["seeds"])
    lines = [
        f"vs local: Global-T {100 * run_global:.2f} against local's {pm(ref['global_acc'])}: "
        f"{gap:+.2f} points, {verdict}",
        f"          Local-T  {100 * run_local:.2f} against local's {pm(ref['local_acc'])}",
        f"          local's figures are a reference, not measured in this run: seeds {seeds} "
        f"of the same setting in {path.name}",
        f"          ({reference['source']}; written by: {reference['command']})",
    ]
    own = reference["methods"].get(summary["algorithm"])
    if own is not None and summary["algorithm"] != "local":
        lines.append(
            f"          the same command gave {summary['algorithm']} (its default options) "
            f"Global-T {pm(own['global_acc'])}, Local-T {pm(own['local_acc'])}"
        )
    return lines


def traffic(summary: dict[str, Any]) -> str:
    """The bytes a hop carried, over the hops counted (a crashed client's from its round
    reports); with no hop counted, what each client's reported rounds sent."""
    if summary["hops"]:
        return f"{summary['bytes_per_hop'] / 1e6:.3f} MB per hop"
    return f"{summary['mb_per_round_per_client']:.3f} MB sent per client-round (no hop counted)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        from ring_actors.preflight.dry_run import list_choices

        print(list_choices(DEFAULT_CONFIG.parent / "paper"))
        return 0
    try:
        if args.resume:
            config = resume_config(args.resume, args.overrides)
        else:
            config = load_config(args.config, args.overrides)
    except RunFolderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (ConfigError, OSError) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    if args.print_config:
        print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
        return 0
    if args.dry_run:
        from ring_actors.preflight.dry_run import cannot_start_here, describe_plan

        try:
            print(describe_plan(config))
        except ConfigError as err:
            print(f"config error: {err}", file=sys.stderr)
            return 2
        problem = cannot_start_here(config)
        if problem:
            print(f"cannot start here: {problem}", file=sys.stderr)
            return 1
        return 0
    return _train(config, args)


def _train(config: Config, args: argparse.Namespace) -> int:
    """Run, print the outcome; anything a user can change ends in one message."""
    from ring_actors.data.sources import DatasetError, DatasetUnavailable
    from ring_actors.preflight.admission import AdmissionError
    from ring_actors.preflight.ray_address import RayUnreachable
    from ring_actors.runtime.client_starts import LaunchError
    from ring_actors.runtime.driver import run_experiment  # Ray: a valid config
    from ring_actors.runtime.follow import CoordinatorLost
    from ring_actors.runtime.signals import RunInterrupted, ray_session

    output_dir = args.resume or args.output_dir
    resume = args.resume is not None
    try:
        with ray_session():
            summary = run_experiment(config, output_dir, not args.no_progress, resume)
    except RunInterrupted as err:
        print(f"run stopped: {err}", file=sys.stderr)
        return INTERRUPTED
    except KeyboardInterrupt:  # before the run started: a new run's folder is removed
        print("run stopped: interrupted while starting", file=sys.stderr)
        return INTERRUPTED
    except (AdmissionError, LaunchError, RayUnreachable) as err:
        print(f"launch error: {err}", file=sys.stderr)
        return 3
    except CoordinatorLost as err:
        print(f"run stopped: {err}", file=sys.stderr)
        return 1
    except (RunFolderError, DatasetError, DatasetUnavailable, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return report(summary, config)


def report(summary: dict[str, Any], config: Config) -> int:
    """Print a finished run's outcome and return its exit status; Ctrl-C while it prints
    (a run's first Ctrl-C is often followed by a second) ends it with one message, as the
    outputs are already written."""
    try:
        return _print_outcome(summary, config)
    except KeyboardInterrupt:
        stopped = f"{summary['stopped']}; " if summary.get("stopped") else ""
        print(f"run stopped: {stopped}outputs in {summary['output_dir']}", file=sys.stderr)
        return INTERRUPTED


def _print_outcome(summary: dict[str, Any], config: Config) -> int:
    from jobs.run_story import tell

    print(format_table(summary))
    print(tell(summary))
    events = summary["events"]
    print(
        f"{summary['algorithm']} on {summary['dataset']}: {summary['rounds_completed']} of "
        f"{config.experiment.rounds} rounds, {summary['wall_s']:.1f} s, {traffic(summary)}, "
        f"lost payloads {events['lost_payloads']}"
    )
    print(f"outputs: {summary['output_dir']}")
    mlflow = summary["mlflow"]
    if config.tracking.enabled:
        print(f"mlflow:  {mlflow['tracking_uri']} run {mlflow['run_id']}")
    if summary["stopped"]:
        print(f"run stopped: {summary['stopped']}", file=sys.stderr)
        return INTERRUPTED if summary["stopped"] == "interrupted" else 1
    return 0


def exit_with(status: int) -> None:
    """End the process with ``status``, which a Ctrl-C now no longer changes: a run's first
    Ctrl-C is often followed by a second, and one that lands as Python exits would end the
    process by that signal instead of with its status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)


if __name__ == "__main__":
    exit_with(main())
