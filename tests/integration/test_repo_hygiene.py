"""The repository speaks of the project alone, and its docs stay navigable:
every spec section the code cites exists in docs/specs/, no file refers to
numbered work periods, README.md and docs/benchmarks.md stay short, and the
front ends reach concrete models only through the loader (no dynamic_cast to a
model outside src/engine/loader.cc; the CLI includes only engine/, server/, lsp/
and base/status.h, base/log.h — docs/architecture.md)."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return [ROOT / p for p in out]


def test_every_cited_spec_section_has_a_heading():
    r = subprocess.run([sys.executable, str(ROOT / "scripts/check-spec-refs.py")], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_numbered_work_periods():
    pattern = re.compile(r"\b[Ss]essions? [0-9]+")
    hits = []
    for path in tracked("*.md", "*.cc", "*.h", "*.py", "*.sh", "*.txt", "Makefile"):
        if "tests/data/" in str(path) or not path.is_file():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line) and path.name != "test_repo_hygiene.py":
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_readme_and_benchmarks_stay_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
    assert len((ROOT / "docs/benchmarks.md").read_text().splitlines()) <= 400


def sources(folder):
    return sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".cc", ".h"))


def test_only_the_loader_casts_to_concrete_models():
    # The engine, the server and the CLI see models through model/model.h
    # (Model, SequenceCache, their optional capabilities); the loader, which
    # constructs the concrete models, is the one place allowed to cast.
    allowed = {ROOT / "src/engine/loader.cc"}
    hits = []
    for folder in ("src/engine", "src/server", "src/lsp", "src/cli"):
        for path in sources(folder):
            if path in allowed:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if "dynamic_cast" in line:
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_cli_includes_only_engine_server_lsp_and_base_status_log():
    # docs/architecture.md: cli/ includes engine/, server/ and lsp/ headers, its
    # own cli/ header, and base/status.h and base/log.h (errors and logging).
    allowed_headers = {"base/status.h", "base/log.h"}
    allowed_folders = ("engine/", "server/", "lsp/", "cli/")
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    hits = []
    for path in sources("src/cli"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = include.match(line)
            if m and not (m.group(1) in allowed_headers or m.group(1).startswith(allowed_folders)):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
