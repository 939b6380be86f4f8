"""The stand-in side by side with a real Singularity (3.4.2, built by make setup): the same commands, the same
results, on every feature both have. Where the two real generations differ (3.4.2 against 3.6 and later, which the
stand-in follows, as LUMI runs SingularityCE 4), each case says what each one does."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

from harness import IN_CI, STANDIN, TOOLS, require
from sifimage import make_test_sif

REAL = str(TOOLS / 'singularity-3.4.2' / 'bin' / 'singularity')
RUNTIMES = {'stand-in': STANDIN, 'singularity-3.4.2': REAL}


@pytest.fixture(scope='module')
def image(tmp_path_factory):
    require(os.access(REAL, os.X_OK), 'Singularity 3.4.2 in %s (make setup builds it)' % REAL)
    require(os.geteuid() == 0, 'root (the stand-in mounts the image)')
    return make_test_sif(tmp_path_factory.mktemp('side-by-side') / 'image.sif',
                         env={'GREETING': 'hello from the image', 'IMAGE_SET': 'by the image'})


@pytest.fixture(scope='module')
def bind_sources(tmp_path_factory):
    root = tmp_path_factory.mktemp('binds')
    for name in ('a', 'b', 'c'):
        (root / name).mkdir()
        (root / name / 'f').write_text(name)
    (root / 'lib.so').write_text('a file')
    return root


def contain(runtime, *args, env=None, cwd='/tmp', stdin=None):
    """Run a runtime with a clean, known host environment; return (exit status, stdout, stderr)."""
    host = {'PATH': '/usr/local/bin:/usr/bin:/bin:/host/only/bin', 'HOME': '/root', 'USER': 'root',
            'LANG': 'C.UTF-8', 'HOSTVAR': 'from the host'}
    host.update(env or {})
    proc = subprocess.run([RUNTIMES[runtime]] + [str(arg) for arg in args], env=host, cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def both(*args, **kwargs):
    """The results of both runtimes; the same is asserted by the caller."""
    return [contain(runtime, *args, **kwargs) for runtime in RUNTIMES]


SHOW = 'import json, os, sys; print(json.dumps(sys.argv[1:]))'
ARGS = ['a b', '"dq"', "'sq'", '$HOME', '${X:-y}', 'back\\slash', '', 'line1\nline2', '*', '-c', '`id`', 'ü€']


def test_exec_arguments_exit_status_stdin(image):
    (rc1, out1, _), (rc2, out2, _) = both('exec', image, 'python3', '-c', SHOW, *ARGS)
    assert rc1 == rc2 == 0 and out1 == out2
    assert [rc for rc, _, _ in both('exec', image, 'sh', '-c', 'exit 7')] == [7, 7]
    results = both('exec', image, 'sh', '-c', 'cat | wc -l', stdin='one\ntwo\n')
    assert results[0][:2] == results[1][:2] == (0, '2\n')


def test_death_by_a_signal(image):
    """A command killed by a signal: the runtime dies of the same signal."""
    for rc, _, _ in both('exec', image, 'sh', '-c', 'kill -TERM $$'):
        assert rc == -signal.SIGTERM
    for runtime in RUNTIMES:
        proc = subprocess.Popen([RUNTIMES[runtime], 'exec', str(image), 'sh', '-c', 'echo up; exec sleep 30'],
                                stdout=subprocess.PIPE, text=True, cwd='/tmp')
        assert proc.stdout.readline() == 'up\n'
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == -signal.SIGTERM, runtime
        proc.stdout.close()


def test_command_the_image_lacks(image):
    """gcc is on the host, not in the image: both fail and name it (3.4.2: exit 127 from its exec action; 3.6+
    and the stand-in: FATAL, exit 255)."""
    (rc1, _, err1), (rc2, _, err2) = both('exec', image, 'gcc', '--version')
    assert (rc1, rc2) == (255, 127)
    assert 'gcc' in err1 and 'gcc' in err2


def test_environment(image):
    """The host's variables pass, except PATH and the runtime's own; HOME is set; the image's environment scripts
    are sourced; SINGULARITYENV_ sets what the image does not; PREPEND_PATH and APPEND_PATH work;
    APPTAINER_ names mean nothing to singularity."""
    script = ('for v in HOSTVAR GREETING FROMSENV HOME SINGULARITY_BINDPATH APPTAINERENV_X SINGULARITY_NAME; do '
              'printf "%s=%s\\n" "$v" "$(printenv $v)"; done; printf "PATH=%s\\n" "$PATH"')
    env = {'SINGULARITYENV_FROMSENV': 'from SINGULARITYENV', 'SINGULARITY_BINDPATH': '/tmp',
           'APPTAINERENV_X': 'plain', 'SINGULARITYENV_PREPEND_PATH': '/first', 'SINGULARITYENV_APPEND_PATH': '/last'}
    (rc1, out1, _), (rc2, out2, _) = both('exec', image, 'sh', '-c', script, env=env)
    assert rc1 == rc2 == 0
    lines1, lines2 = out1.splitlines(), out2.splitlines()
    assert lines1[:-1] == lines2[:-1] == [
        'HOSTVAR=from the host', 'GREETING=hello from the image', 'FROMSENV=from SINGULARITYENV', 'HOME=/root',
        'SINGULARITY_BINDPATH=', 'APPTAINERENV_X=plain', 'SINGULARITY_NAME=image.sif']
    for line in (lines1[-1], lines2[-1]):
        path = line[len('PATH='):].split(':')
        assert path[0] == '/first' and path[-1] == '/last' and '/usr/bin' in path and '/host/only/bin' not in path


def test_environment_where_the_generations_differ(image):
    """SINGULARITYENV_ against the image's own value: the image wins in 3.4.2, SINGULARITYENV_ from 3.6 on (and in
    the stand-in). The host's LD_LIBRARY_PATH: passed in by 3.4.2, not from 3.6 on."""
    script = 'printf "%s|%s" "$IMAGE_SET" "${LD_LIBRARY_PATH:-unset}"'
    env = {'SINGULARITYENV_IMAGE_SET': 'by SINGULARITYENV', 'LD_LIBRARY_PATH': '/host/lib'}
    (_, standin, _), (_, real, _) = both('exec', image, 'sh', '-c', script, env=env)
    assert standin == 'by SINGULARITYENV|unset'
    assert real == 'by the image|/host/lib'


