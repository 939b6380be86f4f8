"""Tests for the singularity stand-in (tests/standin/singularity) and the SIF
image helper (tests/sifimage.py): images with their own Debian root file system."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sifimage  # noqa: E402
from harness import STANDIN_DIR  # noqa: E402

TOOLS = ("mksquashfs", "siftool", "mount", "unshare", "losetup")


@pytest.fixture(scope="module", autouse=True)
def tools():
    missing = [t for t in TOOLS if not shutil.which(t)]
    if os.geteuid() != 0:
        missing.append("root")
    if not (sifimage.ROOTFS / "usr/bin/python3").exists():
        missing.append("the root file system %s (make setup)" % sifimage.ROOTFS)
    if missing:
        msg = f"required tools missing: {', '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)  # CI must not silently skip
        pytest.skip(msg)


@pytest.fixture(scope="module")
def sif(tmp_path_factory):
    d = tmp_path_factory.mktemp("img")
    return sifimage.make_test_sif(d / "plain.sif", env={"GREETING": "hello 'image' $HOME \"x\""})


@pytest.fixture
def standin(tmp_path):
    """Run the stand-in with a private TMPDIR; afterwards nothing may stay mounted."""
    tmpdir = tmp_path / "standin-tmp"
    tmpdir.mkdir()

    def _run(*args, env=None, **kw):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("SINGULARITY", "APPTAINER"))}
        e.update(PATH=f"{STANDIN_DIR}{os.pathsep}{os.environ['PATH']}", TMPDIR=str(tmpdir))
        e.update(env or {})
        return subprocess.run(["singularity", *map(str, args)], env=e, capture_output=True,
                              text=True, timeout=60, **kw)

    yield _run
    mounts = Path("/proc/mounts").read_text()
    assert "singularity-standin" not in mounts, "stand-in left mounts behind"
    assert not list(tmpdir.iterdir()), "stand-in left temp files behind"
    assert not subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout, "loop devices left"


def test_version(standin):
    r = standin("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == "singularity-standin version 4.1.0 (test stand-in)"


def test_sif_layout_matches_siftool(sif):
    """The tests' SIF reader (which the stand-in uses) and the easyblock's agree with siftool."""
    from generator.easyblock import easyblock
    out = subprocess.run(["siftool", "list", str(sif)], capture_output=True, text=True).stdout
    offset = sifimage.sif_partition_offset(sif)
    assert f"|{offset}-" in out and "Squashfs" in out
    assert easyblock.sif_partition_offset(sif) == offset


def test_env_script_is_sourced(standin, sif):
    r = standin("exec", sif, "sh", "-c", 'printf %s "$GREETING"')
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hello 'image' $HOME \"x\""


def test_arguments_round_trip(standin, sif):
    args = ["a b", '"dq"', "'sq'", "$HOME", "*", "", "back\\slash", "new\nline", "-c"]
    r = standin("exec", sif, "python", "-c",
                "import sys,json; print(json.dumps(sys.argv[1:]))", *args)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == args


def test_runs_on_the_images_own_system(standin, sif):
    """Debian's Python and tools of the image, not the host's; a command the image lacks is not found."""
    r = standin("exec", sif, "sh", "-c", "command -v python; command -v python3; command -v pip; "
                                         "cat /etc/debian_version; python -c 'import sys; print(sys.prefix)'")
    lines = r.stdout.split()
    assert lines[:3] == ["/usr/bin/python", "/usr/bin/python3", "/usr/bin/pip"], r.stderr
    assert lines[3].startswith("12.") and lines[4] == "/usr"
    r = standin("exec", sif, "gcc", "--version")  # on the host, not in the image
    assert r.returncode == 255 and '"gcc": executable file not found in $PATH' in r.stderr


def test_exit_status(standin, sif):
    assert standin("exec", sif, "sh", "-c", "exit 7").returncode == 7
    # a command killed by a signal: the runtime dies of the same signal, as a real one does
    assert standin("exec", sif, "sh", "-c", "kill -TERM $$").returncode == -signal.SIGTERM


def test_command_not_found(standin, sif):
    r = standin("exec", sif, "no-such-command-xyz")
    assert r.returncode == 255
    assert 'FATAL: "no-such-command-xyz": executable file not found in $PATH' in r.stderr


def test_singularityenv_overrides_image(standin, sif):
    val = "over 'ride' $x \"y\" *"
    r = standin("exec", sif, "sh", "-c", 'printf "%s|" "$GREETING" "$FOO"; env',
                env={"SINGULARITYENV_GREETING": val, "SINGULARITYENV_FOO": "bar"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{val}|bar|")
    assert "SINGULARITYENV_" not in r.stdout and "__SI_" not in r.stdout


def test_prepend_append_path(standin, sif):
    r = standin("exec", sif, "sh", "-c", 'echo "$PATH"',
                env={"SINGULARITYENV_PREPEND_PATH": "/first/bin",
                     "SINGULARITYENV_APPEND_PATH": "/last/bin"})
    path = r.stdout.strip().split(":")
    assert path[0] == "/first/bin" and path[-1] == "/last/bin"
    assert "/usr/bin" in path


def test_host_path_not_passed(standin, sif, tmp_path):
    # Like real Singularity (PATH is in AlwaysOmitKeys): the host PATH is dropped.
    r = standin("exec", sif, "sh", "-c", 'echo "$PATH"',
                env={"PATH": f"{STANDIN_DIR}:/host/only/bin:{os.environ['PATH']}"})
    assert "/host/only/bin" not in r.stdout and str(STANDIN_DIR) not in r.stdout


def test_cleanenv(standin, sif):
    r = standin("exec", "--cleanenv", sif, "sh", "-c", 'echo "${HOSTVAR:-unset} $FOO $GREETING"',
                env={"HOSTVAR": "leak", "SINGULARITYENV_FOO": "kept"})
    assert r.stdout.split()[:2] == ["unset", "kept"]


def test_pwd(standin, sif, tmp_path):
    assert standin("exec", sif, "pwd", cwd=tmp_path).stdout.strip() == str(tmp_path)
    assert standin("exec", "--pwd", "/etc", sif, "pwd").stdout.strip() == "/etc"


def test_container_metadata(standin, sif):
    r = standin("exec", sif, "sh", "-c",
                'ls /.singularity.d; echo "$SINGULARITY_CONTAINER $SINGULARITY_NAME"')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert "env" in lines and "labels.json" in lines
    assert f"{sif} {sif.name}" in lines


def test_dir_binds(standin, sif, tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    r = standin("exec", "-B", f"{tmp_path}/b:/bound/b,{tmp_path}/c:/bound/c:ro",
                sif, "sh", "-c", "cat /bound/a/f /bound/b/f /bound/c/f; echo w > /bound/b/new",
                env={"SINGULARITY_BINDPATH": f"{tmp_path}/a:/bound/a"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "abc"
    assert (tmp_path / "b" / "new").read_text() == "w\n"  # rw bind writes through


def test_later_bind_wins(standin, sif, tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    r = standin("exec", "--bind", f"{tmp_path}/b:/x", sif, "cat", "/x/f",
                env={"SINGULARITY_BIND": f"{tmp_path}/a:/x"})
    assert r.stdout == "b"


def test_squashfs_image_src_bind(standin, sif, tmp_path):
    src = tmp_path / "sw"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "tool").write_text("in squashfs\n")
    img = tmp_path / "sw.squashfs"
    subprocess.run(["mksquashfs", src, img, "-noappend", "-quiet", "-all-root"], check=True)
    r = standin("exec", "-B", f"{img}:/user-software:image-src=/", sif, "sh", "-c",
                "cat /user-software/bin/tool; touch /user-software/x && echo WRITABLE")
    assert r.stdout == "in squashfs\n"
    assert "WRITABLE" not in r.stdout and "Read-only" in r.stderr
    r = standin("exec", "-B", f"{img}:/sub:ro,image-src=/bin", sif, "cat", "/sub/tool")
    assert r.stdout == "in squashfs\n"


def test_missing_bind_source(standin, sif, tmp_path):
    r = standin("exec", "-B", f"{tmp_path}/nope:/data", sif, "true")
    assert r.returncode == 255
    assert (f"FATAL: container creation failed: mount {tmp_path}/nope->/data error: while "
            f"mounting {tmp_path}/nope: mount source {tmp_path}/nope doesn't exist") in r.stderr


def test_bad_images(standin, tmp_path):
    (tmp_path / "junk.sif").write_text("not a sif\n" * 20)
    r = standin("exec", tmp_path / "junk.sif", "true")
    assert r.returncode == 255
    assert f"FATAL: could not open image {tmp_path}/junk.sif: image format not recognized" \
        in r.stderr
    r = standin("exec", tmp_path / "missing.sif", "true")
    assert r.returncode == 255
    assert f"could not open image {tmp_path}/missing.sif: no such file or directory" in r.stderr


def test_unknown_flag(standin, sif):
    r = standin("exec", "--frobnicate", sif, "true")
    assert r.returncode == 255 and "FATAL: unknown flag: --frobnicate" in r.stderr


def test_shell(standin, sif):
    r = standin("shell", sif, input='echo "$0 $GREETING"; exit 3\n')
    assert r.returncode == 3
    assert r.stdout.startswith("/bin/bash hello")
    assert standin("shell", "--shell", "/bin/sh", sif, "-c", "echo $0").stdout == "/bin/sh\n"


def test_conda_image(standin, conda_sif):
    r = standin("exec", conda_sif, "bash", "-c",
                'command -v python; echo "$WITH_CONDA"; '
                "source /opt/miniconda3/bin/activate pytorch && command -v python "
                '&& echo "$CONDA_PREFIX $CONDA_DEFAULT_ENV"')
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "/usr/bin/python", "source /opt/miniconda3/bin/activate pytorch",
        "/opt/miniconda3/envs/pytorch/bin/python",
        "/opt/miniconda3/envs/pytorch pytorch"]
    r = standin("exec", conda_sif, "bash", "-c", '$WITH_CONDA && python -c "print(6*7)"')
    assert r.stdout == "42\n"


def test_conda_wrong_env(standin, conda_sif):
    r = standin("exec", conda_sif, "bash", "-c", "source /opt/miniconda3/bin/activate nope")
    assert r.returncode == 1
    assert "EnvironmentNameNotFound: Could not find conda environment: nope" in r.stderr


def test_sigterm_reaches_the_command(standin, sif, tmp_path):
    # `standin` checks afterwards that the mount and temp dir are gone.
    e = {k: v for k, v in os.environ.items() if not k.startswith("SINGULARITY")}
    e.update(PATH=f"{STANDIN_DIR}{os.pathsep}{os.environ['PATH']}",
             TMPDIR=str(tmp_path / "standin-tmp"))
    # As with a real runtime, the command replaces the runtime's process: the signal kills it directly.
    p = subprocess.Popen(["singularity", "exec", str(sif), "sh", "-c", "echo up; exec sleep 30"],
                         env=e, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == -signal.SIGTERM
    p.stdout.close()


def test_concurrent_runs(standin, sif, tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("SINGULARITY")}
    e.update(PATH=f"{STANDIN_DIR}{os.pathsep}{os.environ['PATH']}",
             TMPDIR=str(tmp_path / "standin-tmp"))  # `standin` checks it afterwards
    # Each waits until all three are in their containers at once (files in a shared bind), then says so.
    meet = tmp_path / "meet"
    meet.mkdir()
    script = ('touch /meet/$0; for i in $(seq 300); do [ "$(ls /meet | wc -l)" -ge 3 ] && break; sleep 0.1; done; '
              'echo "$0 saw $(ls /meet | wc -l)"')
    procs = [subprocess.Popen(["singularity", "exec", "-B", f"{meet}:/meet", str(sif), "sh", "-c", script, str(i)],
                              env=e, stdout=subprocess.PIPE, text=True)
             for i in range(3)]
    assert [p.communicate(timeout=60)[0] for p in procs] == ["0 saw 3\n", "1 saw 3\n", "2 saw 3\n"]
    assert all(p.returncode == 0 for p in procs)


def test_apptainer_reads_its_own_names_first(standin, sif, tmp_path):
    """Called as apptainer: APPTAINER_ names first, SINGULARITY_ ones where those are unset; called as singularity:
    only SINGULARITY_ names (APPTAINER ones are ordinary variables then)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "apptainer").symlink_to(STANDIN_DIR / "singularity")
    for name in ("a", "s"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    env = {"APPTAINERENV_FOO": "from-apptainer", "SINGULARITYENV_FOO": "from-singularity",
           "SINGULARITYENV_BAR": "bar-from-singularity",
           "APPTAINER_BINDPATH": f"{tmp_path}/a:/data", "SINGULARITY_BINDPATH": f"{tmp_path}/s:/data"}
    show = 'printf "%s %s %s %s" "$FOO" "$BAR" "${APPTAINERENV_FOO:-none}" "$(cat /data/f)"'
    r = standin("exec", sif, "sh", "-c", show, env=env)
    assert r.stdout == "from-singularity bar-from-singularity from-apptainer s", r.stderr
    e = dict(env, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(["apptainer", "exec", str(sif), "sh", "-c", show], env=e, capture_output=True, text=True,
                       timeout=60)
    assert r.stdout == "from-apptainer bar-from-singularity none a", r.stderr
