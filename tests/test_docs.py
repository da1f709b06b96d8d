"""What the documentation states about commands, keys, exit statuses and files is what the
code and the repository have, and the documents stay within their sizes."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HISTORY = ROOT / "benchmarks" / "HISTORY.md"
QUICKSTART = ROOT / "jobs" / "configs" / "quickstart.yaml"
TRAIN = ROOT / "jobs" / "train.py"
# Every page a user reads: README, ARCHITECTURE, docs/, the benchmarks' pages.
PAGES = [
    README,
    ARCHITECTURE,
    *sorted(DOCS.glob("*.md")),
    *sorted((ROOT / "benchmarks").glob("*.md")),
]
# The pages that explain (the benchmarks' record aside).
GUIDES = [README, ARCHITECTURE, *sorted(DOCS.glob("*.md"))]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """Markdown without fenced blocks and code spans: what a page says in words."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _section(text: str, heading: str) -> str:
    """The body of the section whose heading line is ``heading``, up to the next heading of
    the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n") + len(heading) + 1
    stop = re.search(rf"^#{{1,{level}}} ", text[start:], flags=re.M)
    return text[start : start + stop.start()] if stop else text[start:]


# Sizes ------------------------------------------------------------------------------------


def test_the_readme_is_at_most_14_kb():
    assert README.stat().st_size <= 14 * 1024


def test_the_results_page_is_at_most_20_kb():
    assert RESULTS.stat().st_size <= 20 * 1024


def test_the_files_tracked_under_benchmarks_are_at_most_1_mb_in_all():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "benchmarks"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    paths = [ROOT / name for name in listed.split("\0") if name]
    assert len(paths) > 20  # the listing, not an empty one
    sizes = {str(p.relative_to(ROOT)): p.stat().st_size for p in paths if p.is_file()}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    assert sum(sizes.values()) <= 1024 * 1024, f"largest: {largest}"


# Links ------------------------------------------------------------------------------------


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for a page's headings (repeats numbered)."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _text(path).splitlines():
        if not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose_links(_text(page))):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in _anchors(file)):
            broken.append(target)
    assert broken == []


def _prose_links(text: str) -> str:
    """The page without fenced blocks, where a ``](`` is code, not a link."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


# ARCHITECTURE -----------------------------------------------------------------------------

FOLDER_ROW = re.compile(r"^\| `([\w/]+/)` \| (.+) \|$", re.M)


def _architecture_paths() -> tuple[set[str], list[str]]:
    """Every ``.py`` path ARCHITECTURE.md names, resolved, and those that resolve to nothing.

    A name resolves from the repository root, from ``ring_actors/``, or from the folder of
    the table row it stands in (``core.py`` in the ``ring_actors/client/`` row).
    """
    text = _text(ARCHITECTURE)
    found: set[str] = set()
    missing: list[str] = []

    def resolve(name: str, folder: str | None) -> None:
        bases = ["", "ring_actors/"] + ([folder] if folder else [])
        hits = [base + name for base in bases if (ROOT / base / name).is_file()]
        if hits:
            found.update(hits)
        else:
            missing.append(f"{name} ({folder or 'no folder'})")

    for match in FOLDER_ROW.finditer(text):
        for name in re.findall(r"`([\w/.]+\.py)`", match.group(2)):
            resolve(name, match.group(1))
    rest = FOLDER_ROW.sub("", text)
    for name in re.findall(r"`([\w/.]+\.py)(?::\w+)?`", rest):
        resolve(name, None)
    return found, missing


def test_architecture_names_every_module_of_the_package_the_jobs_and_the_topologies():
    modules = {
        str(path.relative_to(ROOT))
        for folder in ("ring_actors", "jobs", "topologies")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "__init__.py"
    }
    found, _ = _architecture_paths()
    assert len(found) > 100  # the check reads the document
    assert sorted(modules - found) == []


def test_architecture_names_no_module_that_does_not_exist():
    _, missing = _architecture_paths()
    assert missing == []


def _defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` defines ``name`` at its top level."""
    for node in ast.parse(_text(path)).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return True
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def test_every_recipe_names_files_that_exist_and_define_what_it_says():
    recipes = _section(_text(ARCHITECTURE), "## Adding things")
    paths = re.findall(r"`((?:[\w.]+/)+[\w.]*)(?::\w+)?`", recipes)
    assert len(paths) >= 8
    assert [p for p in paths if not (ROOT / p).exists()] == []
    claims = re.findall(r"`(\w+)` in `([\w/.]+\.py)`", recipes)
    assert ("FaultSection", "ring_actors/faults/plan.py") in claims
    assert ("FAULT_ACTIONS", "ring_actors/faults/plan.py") in claims
    wrong = [(name, path) for name, path in claims if not _defines(ROOT / path, name)]
    assert wrong == []


# The command line -------------------------------------------------------------------------


def _codes_in_train() -> set[int]:
    """Every exit status jobs/train.py returns: an int, a module constant naming one, or
    either branch of a conditional."""
    tree = ast.parse(_text(TRAIN))
    named = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, int)
    }

    def values(expr: ast.expr | None) -> set[int]:
        if isinstance(expr, ast.IfExp):
            return values(expr.body) | values(expr.orelse)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, int):
            return {expr.value}
        if isinstance(expr, ast.Name) and expr.id in named:
            return {named[expr.id]}
        return set()

    returns = [node.value for node in ast.walk(tree) if isinstance(node, ast.Return)]
    return {code for value in returns for code in values(value)}


def _documented_statuses() -> dict[int, str]:
    """The exit-status table of docs/faults-and-recovery.md: status -> what it says."""
    table = _section(_text(DOCS / "faults-and-recovery.md"), "## Exit statuses")
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", table, flags=re.M)
    return {int(status): text for status, text in rows}


def test_the_documented_exit_statuses_are_those_jobs_train_returns():
    codes = _codes_in_train()
    assert {0, 1, 2, 3} <= codes  # the check reads the code
    assert set(_documented_statuses()) == codes


def test_every_exit_status_a_page_states_is_one_jobs_train_returns():
    codes = _codes_in_train()
    stated = [
        int(n)
        for page in GUIDES
        for n in re.findall(r"exit(?:s| status| code| statuses)? (\d+)\b", _prose(_text(page)))
    ]
    assert stated and [n for n in stated if n not in codes] == []


@pytest.fixture
def no_ray_start(monkeypatch):
    """jobs.train as far as its checks go: starting Ray fails the test instead."""
    import ring_actors.runtime.driver as driver

    def refuse(*args, **kwargs):
        raise AssertionError("the run went past its checks and would start Ray")

    monkeypatch.setattr(driver, "_launch", refuse)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return driver


def _run_folder(path: Path) -> Path:
    path.mkdir()
    (path / "summary.json").write_text("{}")
    (path / "coordinator.json").write_text("{}")
    return path


CASES = {
    # case: (arguments, the status, words of its row in the docs' table)
    "a wrong key": (lambda tmp: ["nosuch.key=1"], 2, "config key"),
    "a dataset not on disk, dry run": (
        lambda tmp: ["--dry-run", "data.dataset=mnist", "data.download=false", f"data.root={tmp}"],
        2,
        "dataset not on disk",
    ),
    "a resume folder without a run": (lambda tmp: ["--resume", str(tmp)], 2, "`--resume`"),
    "clients this machine's cores cannot hold, dry run": (
        lambda tmp: ["--dry-run", "faults=[]", "clients.num_cpus=100000"],
        1,
        "`--dry-run`",
    ),
    "a good plan, dry run": (lambda tmp: ["--dry-run", "faults=[]"], 0, "`--dry-run`"),
    "a plan this machine's memory cannot hold": (
        lambda tmp: ["--output-dir", str(tmp / "new"), "clients.count=100000"],
        3,
        "memory",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_jobs_train_exits_with_the_status_the_docs_give(case, tmp_path, no_ray_start):
    from jobs.train import main
    from ring_actors.preflight.admission import node_memory

    arguments, status, words = CASES[case]
    if status == 3 and node_memory() is None:
        pytest.skip("this machine does not tell its memory")
    assert main(arguments(tmp_path)) == status
    assert words in _documented_statuses()[status]


def test_an_output_folder_that_holds_a_run_exits_2(tmp_path, no_ray_start, monkeypatch):
    from jobs.train import main

    monkeypatch.setattr(no_ray_start, "check_memory", lambda *args: None)
    folder = _run_folder(tmp_path / "run")
    assert main(["--output-dir", str(folder), "clients.count=2"]) == 2
    assert "`--output-dir` that holds a run" in _documented_statuses()[2]


# The quickstart ---------------------------------------------------------------------------


def test_the_default_method_the_docs_name_is_the_quickstarts():
    from ring_actors.config import load_config

    default = load_config(QUICKSTART).algorithm.name
    for page in (README, DOCS / "methods.md"):
        marked = re.findall(r"`(\w+)` \((?:the )?(?:default|quickstart's)\)", _text(page))
        assert marked == [default], page.name


def test_the_quickstarts_fault_plan_is_announced_and_faults_empty_turns_it_off():
    from ring_actors.config import load_config
    from ring_actors.faults.plan import plan_lines

    config = load_config(QUICKSTART)
    assert plan_lines(config.faults, config.experiment.rounds)
    assert load_config(QUICKSTART, ["faults=[]"]).faults == ()
    text = _text(README)
    assert "faults=[]" in text and "`faults:`" in text


def test_the_quickstarts_time_is_the_one_measured():
    wall = re.search(r"\*\*([\d.]+) s\*\* wall", _text(RESULTS))
    assert wall is not None
    comment = " ".join(
        line.lstrip("# ") for line in _text(QUICKSTART).splitlines() if line.startswith("#")
    )
    assert f"about {round(float(wall.group(1)))} s" in comment


def test_the_coordinators_memory_is_the_one_measured():
    measured = re.search(r"torch-free coordinator\s+([\d.]+)\s+MB", _text(RESULTS))
    assert measured is not None
    value = float(measured.group(1))
    placement = " ".join(_text(DOCS / "placement-and-gpu.md").split())
    assert f"{round(value)} MB for the torch-free coordinator" in placement


# Words and names --------------------------------------------------------------------------

GLOSSARY = DOCS / "glossary.md"


def test_the_glossary_defines_every_term_once():
    text = _text(GLOSSARY)
    terms = re.findall(r"^\| \*\*([\w -]+)\*\* \|", text, flags=re.M)
    wanted = {"hop", "lap", "view", "epoch", "round", "regime", "delay-bound", "cores-bound"}
    assert wanted <= set(terms)
    assert len(terms) == len(set(terms))


def test_a_regime_has_one_name():
    """`compute-bound` is only the benchmark preset's value; in words the regime is
    cores-bound."""
    for page in [*GUIDES, RESULTS]:
        assert "compute-bound" not in _prose(_text(page)).lower(), page.name


def test_every_paper_number_the_docs_use_is_explained():
    used = set()
    for page in [*GUIDES, RESULTS]:
        used.update(re.findall(r"(?<![\w.,])(00[0-4])(?![\w.,])", _text(page)))
    papers = _section(_text(DOCS / "methods.md"), "## The papers")
    explained = set(re.findall(r"^\| `(00[0-4])` \|", papers, flags=re.M))
    assert used and used <= explained


def test_no_page_points_at_notes_or_folders_outside_the_repository():
    pattern = re.compile(r"\bthe notes\b|\bnotes (?:section|\d)|\.\./shared/|\bshared/seeds")
    offenders = [page.name for page in [*GUIDES, RESULTS, HISTORY] if pattern.search(_text(page))]
    assert offenders == []


# Install, interface, licence --------------------------------------------------------------


def _upper_pin(package: str) -> str:
    match = re.search(rf'"{package}>=[\d.]+,<=([\d.]+)"', _text(ROOT / "pyproject.toml"))
    assert match is not None, package
    return match.group(1)


def test_the_cpu_install_pins_the_versions_pyproject_caps():
    text = _text(DOCS / "install.md")
    torch, vision = _upper_pin("torch"), _upper_pin("torchvision")
    assert (
        f"pip install torch=={torch} torchvision=={vision} "
        "--index-url https://download.pytorch.org/whl/cpu" in text
    )


def test_the_method_interface_table_lists_every_method_of_algorithm():
    from ring_actors.algorithms.base import Algorithm

    names = {n for n, v in vars(Algorithm).items() if callable(v) and not n.startswith("_")}
    table = _section(_text(DOCS / "methods.md"), "## The method interface")
    listed = set(re.findall(r"^\| `(\w+)", table, flags=re.M))
    assert names and sorted(names - listed) == []
    assert sorted(listed - names - {"Options", "current_round"}) == []


def test_the_method_written_from_scratch_trains_in_a_ring(tmp_path, monkeypatch):
    from ring_actors.config import load_config
    from tests.helpers.in_process_ring import ring

    section = _section(_text(DOCS / "methods.md"), "### A method from scratch")
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    module, name, key, value = re.search(
        r"algorithm\.name=(\w+):(\w+) algorithm\.(\w+)=([\d.]+)", section
    ).groups()
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_config(None, [f"algorithm.name={module}:{name}", f"algorithm.{key}={value}"])
    assert getattr(config.algorithm.options, key) == float(value)
    run = ring(tmp_path, algorithm=f"{module}:{name}", count=3, rounds=2)
    summary = run.run(timeout_s=60)
    assert summary["rounds_completed"] == 2 and summary["local_acc"]["mean"] > 0.5


def test_the_licence_is_mit_and_pyproject_says_so():
    text = _text(ROOT / "LICENSE")
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 ring-actors contributors" in text
    project = _text(ROOT / "pyproject.toml").split("[project]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^license = "MIT"$', project, flags=re.M)