def test_binds(image, bind_sources):
    """-B, SINGULARITY_BINDPATH and SINGULARITY_BIND together, read-only ones, a comma list, a file, destinations
    the image lacks."""
    src = bind_sources
    script = ('cat /mnt/a/f /mnt/b/f /new/deep/c/f /opt/lib/bound.so; echo; touch /mnt/b/x 2>/dev/null || '
              'echo b-read-only; touch /mnt/a/x && echo a-writable && rm /mnt/a/x')
    env = {'SINGULARITY_BINDPATH': '%s/a:/mnt/a' % src, 'SINGULARITY_BIND': '%s/b:/mnt/b:ro' % src}
    (rc1, out1, _), (rc2, out2, _) = both('exec', '-B', '%s/c:/new/deep/c,%s/lib.so:/opt/lib/bound.so' % (src, src),
                                          image, 'sh', '-c', script, env=env)
    assert rc1 == rc2 == 0
    assert out1 == out2 == 'abca file\nb-read-only\na-writable\n'


def test_default_binds_and_working_directory(image, tmp_path):
    """$HOME, /tmp and the working directory are there; other host paths are not; a working directory that is a
    system directory is the image's own."""
    (tmp_path / 'here').write_text('host file')
    marker = Path('/root/.lumi-ct-side-by-side-%d' % os.getpid())  # $HOME of root, who runs the tests
    marker.write_text('in home')
    script = 'cat here %s; test -e /work && echo host-work || echo no-host-work' % marker
    try:
        (rc1, out1, _), (rc2, out2, _) = both('exec', image, 'sh', '-c', script, cwd=tmp_path)
    finally:
        marker.unlink()
    assert rc1 == rc2 == 0 and out1 == out2 == 'host filein homeno-host-work\n'
    results = both('exec', image, 'cat', 'debian_version', cwd='/etc')
    assert results[0][1] == results[1][1] == (TOOLS / 'rootfs/bookworm/etc/debian_version').read_text()


def test_missing_bind_source(image, tmp_path):
    """3.4.2 warns and runs the command; 3.6 and later (and the stand-in) stop before it."""
    (rc1, out1, err1), (rc2, out2, err2) = both('exec', '-B', '%s/nope:/data' % tmp_path, image, 'echo', 'ran')
    assert (rc1, out1) == (255, '') and "mount source %s/nope doesn't exist" % tmp_path in err1
    assert (rc2, out2) == (0, 'ran\n') and 'skipping mount of %s/nope' % tmp_path in err2


def test_run_goes_through_the_runscript(image):
    (rc1, out1, _), (rc2, out2, _) = both('run', image, 'python3', '-c', SHOW, *ARGS)
    assert rc1 == rc2 == 0 and out1 == out2
    assert [rc for rc, _, _ in both('run', image, 'sh', '-c', 'exit 9')] == [9, 9]


def test_cleanenv(image):
    script = 'printf "%s|%s|%s" "${HOSTVAR:-gone}" "$FROMSENV" "$LANG"'
    results = both('exec', '--cleanenv', image, 'sh', '-c', script, env={'SINGULARITYENV_FROMSENV': 'kept'})
    assert results[0][1] == results[1][1] == 'gone|kept|C'


def test_in_ci_the_real_runtime_is_there():
    if IN_CI:
        assert os.access(REAL, os.X_OK), REAL
