"""tools/run: it keeps the caller's directory (relative paths are the caller's), builds only
when a source is newer than the binary, says where the binary is when it builds, and runs
`serve` when given nothing.

Runs the real tools/run inside a stand-in repository whose `swift` (first on PATH) records how it
was called and writes a stand-in binary that records its directory and arguments, so no real
build happens and nothing depends on timing: file times are set explicitly."""

import os
import shutil
import stat
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE_SWIFT = """#!/usr/bin/env bash
# Records the call, then "builds": writes a syncledger that records where and how it ran.
printf '%s|%s\\n' "$PWD" "$*" >> "$FAKE_SWIFT_CALLS"
package="$PWD"
while [ $# -gt 0 ]; do
  if [ "$1" = "--package-path" ]; then package="$2"; shift; fi
  shift
done
mkdir -p "$package/.build/release"
cat > "$package/.build/release/syncledger" <<'EOF'
#!/usr/bin/env bash
{ printf '%s\\n' "$PWD"; printf '%s\\n' "$@"; } > "$FAKE_BINARY_OUT"
EOF
chmod +x "$package/.build/release/syncledger"
"""


@pytest.fixture
def fake(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "tools", "run"), repo / "tools" / "run")
    (repo / "tools" / "setup").write_text("#!/usr/bin/env bash\necho setup >> \"$FAKE_SETUP_CALLS\"\n")
    (repo / "Sources" / "syncledger").mkdir(parents=True)
    (repo / "Sources" / "syncledger" / "main.swift").write_text("// stand-in\n")
    (repo / "Package.swift").write_text("// stand-in\n")
    old = 1_700_000_000
    for path in (repo / "Sources" / "syncledger" / "main.swift", repo / "Package.swift"):
        os.utime(path, (old, old))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    swift = bin_dir / "swift"
    swift.write_text(FAKE_SWIFT)
    swift.chmod(swift.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "where the user stands"
    work.mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}",
               FAKE_SWIFT_CALLS=str(tmp_path / "swift-calls"), FAKE_SETUP_CALLS=str(tmp_path / "setup-calls"),
               FAKE_BINARY_OUT=str(tmp_path / "binary-out"))

    class Fake:
        def run(self, *args):
            out = subprocess.run(["bash", str(repo / "tools" / "run"), *args], capture_output=True, cwd=work, env=env, timeout=60)
            assert out.returncode == 0, out.stderr.decode()
            ran = (tmp_path / "binary-out").read_text().splitlines()
            return ran[0], ran[1:], out.stderr.decode()

        def builds(self):
            path = tmp_path / "swift-calls"
            return path.read_text().splitlines() if path.exists() else []

    f = Fake()
    f.repo, f.work, f.binary = repo, work, repo / ".build" / "release" / "syncledger"
    return f


def test_relative_paths_are_the_callers(fake):
    cwd, args, _ = fake.run("export", "--out", "backup/")
    assert cwd == str(fake.work)
    assert args == ["export", "--out", "backup/"]
    cwd, args, _ = fake.run("import", "backup/feed-1.slseg", "backup/feed-2.slseg")
    assert cwd == str(fake.work) and args == ["import", "backup/feed-1.slseg", "backup/feed-2.slseg"]
    # The build is told where the package is instead of being run from there by a cd.
    assert all(f"--package-path {fake.repo}" in call for call in fake.builds()), fake.builds()


def test_builds_only_when_a_source_is_newer_and_says_where_the_binary_is(fake):
    def older_binary():
        os.utime(fake.binary, (1_700_000_100, 1_700_000_100))

    _, _, err = fake.run("log")
    assert len(fake.builds()) == 1
    assert f"built {fake.binary}; call it directly next time" in err, err
    # Nothing changed: no build, no message.
    _, args, err = fake.run("log", "--json")
    assert len(fake.builds()) == 1 and args == ["log", "--json"]
    assert "built" not in err, err
    # A source newer than the binary (both in the past): built again, once.
    older_binary()
    os.utime(fake.repo / "Sources" / "syncledger" / "main.swift", (1_700_000_200, 1_700_000_200))
    fake.run("verify")
    assert len(fake.builds()) == 2
    fake.run("verify")
    assert len(fake.builds()) == 2
    # So does Package.swift.
    older_binary()
    os.utime(fake.repo / "Package.swift", (1_700_000_200, 1_700_000_200))
    fake.run("verify")
    assert len(fake.builds()) == 3


def test_no_arguments_runs_serve(fake):
    cwd, args, _ = fake.run()
    assert args == ["serve"] and cwd == str(fake.work)
