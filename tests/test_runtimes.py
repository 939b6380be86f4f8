"""What the real container runtime does that the easyblock and its module rely on, asserted against the runtime the
suite drives (Apptainer 1.4.5 from make setup, called as singularity; or the one of make test SINGULARITY=...). Each
case names the part of the product that depends on it. The cases marked needs('apptainer') are Apptainer's own
behaviour; SingularityCE 4.x shares the rest as far as known (not run here)."""
import json
import re
import signal
import subprocess

import pytest

from support import require_runtime, require_tools
from testkit.images import build_sif, make_test_sif, sif_partition_offset
from testkit.install import RUNTIME, spawn
from testkit.users import as_user, user

pytestmark = pytest.mark.runtime


@pytest.fixture(scope='module')
def image(tmp_path_factory):
    require_runtime()
    require_tools('mksquashfs', 'siftool')
    return make_test_sif(tmp_path_factory.mktemp('runtime') / 'image.sif',
                         env={'GREETING': 'hello from the image', 'IMAGE_SET': 'by the image'})


def contain(*args, env=None, cwd='/tmp', stdin=None):
    """Run the runtime as the test user with a clean, known host environment; return (exit status, stdout,
    stderr)."""
    host = {'PATH': '/usr/local/bin:/usr/bin:/bin:/host/only/bin', 'LANG': 'C.UTF-8', 'HOSTVAR': 'from the host'}
    host.update(env or {})
    proc = subprocess.run([RUNTIME] + [str(arg) for arg in args], input=stdin, capture_output=True, text=True,
                          timeout=120, **as_user(user(), host, cwd))
    return proc.returncode, proc.stdout, proc.stderr


SHOW = 'import json, sys; print(json.dumps(sys.argv[1:]))'
ARGS = ['a b', '"dq"', "'sq'", '$HOME', '${X:-y}', 'back\\slash', '', 'line1\nline2', '*', '-c', '`id`', 'ü€']


def test_arguments_exit_status_stdin_and_signals(image):
    """The wrappers exec the runtime: arguments arrive intact, the command's exit status and death by a signal
    come back, stdin reaches it."""
    rc, out, _ = contain('exec', image, 'python3', '-c', SHOW, *ARGS)
    assert (rc, json.loads(out)) == (0, ARGS)
    assert contain('exec', image, 'sh', '-c', 'exit 7')[0] == 7
    assert contain('run', image, 'sh', '-c', 'exit 9')[0] == 9
    assert contain('exec', image, 'sh', '-c', 'cat | wc -l', stdin='one\ntwo\n')[:2] == (0, '2\n')
    assert contain('exec', image, 'sh', '-c', 'kill -TERM $$')[0] == -signal.SIGTERM
    proc = spawn([RUNTIME, 'exec', str(image), 'sh', '-c', 'echo up; exec sleep 30'],
                 stdout=subprocess.PIPE, text=True, cwd='/tmp')
    assert proc.stdout.readline() == 'up\n'
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    proc.stdout.close()


def test_environment(image):
    """The module's SINGULARITYENV_* win over the image's own values and the host's; PREPEND_PATH goes first; the
    host's PATH stays outside; plain host variables (container_env_defaults) pass in."""
    script = 'printf "%s|%s|%s|%s\\n" "$HOSTVAR" "$GREETING" "$IMAGE_SET" "$FROMENV"; printf "%s" "$PATH"'
    rc, out, _ = contain('exec', image, 'sh', '-c', script, env={
        'SINGULARITYENV_IMAGE_SET': 'by SINGULARITYENV', 'SINGULARITYENV_FROMENV': 'set',
        'SINGULARITYENV_PREPEND_PATH': '/first', 'SINGULARITYENV_APPEND_PATH': '/last'})
    assert rc == 0
    first, path = out.split('\n')
    assert first == 'from the host|hello from the image|by SINGULARITYENV|set'
    path = path.split(':')
    assert path[0] == '/first' and path[-1] == '/last' and '/usr/bin' in path and '/host/only/bin' not in path


def test_singularityenv_values_are_expanded_plain_variables_are_not(image, tmp_path):
    """Why container_env refuses $, ` and \\ and container_env_defaults takes them: the runtime evaluates
    SINGULARITYENV_* values in a shell in the container (a command in them runs), plain variables pass as they are."""
    marker = tmp_path / 'ran'
    value = 'pa$$word $(touch %s) `true` \\$x' % marker
    rc, out, _ = contain('exec', image, 'sh', '-c', 'printf "%s|%s" "$VIA_ENV" "$PLAIN"',
                         env={'SINGULARITYENV_VIA_ENV': value, 'PLAIN': value})
    via_env, plain = out.split('|')
    assert rc == 0 and plain == value
    assert via_env != value and marker.exists()


