"""The README's examples run and print what the README shows, so no figure in it can go stale.

Every ```console block of README.md is run in a fresh temporary folder, command by command
(`$ ` starts a command, a trailing backslash continues it), with `planner` on PATH, COLUMNS=80
and NO_COLOR; each command's stdout and stderr together must equal the lines shown under it.
In a shown line `[...]` stands for any text, and a line that is only `[...]` for any number of
lines (a measured time, say); "in N.NN s" (the solver's wall seconds) is compared as "in N s".
Every ```python block runs too, its output compared with the ```text block after it.

    python -m tests.test_readme --write    # rewrite the shown output of every example from a run

(`--write` keeps an output that has a `[...]` in it; check the diff before committing.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import require

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WILD = "[...]"
# commands that need torch (the `profile` extra)
TORCH_COMMANDS = re.compile(r"\bplanner (profile|run)\b")
SOLVER_SECONDS = re.compile(r"\bin \d+\.\d+ s\b")


@dataclass(frozen=True)
class Command:
    line: int            # 0-based line of the README where the command starts
    text: str            # the command, continuation lines joined
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Example:
    line: int
    kind: str            # "console" or "python"
    commands: tuple[Command, ...]


def examples(readme: str) -> list[Example]:
    """The README's console and python blocks, in order (a python block's shown output is the
    ```text block right after it)."""
    lines = readme.split("\n")
    found: list[Example] = []
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if fence in ("```console", "```python"):
            end = lines.index("```", i + 1)
            body = lines[i + 1:end]
            if fence == "```console":
                found.append(Example(i, "console", tuple(_commands(body, i + 1))))
            else:
                after = end + 1
                while after < len(lines) and lines[after].strip() != "```text":
                    if lines[after].startswith("```"):
                        raise AssertionError(f"README.md:{end + 1}: a python block needs a ```text block after it")
                    after += 1
                out_end = lines.index("```", after + 1)
                command = Command(i + 1, "\n".join(body), tuple(lines[after + 1:out_end]))
                found.append(Example(i, "python", (command,)))
            i = end
        i += 1
    return found


def _commands(body: list[str], first: int) -> list[Command]:
    commands: list[Command] = []
    text: list[str] | None = None
    start = 0
    shown: list[str] = []
    continued = False
    for offset, line in enumerate(body):
        if continued:
            text.append(line)  # type: ignore[union-attr]
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            if text is not None:
                commands.append(Command(start, "\n".join(text), tuple(shown)))
            text, start, shown = [line[2:]], first + offset, []
            continued = line.endswith("\\")
        else:
            if text is None:
                raise AssertionError(f"README.md:{first + offset + 1}: output before any command")
            shown.append(line)
    if text is not None:
        commands.append(Command(start, "\n".join(text), tuple(shown)))
    return commands


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(COLUMNS="80", NO_COLOR="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    env.pop("FORCE_COLOR", None)
    return env


def run(example: Example, cwd: Path) -> list[list[str]]:
    """Each command's output lines (stdout and stderr together, trailing blanks removed)."""
    outputs = []
    for command in example.commands:
        if example.kind == "python":
            args = [sys.executable, "-c", command.text]
        else:
            args = ["bash", "-o", "pipefail", "-c", command.text]
        done = subprocess.run(args, cwd=cwd, env=_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=120)
        lines = [line.rstrip() for line in done.stdout.rstrip("\n").split("\n")] if done.stdout.strip() else []
        assert done.returncode == 0, f"README.md:{command.line + 1}: `{command.text}` exited {done.returncode}:\n" \
                                     + "\n".join(lines)
        outputs.append(lines)
    return outputs


def _normal(line: str) -> str:
    return SOLVER_SECONDS.sub("in N s", line.rstrip())


def matches(shown: tuple[str, ...] | list[str], actual: list[str]) -> bool:
    """Whether the output lines match the shown ones, `[...]` being a wildcard (see the module doc)."""
    pattern = []
    for line in shown:
        line = _normal(line)
        if line == WILD:
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            pattern.append(".*".join(re.escape(part) for part in line.split(WILD)) + r"\n")
    text = "".join(_normal(line) + "\n" for line in actual)
    return re.fullmatch("".join(pattern), text) is not None


def _needs_torch(example: Example) -> bool:
    return any(TORCH_COMMANDS.search(command.text) for command in example.commands)


EXAMPLES = examples(README.read_text())


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"line{e.line + 1}" for e in EXAMPLES])
def test_readme_example_prints_what_the_readme_shows(example, tmp_path):
    if _needs_torch(example):
        require("torch", "PLANNER_REQUIRE_TORCH")
    for command, actual in zip(example.commands, run(example, tmp_path)):
        assert matches(command.shown, actual), (
            f"README.md:{command.line + 1}: `{command.text}` now prints:\n" + "\n".join(actual))


