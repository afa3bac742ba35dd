"""The README is a front page whose links and commands hold: every relative link in README.md and
docs/ resolves, and every `python run_eval.py ...` command they show uses only flags that
`run_eval.py --help` (of that subcommand) lists."""
import re
import shlex
import subprocess
import sys

import pytest

from harness import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SUBCOMMANDS = ("report", "lint", "compile", "leaderboard", "check", "batch")


def links(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = [target for target in links(page) if not re.match(r"^[a-z]+://|^#|^mailto:", target)
              and not (page.parent / target.split("#")[0]).exists()]
    assert broken == [], f"{page.relative_to(REPO_ROOT)}: {broken}"


def test_the_front_page_is_short_and_links_every_docs_page():
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    index = (REPO_ROOT / "docs" / "README.md").read_text()
    assert "docs/README.md" in readme
    for page in PAGES[1:]:
        if page.name != "README.md":
            assert f"({page.name})" in index, f"docs/README.md does not link {page.name}"


def commands():
    found = set()
    for page in PAGES:
        for line in page.read_text().splitlines():
            match = re.search(r"python run_eval\.py([^`#\n]*)", line)
            if match:
                found.add(match.group(1).strip().rstrip(";,.)"))
    return sorted(found)


def help_of(sub):
    args = [sys.executable, str(REPO_ROOT / "run_eval.py"), *([sub] if sub else []), "--help"]
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO_ROOT).stdout


def test_every_shown_command_uses_flags_its_help_lists():
    helps = {sub: help_of(sub) for sub in (None, *SUBCOMMANDS)}
    wrong = []
    for command in commands():
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        sub = words[0] if words and words[0] in SUBCOMMANDS else None
        for flag in (w.split("=")[0] for w in words if w.startswith("--")):
            if not re.search(rf"(^|[\s,\[]){re.escape(flag)}([\s,=\]]|$)", helps[sub], re.M):
                wrong.append(f"{command!r}: {flag} is not in `run_eval.py {sub or ''} --help`")
    assert wrong == []


def test_the_readme_help_and_check_agree_on_every_exit_code():
    """Each exit code run_eval.py returns is in the README, in --help and in check --help."""
    import run_eval
    codes = {run_eval.OK, run_eval.FAILED, run_eval.BAD_INPUT, run_eval.CHECKOUT_CHANGED, run_eval.NOTHING_EVALUATED}
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    shown = {int(c) for c in re.findall(r"`(\d)`", readme[readme.index("Exit codes"):][:600])}
    assert shown == codes, shown
    for sub in (None, "check"):
        text = " ".join(help_of(sub).split())
        assert all(re.search(rf"\b{c}\b", text[text.lower().index("exit"):]) for c in codes), (sub, text[-800:])


def test_the_readme_cpu_install_takes_the_cpu_wheel_from_pytorchs_index():
    """From PyPI, `pip install torch` on Linux is the multi-GB CUDA build: the CPU line names
    PyTorch's CPU index (CI keeps its local wheel, .ci/run)."""
    install = (REPO_ROOT / "README.md").read_text().split("## Install", 1)[1].split("##", 1)[0]
    cpu = [line for line in install.splitlines() if "torch==" in line]
    assert cpu and all("--index-url https://download.pytorch.org/whl/cpu" in line for line in cpu), cpu