def test_an_image_without_99_base_gets_no_user_environment(tmp_path, image):
    """Why the test images carry the whole /.singularity.d layout of a real build: the runtime applies the user's
    SINGULARITYENV_* at 99-base.sh's turn: the image again without it."""
    tree = tmp_path / 'tree'
    subprocess.run(['unsquashfs', '-no-progress', '-quiet', '-o', str(sif_partition_offset(image)),
                    '-d', str(tree), str(image)], check=True)
    (tree / '.singularity.d/env/99-base.sh').unlink()
    broken = build_sif(tree, tmp_path / 'broken.sif')
    env = {'SINGULARITYENV_FROMENV': 'set'}
    assert contain('exec', image, 'sh', '-c', 'echo "[$FROMENV]"', env=env)[1] == '[set]\n'
    assert contain('exec', broken, 'sh', '-c', 'echo "[$FROMENV]"', env=env)[1] == '[]\n'


def test_a_missing_bind_source_stops_the_container(image, tmp_path):
    """Why the install and the module bind only sources that exist."""
    rc, out, err = contain('exec', '-B', '%s/nope:/data' % tmp_path, image, 'echo', 'ran')
    assert (rc, out) == (255, '') and "mount source %s/nope doesn't exist" % tmp_path in err


@pytest.mark.needs('apptainer')
def test_a_squashfs_bind_warns_unless_read_only(image, tmp_path):
    """Why the module binds the packed venv's SquashFS file (where the runtime stacks no layers) with
    image-src=/,ro. Apptainer's warning only: SingularityCE 4.x gives none (its source has no such message)."""
    (tmp_path / 'tree').mkdir()
    (tmp_path / 'tree' / 'f').write_text('in the SquashFS file')
    subprocess.run(['mksquashfs', str(tmp_path / 'tree'), str(tmp_path / 'us.squashfs'), '-quiet', '-no-progress'],
                   check=True)
    for binds, warned in (('%s/us.squashfs:/user-software:image-src=/' % tmp_path, True),
                          ('%s/us.squashfs:/user-software:image-src=/,ro' % tmp_path, False)):
        rc, out, err = contain('exec', image, 'cat', '/user-software/f',
                               env={'SINGULARITY_BINDPATH': binds, 'APPTAINER_BINDPATH': binds})
        assert (rc, out) == (0, 'in the SquashFS file')
        assert ('is not writable, proceeding with read-only' in err) == warned, err


@pytest.mark.needs('apptainer')
def test_both_names_quiet_only_when_equal(image):
    """Why the module gives SINGULARITY_* and APPTAINER_* the same values: Apptainer warns when they differ."""
    same = {'SINGULARITYENV_X': '1', 'APPTAINERENV_X': '1',
            'SINGULARITY_BINDPATH': '/tmp', 'APPTAINER_BINDPATH': '/tmp'}
    assert contain('exec', image, 'sh', '-c', 'echo $X', env=same) == (0, '1\n', '')
    rc, out, err = contain('exec', image, 'sh', '-c', 'echo $X', env=dict(same, APPTAINERENV_X='2'))
    assert (rc, out) == (0, '2\n') and 'have different values' in err


def test_default_binds_and_working_directory(image, tmp_path):
    """$HOME, /tmp and the working directory are there (the wrappers run where the user is); other host paths
    are not."""
    (tmp_path / 'here').write_text('host file')
    rc, out, _ = contain('exec', image, 'sh', '-c', 'cat here; test -e /work && echo host-work || echo no-host-work',
                         cwd=tmp_path)
    assert (rc, out) == (0, 'host fileno-host-work\n')


def squashfs_compression(sif):
    """The compression of the image's root file system partition (unsquashfs -s at its offset)."""
    proc = subprocess.run(['unsquashfs', '-s', '-o', str(sif_partition_offset(sif)), str(sif)], capture_output=True,
                          text=True, check=True)
    return re.search(r'^Compression (\S+)$', proc.stdout, re.M).group(1)


def test_the_sites_compression_runs_as_the_test_images_do(image, tmp_path):
    """The test images are lz4 (testkit.images.IMAGE_COMPRESSION: Python starts faster); the sites' images have
    apptainer build's default, gzip (here at level 1, which packs 6 times as fast and reads the same): the runtime
    runs both alike."""
    require_tools('unsquashfs')
    default = make_test_sif(tmp_path / 'gzip.sif', builder='apptainer', compression=('-Xcompression-level', '1'),
                            env={'GREETING': 'hello from the image', 'IMAGE_SET': 'by the image'})
    assert (squashfs_compression(image), squashfs_compression(default)) == ('lz4', 'gzip')
    for sif in (image, default):
        assert contain('exec', sif, 'python3', '-c', SHOW + '; import os; print(os.environ["GREETING"])',
                       *ARGS)[:2] == (0, json.dumps(ARGS) + '\nhello from the image\n')