def test_the_readme_shows_an_example_of_every_main_command():
    ran = " ".join(command.text for example in EXAMPLES for command in example.commands)
    for name in ("plan", "evaluate", "validate", "show", "export", "sweep", "inspect", "profile",
                 "calibrate", "run"):
        assert f"planner {name} " in ran + " ", name
    assert "planner.api" in ran


def test_make_plan_runs_the_planner_plan_the_readme_shows():
    """The README shows `$ planner plan` as what `make plan` prints."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^plan:.*\n\t\$\(BIN\)/planner plan\n", makefile, re.M)
    assert any(command.text == "planner plan" for example in EXAMPLES for command in example.commands)


def test_the_readme_cluster_file_loads(tmp_path):
    from planner.inputs.hardware import load_cluster
    blocks = re.findall(r"^```yaml\n(.*?)^```", README.read_text(), re.S | re.M)
    assert blocks
    for number, block in enumerate(blocks):
        path = tmp_path / f"cluster{number}.yaml"
        path.write_text(block)
        assert load_cluster(str(path)).num_gpus > 0


def test_the_readme_is_a_short_guide():
    assert len(README.read_text().splitlines()) < 350


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+://", target) and not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert broken == []


# development-log wording: who measured what when, commit ids, before/after
NARRATION = re.compile(r"this session|earlier session|later session|on this 2-core machine|"
                       r"while another job ran|the machine ran (?:slower|faster)|\bcommit before\b|\bcode before\b|"
                       r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b (?:against|vs)\b", re.I)


def test_readme_and_docs_carry_no_development_log():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{page.name}: {m.group(0)}" for page in pages for m in NARRATION.finditer(page.read_text())]
    assert found == []


def test_a_wildcard_line_matches_any_lines_and_a_wildcard_any_text():
    assert matches(["a", WILD, "d"], ["a", "b", "c", "d"])
    assert matches(["a", WILD, "d"], ["a", "d"])
    assert matches(["step [...] s", "solver: priced in 0.65 s"], ["step 1.2 s", "solver: priced in 9.99 s"])
    assert not matches(["step 19.352 s"], ["step 19.543 s"])
    assert not matches(["a"], ["a", "b"])


def _write() -> None:
    """Rewrite each shown output from a run (keeping outputs with a wildcard)."""
    import tempfile
    lines = README.read_text().split("\n")
    replacements: list[tuple[int, int, list[str]]] = []
    for example in examples("\n".join(lines)):
        with tempfile.TemporaryDirectory() as folder:
            outputs = run(example, Path(folder))
        for command, actual in zip(example.commands, outputs):
            if any(WILD in line for line in command.shown):
                continue
            if example.kind == "python":
                start = lines.index("```text", command.line) + 1
            else:
                start = command.line + command.text.count("\n") + 1
            replacements.append((start, start + len(command.shown), actual))
    for start, end, actual in sorted(replacements, reverse=True):
        lines[start:end] = actual
    README.write_text("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        sys.exit("usage: python -m tests.test_readme --write")
