"""venv-pip: pip against the module's virtual environment in one command, packed in user-software.squashfs or
not; changes to a packed one replace the SquashFS file only when everything worked. EasyBuild 5 and 4.9.4."""
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from support import USER_HINT, fresh, install, require_other_users, require_runtime, require_tools
from testkit.images import IMAGE_PYTHON, IMAGE_TOOL_COMMAND, make_test_sif, write_distribution
from testkit.install import (LAIF_MODULE, RUNTIME, RUNTIME_SETUID, SQUASHFS_WORKS, Installation, base_env,
                             demo_easyconfig, fake_command, install_demo, install_laif, run, spawn, local_wheels,
                             slow_step, wait_for, write_wheel)
from singularitycontainer_src.layout import GENERATION_PREFIX, KEEP_SUPERSEDED_MINUTES, LIBRARY, WRITABLE_LAYER_RECORD
from testkit.users import OUTSIDER, OWNER, give

# who holds the lock, as those who wait or are refused hear it
HOLDER = "%s's venv-pip on %s (process %%d)" % (OWNER, socket.gethostname())

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too


@pytest.fixture(scope='module')
def eb_version():
    """venv-pip's tests run with EasyBuild 5 only: with 4.9.4 the install writes the same scripts and module
    (test_easybuild_49_writes_the_same_scripts_and_module); the install itself runs with both in test_venv and
    test_easyblock."""
    return '5'


@pytest.fixture(scope='module')
def unpacked_install(tmp_path_factory, demo_sif, wheelhouse, eb_version):
    return install(tmp_path_factory.mktemp('unpacked'), demo_sif, wheelhouse, eb_version, squash=False)


@pytest.fixture
def packed(packed_install):
    """Demo/1.0 with its venv packed (user-software.packed), as installed: (Installation, install dir)."""
    return fresh(packed_install)


@pytest.fixture
def unpacked(unpacked_install):
    """Demo/1.0 with its venv in user-software/, as installed: (Installation, install dir)."""
    return fresh(unpacked_install)


# The packed venv: a link to its generation, which holds its files; these, where the runtime stacks layers (it does
# here)
PACKED = 'user-software.packed'
SQUASHFS, CHANGES = PACKED + '/user-software.squashfs', PACKED + '/user-software.changes.squashfs'
LAYERS = ['user-software.changes.squashfs', 'user-software.squashfs']


def user_software_entries(idir):
    """The names in the install dir of what users install (the packed venv's link, user-software/)."""
    return sorted(p.name for p in idir.iterdir() if p.name.startswith('user-software'))


def packed_files(idir):
    """The packed venv's SquashFS files: those of the generation its link names (beside them, its requests file)."""
    return sorted(p.name for p in (idir / PACKED).iterdir() if p.name.endswith('.squashfs'))


def generations(idir):
    """The generation directories in the install dir, the current one (the link names it) first."""
    current = (idir / PACKED).resolve()
    return sorted(idir.glob(GENERATION_PREFIX + '*'), key=lambda path: path != current)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.needs('image-src')
def test_install_and_uninstall_in_a_packed_venv(packed, wheelhouse):
    inst, idir = packed
    out = inst.module_shell('Demo/1.0', 'venv-pip install --no-index --find-links=%s lumi-later lumi-needs-wheel '
                                        'lumi-many-files\n'
                                        'python -c "import lumi_later, lumi_needs_wheel, wheel; '
                                        'print(wheel.__file__)"\n'
                                        'venv-pip list --format=freeze\n' % wheelhouse).stdout
    assert 'Requirement already satisfied: wheel in /usr/lib/python3/dist-packages' in out  # the image's
    assert '/usr/lib/python3/dist-packages/wheel/__init__.py' in out
    assert {'lumi-base==1.0', 'lumi-later==1.0', 'lumi-needs-wheel==1.0'} <= set(out.split())
    assert '%s has the change as a layer; new jobs use it (no module reload needed)' % (idir / PACKED) in out
    assert user_software_entries(idir) == [PACKED] and packed_files(idir) == LAYERS

    # pip asks before it uninstalls: the answer reaches it
    proc = inst.module_shell('Demo/1.0', 'echo y | venv-pip uninstall lumi-later\n'
                                         'python -c "import lumi_later" 2>&1 || true\n'
                                         'venv-pip list --format=freeze\n')
    assert 'Successfully uninstalled lumi-later-1.0' in proc.stdout and "No module named 'lumi_later'" in proc.stdout
    assert 'lumi-later' not in proc.stdout.split('No module named')[1] and not proc.stderr


@pytest.mark.needs('image-src')
def test_an_upgrade_is_a_layer_that_singularity_exec_sees_without_reload(packed, tmp_path):
    """A change of a packed venv is a layer, user-software.changes.squashfs, on the SquashFS file as it was: an upgrade
    removes the old version's files (also one named like a pattern) and directories (whiteouts where the SquashFS file
    has them), with no warning, and a package removed, then installed again shows nothing of what the SquashFS file
    has of it; `singularity exec $SIF` in the shell that loaded the module before sees it; unmake-squashfs unpacks
    the venv with the change."""
    inst, idir = packed
    base = sha256(idir / SQUASHFS)
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    # (a name with wildcard characters: unsquashfs takes the names it is given as patterns)
    write_wheel(wheels, 'lumi-upgraded', '1.0', modules={'old.py': 'OLD = 1\n', 'sub/__init__.py': '', 'sub/a.py': '',
                                                         'odd[1]*.txt': ''})
    write_wheel(wheels, 'lumi-upgraded', '2.0', modules={'new.py': 'NEW = 2\n'})
    write_wheel(wheels, 'lumi-base', '2.0', code='NAME = "base 2"\n')
    options = ' '.join(local_wheels(wheels))
    check = ('singularity exec "$SIF" /user-software/venv/demo/bin/python -c "import lumi_upgraded.new" && echo new\n'
             'for m in old sub; do singularity exec "$SIF" /user-software/venv/demo/bin/python -c '
             '"import lumi_upgraded.$m" 2>/dev/null || echo no $m; done\n')
    work = tmp_path / 'work'  # venv-pip's node-local storage
    work.mkdir()
    give(work, inst.user)
    changes = ('export TMPDIR={work}\n'
               'venv-pip install -q {options} lumi-upgraded==1.0\n'
               'venv-pip install -q {options} lumi-upgraded==2.0\n'
               'venv-pip uninstall -q -y lumi-base\n'
               'venv-pip install -q --no-compile {options} lumi-base==2.0\n').format(work=work, options=options)
    proc = inst.module_shell('Demo/1.0', changes + check + (
        'venv-pip list --format=freeze | grep -e upgraded -e base\n'
        'python -c "import lumi_base; print(lumi_base.NAME)"\n'
        'ls "$TMPDIR" | wc -l\n'
        'echo "$APPTAINER_OVERLAY"\n'))
    assert proc.stdout.splitlines()[-8:] == [
        'new', 'no old', 'no sub', 'lumi-base==2.0', 'lumi-upgraded==2.0', 'base 2', '0',
        '%s/%s:ro,%s/%s:ro' % (idir, SQUASHFS, idir, CHANGES)]
    assert proc.stderr == ''
    assert sha256(idir / SQUASHFS) == base
    # a whiteout where the SquashFS file has the path (lumi-base 1.0), none where only the layer had it
    whiteouts = run(['unsquashfs', '-lls', str(idir / CHANGES)], user=None).stdout
    site = r'^c.* squashfs-root/user-software/venv/demo/lib/python[0-9.]*/site-packages/'
    assert re.search(site + r'lumi_base-1\.0\.dist-info$', whiteouts, re.M)
    assert not re.search(site + 'lumi_upgraded', whiteouts, re.M)

    out = inst.module_shell('Demo/1.0', 'unmake-squashfs').stdout
    assert 'It includes the changes in %s.' % ((idir / PACKED).resolve() / 'user-software.changes.squashfs') in out
    site = next((idir / 'user-software' / 'venv' / 'demo' / 'lib').glob('python*/site-packages'))
    assert sorted(p.name for p in (site / 'lumi_upgraded').iterdir()) == ['__init__.py', '__pycache__', 'new.py']
    assert [p.name for p in site.glob('lumi_upgraded-*')] == ['lumi_upgraded-2.0.dist-info']
    assert sorted(p.name for p in (site / 'lumi_base').iterdir()) == ['__init__.py']  # none of 1.0's __pycache__


def written_by(call):
    """call() and the bytes the processes it ran (and waited for) wrote to storage, as the kernel counts them when
    they dirty the pages (a file removed before it reaches the disk counts too)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    result = call()
    return result, (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512


@pytest.mark.needs('image-src')
def test_an_uninstall_moves_nothing_aside(packed, tmp_path):
    """pip's uninstall moves what it removes aside first, to put it back if the change fails; in the overlay, a move
    of what the SquashFS file holds is a copy of it. venv-pip's pip removes it in place (a failed change is thrown
    away whole): an uninstall of a package of 48 MiB in the SquashFS file writes less than a third of that, with the
    work dir on a disk, and the package is gone."""
    inst, idir = packed
    wheels, work = tmp_path / 'wheels', tmp_path / 'work'
    wheels.mkdir()
    work.mkdir()
    give(work, inst.user)
    size = 48 << 20
    write_wheel(wheels, 'lumi-large', modules={'data.py': 'DATA = %r\n' % os.urandom(size // 2).hex()})
    # (into the SquashFS file itself, as LUMI's user guide packs a venv: unpacked, changed, packed again)
    inst.module_shell('Demo/1.0', 'venv-pip install -q --no-compile %s lumi-large\n'
                                  'unmake-squashfs >/dev/null\nrm "$CONTAINERROOT/%s"\nmake-squashfs >/dev/null\n'
                                  'rm -rf "$CONTAINERROOT/user-software"\n' % (' '.join(local_wheels(wheels)), PACKED))
    listed = run(['unsquashfs', '-l', str(idir / SQUASHFS)], user=None).stdout
    assert re.search(r'/site-packages/lumi_large/data\.py$', listed, re.M)
    # (the place counts what is written there)
    _, probe = written_by(lambda: inst.shell('dd if=/dev/zero of=%s/probe bs=1M count=8 conv=fsync status=none\n'
                                             'rm %s/probe' % (work, work)))
    assert probe >= 8 << 20, 'the file system of %s does not count what is written to it' % work
    proc, written = written_by(lambda: inst.module_shell('Demo/1.0', (
        'export TMPDIR=%s\nvenv-pip uninstall -q -y lumi-large\n'
        'python -c "import lumi_large" 2>&1 | tail -n 1\n') % work))
    assert proc.stdout.splitlines()[-1] == "ModuleNotFoundError: No module named 'lumi_large'"
    assert written < size // 3, '%d MiB written for an uninstall of %d MiB' % (written >> 20, size >> 20)


WRITABLE_LAYER = WRITABLE_LAYER_RECORD
# The kind of writable layer the runtime allows on top of the layers: the modes differ here, and only here, by
# design. A setuid runtime (LUMI's) lets only root use a directory as an overlay; in a user namespace, an EXT3 image
# would need FUSE under the kernel's overlay, which the kernel refuses.
EXPECTED_KIND = 'image' if RUNTIME_SETUID else 'directory'


@pytest.mark.needs('image-src')
def test_make_squashfs_records_the_writable_layer_that_the_runtime_allows(packed, wheelhouse):
    """The install's make-squashfs tries which writable layer the runtime stacks on top of the venv's layers and
    records it in the generation; each change's new generation keeps it."""
    inst, idir = packed
    assert (idir / PACKED / WRITABLE_LAYER).read_text() == EXPECTED_KIND + '\n'
    out = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later' % ' '.join(local_wheels(wheelhouse)))
    assert out.stderr == ''
    assert (idir / PACKED / WRITABLE_LAYER).read_text() == EXPECTED_KIND + '\n'


@pytest.mark.needs('image-src')
def test_a_writable_layer_the_runtime_refuses_gives_way_to_the_other_kind(packed, wheelhouse):
    """An install made with another runtime recorded the other kind (a user-namespace Apptainer: a directory; a
    setuid one: an EXT3 image): the runtime refuses it, venv-pip says so in one line, makes the change with the kind
    that works, and records that one."""
    inst, idir = packed
    other = 'directory' if RUNTIME_SETUID else 'image'
    record = idir / PACKED / WRITABLE_LAYER
    record.write_text(other + '\n')
    proc = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later\npython -c "import lumi_later"' %
                             ' '.join(local_wheels(wheelhouse)))
    said = [line for line in proc.stderr.splitlines() if line.startswith('venv-pip')]
    assert said == ['venv-pip: the container runtime refuses a writable %s on top of the venv\'s layers (a setuid '
                    'runtime lets only root use a directory, one in a user namespace takes no EXT3 image): the change '
                    'got a writable %s instead' % (other, EXPECTED_KIND)], proc.stderr
    assert record.read_text() == EXPECTED_KIND + '\n' and packed_files(idir) == LAYERS
    assert inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-top' % ' '.join(
        local_wheels(wheelhouse))).stderr == ''


@pytest.mark.needs('image-src')
def test_a_change_starts_one_container(packed, wheelhouse, tmp_path):
    """A change as a layer starts one container, pip's (with the image's commands after it), under both runtime
    modes: under a setuid runtime its writable layer is an EXT3 image that mkfs.ext3 makes (not the runtime's overlay
    create, which writes a journal of 128 MiB), and the change is read out of it on the host (debugfs), not by a
    second container."""
    inst, idir = packed
    log = tmp_path / 'starts'
    log.write_text('')
    give(log, inst.user)
    shims = fake_command(tmp_path / 'shims', 'singularity', 'echo "$1" >>%s\nexec %s "$@"\n' % (log, RUNTIME))
    give(tmp_path, inst.user)
    proc = inst.module_shell('Demo/1.0', 'PATH=%s:$PATH venv-pip install -q %s lumi-later\n'
                                         'python -c "import lumi_later"' % (shims, ' '.join(local_wheels(wheelhouse))))
    assert proc.stderr == ''
    assert log.read_text().split() == ['exec']
    assert (idir / PACKED / WRITABLE_LAYER).read_text() == EXPECTED_KIND + '\n'


# SingularityCE without setuid (its native mode, in a user namespace) mounts the SIF with squashfuse, but no SquashFS
# overlay and no image-src bind: it leaves them out with only a debug message (SingularityCE's source; it cannot be
# installed here). This stand-in does the same to the real runtime's variables, then runs it.
NATIVE_SINGULARITYCE = r"""#!/bin/bash
unset SINGULARITY_OVERLAY APPTAINER_OVERLAY
for var in SINGULARITY_BINDPATH APPTAINER_BINDPATH; do
    IFS=, read -ra entries <<<"${!var:-}"
    kept=() dropped=
    for entry in "${entries[@]}"; do
        case "$entry" in
            *:image-src=*) dropped=yes ;;
            ro | rw) [ -n "$dropped" ] || kept+=("$entry") ;;
            *) dropped= kept+=("$entry") ;;
        esac
    done
    IFS=,
    export "$var=${kept[*]}"
    unset IFS
done
exec %s "$@"
"""


@pytest.mark.needs('image-src')
def test_a_runtime_that_mounts_no_squashfs_file_keeps_the_venv_a_directory(tmp_path, demo_sif, wheelhouse):
    """Where neither form of the packed venv shows up in the container (SingularityCE without setuid), the install's
    make-squashfs says so once and leaves the venv the directory it was, which the module binds; venv-pip changes
    it there, and a later make-squashfs by hand says the same and changes nothing."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    native = tmp_path / 'native'
    native.mkdir()
    (native / 'singularity').write_text(NATIVE_SINGULARITYCE % RUNTIME)
    (native / 'singularity').chmod(0o755)
    inst = Installation(tmp_path / 'install')
    inst.add_source(demo_sif, 'demo.sif')
    give(inst.sources, inst.user)
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(
        wrapped_commands=['python'], pip_requirements=['lumi-base'], squash_user_software=True,
        pip_install_options=local_wheels(wheelhouse)))
    env = inst.env()
    env['PATH'] = '%s:%s' % (native, env['PATH'])
    out = inst.eb(ec, '--robot-paths=' + str(ec.parent), env=env).stdout
    idir = inst.installdir('Demo', '1.0')
    said = 'neither stacks %s/%s as overlays nor binds it at /user-software' % (idir, SQUASHFS)
    assert out.count(said) == 1 and 'the venv stays the directory %s/user-software' % idir in out
    assert (idir / 'user-software').is_dir() and not os.path.lexists(idir / PACKED)
    shell_env = base_env([str(native)])
    proc = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later\npython -c "import lumi_base, lumi_later"'
                             '\nmake-squashfs' % ' '.join(local_wheels(wheelhouse)), env=shell_env)
    assert said in proc.stdout and proc.stderr == ''
    assert (idir / 'user-software').is_dir() and not os.path.lexists(idir / PACKED)


@pytest.mark.needs('image-src')
def test_changes_that_grow_are_merged_into_the_squashfs_file(packed, tmp_path):
    """Once the layer is larger than a quarter of the SquashFS file (and 16 MiB), venv-pip merges both into a new
    SquashFS file and empties the layer; the next change is a layer again."""
    inst, idir = packed
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    write_wheel(wheels, 'lumi-big', modules={'data.py': 'DATA = %r\n' % os.urandom(9 << 20).hex()})
    write_wheel(wheels, 'lumi-small')
    options = ' '.join(local_wheels(wheels))
    out = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-big\nvenv-pip install -q %s lumi-small\n'
                                        'python -c "import lumi_big.data, lumi_small; print(len(lumi_big.data.DATA))"'
                                        % (options, options)).stdout.splitlines()
    assert out[0].endswith('user-software.packed has the change (merged with the earlier ones); new jobs use it (no '
                           'module reload needed), running ones keep the old one.')
    assert out[1].endswith('user-software.packed has the change as a layer; new jobs use it (no module reload '
                           'needed), running ones keep the old one.')
    assert out[2] == str(18 << 20)
    assert (idir / CHANGES).stat().st_size < (1 << 20)


@pytest.mark.needs('image-src')
def test_without_layers_venv_pip_repacks_on_local_storage(packed, tmp_path, wheelhouse):
    """A runtime that cannot stack overlays: make-squashfs says so once and makes no layer, the module binds the
    SquashFS file, and venv-pip repacks the whole venv in a private directory on local storage, or, where none has
    room, beside the install, saying so; it leaves nothing behind."""
    inst, idir = packed
    no_overlays = fake_command(tmp_path / 'no-overlays', 'singularity', (
        'if [ -n "${APPTAINER_OVERLAY:-}" ]; then echo "FATAL: overlays are not supported here" >&2; exit 255; fi\n'
        'exec %s "$@"\n') % RUNTIME)
    out = inst.module_shell('Demo/1.0', 'unmake-squashfs >/dev/null\nrm "$CONTAINERROOT/user-software.packed"\n'
                                        'PATH=%s:$PATH make-squashfs\n'
                                        'rm -r "$CONTAINERROOT/user-software"' % no_overlays).stdout
    assert ('venv-pip will repack the whole venv for each change: the container runtime does not stack %s/user-software'
            '.packed/user-software.squashfs and a layer on top as overlays here (FATAL: overlays are not supported '
            'here).' % idir) in out
    assert user_software_entries(idir) == [PACKED] and packed_files(idir) == ['user-software.squashfs']
    # (a file system with no room: stat -f says so, of any path; the rest of stat is the real one's)
    no_room = fake_command(tmp_path / 'no-room', 'stat', 'if [ "$1" = -f ]; then echo 0 4096; exit 0; fi\n'
                                                         'exec %s "$@"\n' % shutil.which('stat'))
    work = tmp_path / 'work'  # venv-pip's node-local storage
    work.mkdir()
    give(work, inst.user)
    proc = inst.module_shell('Demo/1.0', 'export TMPDIR=%s\necho "$SINGULARITY_BINDPATH"\n' % work +
                                         'PATH=%s:$PATH venv-pip install -q --no-index --find-links=%s lumi-later\n'
                                         'venv-pip install -q --no-index --find-links=%s lumi-needs-wheel\n'
                                         'python -c "import lumi_later, lumi_needs_wheel"'
                             % (no_room, wheelhouse, wheelhouse))
    assert '%s/%s:/user-software:image-src=/user-software,ro' % (idir, SQUASHFS) in proc.stdout
    assert proc.stdout.count('user-software.packed has the change; new jobs use it') == 2
    assert proc.stderr == ('venv-pip: working in %s: none of %s, /dev/shm, /tmp has the 64 MiB free that it needs; '
                           'TMPDIR chooses where venv-pip works first\n' % (idir, work))
    assert user_software_entries(idir) == [PACKED] and packed_files(idir) == ['user-software.squashfs']
    assert not list(work.iterdir())


@pytest.mark.once_only('EasyBuild 4.9\'s install is compared with 5\'s as text; its container commands are 5\'s, '
                       'which run under both runtimes (the EasyBuild 4.9 variants run where this one does)')
def test_easybuild_49_writes_the_same_scripts_and_module(packed_install, tmp_path, demo_sif, wheelhouse):
    """An install with EasyBuild 4.9.4 writes venv-pip, make-squashfs, unmake-squashfs, the wrappers, the library
    and the module as 5.x does (the tests of the module and its commands need one of them, EasyBuild 5's), and its
    venv-pip changes the venv. In the module, only EasyBuild's own lines differ (its version, the devel module's
    path written another way), and the install's paths."""
    inst, idir, _ = packed_install
    inst49, idir49, _ = install(tmp_path, demo_sif, wheelhouse, '4.9', squash=True)

    def install_text(installation, path):
        """The text of a file of the install, but its paths and its stamp (a digest of the library, which names the
        install's paths: the kernel's command, the modules' directory)."""
        text = path.read_text().replace(str(installation.root), '<root>')
        return re.sub(r'\b((install|command)_stamp=)[0-9a-f]{16}\b', r'\1<stamp>', text)
    for script in sorted(path.relative_to(idir) for path in (idir / 'bin').iterdir()) + [Path(LIBRARY)]:
        assert install_text(inst49, idir49 / script) == install_text(inst, idir / script), script

    def module_text(installation):
        text = installation.module_file('Demo', '1.0').read_text().replace(str(installation.root), '<root>')
        return [line for line in text.splitlines() if 'Built with EasyBuild version' not in line and
                not line.startswith('setenv("EBDEVELDEMO"')]
    assert module_text(inst49) == module_text(inst)
    out = inst49.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later\npython -c "import lumi_later"'
                              % ' '.join(local_wheels(wheelhouse)))
    assert 'has the change as a layer' in out.stdout and out.stderr == ''


def test_install_in_an_unpacked_venv(unpacked, wheelhouse):
    inst, idir = unpacked
    out = inst.module_shell('Demo/1.0', 'venv-pip install --no-index --find-links=%s lumi-later\n'
                                        'python -c "import lumi_later; print(lumi_later.__file__)"' % wheelhouse).stdout
    assert '/user-software/venv/demo/lib/python' in out
    assert list((idir / 'user-software' / 'venv' / 'demo' / 'lib').glob('python*/site-packages/lumi_later'))
    assert not (idir / PACKED).exists()


@pytest.mark.needs('image-src')
def test_a_failed_install_changes_nothing(packed, wheelhouse):
    inst, idir = packed
    before = (idir / PACKED).resolve(), [sha256(idir / PACKED / name) for name in LAYERS]
    proc = inst.module_shell('Demo/1.0', 'venv-pip install --no-index --find-links=%s lumi-does-not-exist' % wheelhouse,
                             check=False)
    assert proc.returncode != 0
    errors = proc.stderr.splitlines()
    first_error = next(i for i, line in enumerate(errors) if 'ERROR' in line or 'error' in line)
    assert 'No matching distribution found for lumi-does-not-exist' in ' '.join(errors[first_error:first_error + 2])
    assert errors[-1] == 'venv-pip: error: pip failed (exit code 1); the venv was not changed'
    assert ((idir / PACKED).resolve(), [sha256(idir / PACKED / name) for name in LAYERS]) == before
    assert user_software_entries(idir) == [PACKED] and generations(idir) == [before[0]]


def start_venv_pip(inst, wheelhouse, *extra_path, tmpdir=None):
    """venv-pip install lumi-later in the background, in its own process group; (process, its environment)."""
    env = base_env([str(p) for p in extra_path])
    if tmpdir:
        env['TMPDIR'] = str(tmpdir)
    command = inst.shell_command('module load Demo/1.0\nexec venv-pip install %s lumi-later'
                                 % ' '.join(local_wheels(wheelhouse)))
    return spawn(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True, start_new_session=True)


@pytest.mark.needs('image-src')
@pytest.mark.parametrize('step, signum', [('pip', signal.SIGTERM), ('pack', signal.SIGTERM), ('pack', signal.SIGKILL)],
                         ids=['pip-SIGTERM', 'pack-SIGTERM', 'pack-SIGKILL'])
def test_a_signal_in_the_middle(packed, tmp_path, wheelhouse, step, signum):
    """Stopped while pip runs or while it packs: the old state of the venv is untouched and usable. After a SIGTERM
    nothing is left running or on disk (in the install dir or on node-local storage); after a SIGKILL the next run
    works at once, and removes the new generation that the killed one left once that is older than a container start
    needs (KEEP_SUPERSEDED_MINUTES)."""
    inst, idir = packed
    before = (idir / PACKED).resolve(), [sha256(idir / PACKED / name) for name in LAYERS]
    slow, started = slow_step(tmp_path, step)
    work = tmp_path / 'work'  # venv-pip's node-local storage
    work.mkdir()
    give(work, inst.user)
    proc = start_venv_pip(inst, wheelhouse, slow, tmpdir=work)
    wait_for(started.exists, 'venv-pip to reach the slow step')
    if signum == signal.SIGTERM:
        os.kill(proc.pid, signum)  # venv-pip itself, as Slurm at the end of a job, or kill
    else:
        os.killpg(proc.pid, signum)  # everything, with no chance to clean up
    proc.communicate(timeout=30)  # what venv-pip left running would hold its output open
    assert proc.returncode == (143 if signum == signal.SIGTERM else -signal.SIGKILL)
    if signum == signal.SIGTERM:  # venv-pip stopped what it ran: nothing of its session runs on
        wait_for(lambda: not group_alive(proc.pid), 'the processes of venv-pip to end', timeout=10)
    assert ((idir / PACKED).resolve(), [sha256(idir / PACKED / name) for name in LAYERS]) == before
    assert inst.module_shell('Demo/1.0', 'python -c "import lumi_base; print(lumi_base.NAME)"').stdout == 'base\n'
    leftovers = generations(idir)[1:]
    assert bool(leftovers) == (signum == signal.SIGKILL) == bool(list(work.iterdir()))
    for leftover in leftovers:  # as if killed long enough ago
        old = leftover.stat().st_mtime - 60 * KEEP_SUPERSEDED_MINUTES - 1
        os.utime(leftover, (old, old))

    done = inst.module_shell('Demo/1.0', 'TMPDIR=%s venv-pip install --no-index --find-links=%s lumi-later'
                             % (work, wheelhouse))
    assert not list(work.iterdir())
    assert 'waiting' not in done.stderr  # the lock went with the stopped run
    assert generations(idir) == [(idir / PACKED).resolve(), before[0]]  # (the one it superseded: kept for a while)
    assert inst.module_shell('Demo/1.0', 'python -c "import lumi_later; print(lumi_later.LATER)"').stdout == 'True\n'


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.needs('image-src')
def test_two_at_once_and_a_job_reading_the_old_file(packed, tmp_path, wheelhouse):
    """Two venv-pip runs at once: the second waits for the first, both changes are there. A job that has the old
    SquashFS file mounted keeps reading it while it is replaced."""
    inst, idir = packed
    reader = spawn(
        inst.shell_command('module load Demo/1.0\nexec singularity exec "$SIF" sh -c '
                           '"cat /user-software/requirements.txt; read line; cat /user-software/requirements.txt; '
                           'echo lumi_later: \\$(ls /user-software/venv/demo/lib/python*/site-packages | grep -c '
                           'lumi_later)"'),
        env=base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    first_line = reader.stdout.readline()  # mounted now
    slow = fake_command(tmp_path / 'slow', 'mksquashfs',
                        ': > "$2"\nsleep 2\nexec %s "$@"\n' % shutil.which('mksquashfs'))
    first = start_venv_pip(inst, wheelhouse, slow)
    wait_for(lambda: any((new / 'user-software.changes.squashfs').exists() for new in generations(idir)[1:]),
             'the first venv-pip to start packing')
    second = inst.module_shell('Demo/1.0', 'venv-pip install --no-index --find-links=%s lumi-needs-wheel' % wheelhouse)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert ('venv-pip: waiting for %s to finish with %s...\n' % (HOLDER % first.pid, idir)) in second.stderr
    listed = inst.module_shell('Demo/1.0', 'venv-pip list --format=freeze').stdout.split()
    assert {'lumi-later==1.0', 'lumi-needs-wheel==1.0'} <= set(listed)
    rest, _ = reader.communicate('go on\n', timeout=60)
    assert first_line == 'lumi-base\n' and rest == 'lumi-base\nlumi_later: 0\n'  # the old file: without lumi_later
    assert reader.returncode == 0


def test_pip_install_user_in_the_container_points_to_venv_pip(unpacked):
    """pip install --user in the container would install where the venv does not look: it says to use venv-pip."""
    inst, idir = unpacked
    proc = inst.module_shell('Demo/1.0', 'pip install --user lumi-later', check=False)
    assert proc.returncode == 1
    assert proc.stderr == ('pip: --user would install into ~/.local, which /user-software/venv/demo does not see. '
                           'Outside the container, with the module loaded, run: venv-pip install lumi-later%s\n'
                           % USER_HINT)
    assert not list(idir.glob('user-software/venv/demo/lib/python*/site-packages/lumi_later'))


@pytest.mark.needs('image-src')
def test_pip_install_in_a_packed_venv_points_to_venv_pip(packed):
    """pip install in the container while the venv is packed (read-only) says to use venv-pip."""
    inst, idir = packed
    proc = inst.module_shell('Demo/1.0', 'pip install --no-index lumi-later', check=False)
    assert proc.returncode == 1
    assert proc.stderr == ('pip: /user-software/venv/demo is read-only in the container (packed in '
                           'user-software.squashfs, or not yours). Outside the container, with the module loaded, '
                           'run: venv-pip install --no-index lumi-later\n')


@pytest.mark.needs('image-src')
def test_python_m_pip_in_a_packed_venv_installs_nowhere(packed, tmp_path, wheelhouse):
    """python -m pip goes round bin/pip: in a packed venv pip fails on the read-only file system; it neither
    defaults to a --user install (the venv does not see ~/.local) nor accepts one."""
    inst, idir = packed
    home = tmp_path / 'home'
    home.mkdir()
    for options, error in (('', 'Read-only file system'), ('--user ', "Can not perform a '--user' install")):
        proc = inst.module_shell('Demo/1.0', 'cd && HOME=%s python -m pip install %s--no-index --find-links=%s '
                                             'lumi-later' % (home, options, wheelhouse), check=False)
        assert proc.returncode != 0 and error in proc.stderr
        assert 'Defaulting to user installation' not in proc.stdout + proc.stderr
    assert not list(home.rglob('*lumi_later*'))


def test_what_a_killed_lock_taker_left_goes_with_the_next_lock(packed):
    """A run killed between its mktemp and its rename leaves a new lock file or holder record beside the lock: whoever
    takes the lock next removes those of theirs that are regular files more than 2 minutes old. A fresh one (a run
    making it now), a link and a FIFO at such names stay, and the link's target is not touched."""
    inst, idir = packed
    old, fresh = idir / '.user-software.lock.new.Old123', idir / '.user-software.lock.new.New123'
    old_record = idir / '.user-software.lock.holder.new.Old123'
    link, fifo = idir / '.user-software.lock.new.Lnk123', idir / '.user-software.lock.new.Fifo12'
    target = idir / 'image-python.json'
    before = target.read_bytes(), target.stat().st_mtime
    for path in (old, fresh, old_record):
        path.write_text('')
    link.symlink_to(target)
    os.mkfifo(fifo)
    for path in (old, fresh, old_record, link, fifo):
        give(path, inst.user)
    ten_minutes_ago = os.stat(old).st_mtime - 600
    for path in (old, old_record, link, fifo):
        os.utime(path, (ten_minutes_ago, ten_minutes_ago), follow_symlinks=False)
    proc = inst.module_shell('Demo/1.0', 'make-squashfs', check=False)  # (takes the lock, then refuses: packed)
    assert proc.returncode == 1 and 'already exists' in proc.stderr, proc.stderr
    assert [path.name for path in (old, fresh, old_record, link, fifo) if os.path.lexists(path)] == \
        [fresh.name, link.name, fifo.name]
    assert (target.read_bytes(), target.stat().st_mtime) == before
    for path in (fresh, link, fifo):
        path.unlink()


def test_make_and_unmake_squashfs_refuse_while_venv_pip_runs(unpacked, tmp_path, wheelhouse):
    """venv-pip holds the install dir's lock while pip runs (here in an unpacked venv): make-squashfs and
    unmake-squashfs stop at once with a clear message."""
    inst, idir = unpacked
    slow, started = slow_step(tmp_path, 'pip')
    running = start_venv_pip(inst, wheelhouse, slow)
    try:
        wait_for(started.exists, 'venv-pip to run pip')
        for command in ('make-squashfs', 'unmake-squashfs'):
            proc = inst.module_shell('Demo/1.0', command, check=False)
            assert (proc.returncode, proc.stderr) == (1, '%s: error: %s is changing %s; try again when it is done\n'
                                                      % (command, HOLDER % running.pid, idir))
    finally:
        os.kill(running.pid, signal.SIGTERM)
        running.communicate(timeout=60)
    assert not (idir / PACKED).exists()


def test_a_reinstall_stops_while_venv_pip_runs(unpacked, tmp_path, wheelhouse):
    """eb --rebuild takes the same lock before it removes the module file, moves the user software aside and wipes
    the install dir: while venv-pip runs, it stops with a clear message and changes nothing."""
    inst, idir = unpacked
    slow, started = slow_step(tmp_path, 'pip')
    running = start_venv_pip(inst, wheelhouse, slow)
    try:
        wait_for(started.exists, 'venv-pip to run pip')
        before = sorted(str(p.relative_to(idir)) for p in idir.rglob('*'))
        proc = inst.eb(inst.root / 'easyconfigs' / 'Demo-1.0.eb', '--rebuild', check=False)
    finally:
        os.kill(running.pid, signal.SIGTERM)
        running.communicate(timeout=60)
    assert proc.returncode != 0
    assert ('%s is changing %s: run eb again when it is done. Nothing was changed.' % (HOLDER % running.pid, idir)
            in proc.stdout + proc.stderr)
    assert sorted(str(p.relative_to(idir)) for p in idir.rglob('*')) == before
    # the module is still there
    assert 'venv/demo' in inst.module_shell('Demo/1.0', 'echo "$SINGULARITYENV_VIRTUAL_ENV"').stdout


def test_an_install_dir_that_is_not_yours(unpacked):
    """Another user's install dir, which they may read but not write: venv-pip and make-squashfs say so before
    anything else."""
    require_other_users()
    inst, idir = unpacked
    for command in ('venv-pip install lumi-later', 'make-squashfs'):
        proc = inst.module_shell('Demo/1.0', command, check=False, user=OUTSIDER)
        assert proc.returncode == 1
        hint = '; venv-pip install --user adds packages for you alone' if command.startswith('venv-pip') else ''
        assert proc.stderr == '%s: error: %s is not writable for you: only whoever installed the module can ' \
            'change it%s\n' % (command.split()[0], idir, hint)


@pytest.mark.needs('image-src')
def test_commands_that_only_read_run_directly(packed, wheelhouse):
    """list, freeze with a general option before it, install --dry-run: straight against the packed venv, without
    the lock (held here by someone else) and without a new SquashFS file."""
    inst, idir = packed
    before = sha256(idir / SQUASHFS)
    holder = spawn(['flock', str(idir / '.user-software.lock'), 'sleep', '120'], start_new_session=True)
    try:
        wait_for((idir / '.user-software.lock').exists, 'the lock')
        out = inst.module_shell('Demo/1.0', 'timeout 60 venv-pip list --format=freeze\n'
                                            'timeout 60 venv-pip --timeout 30 freeze\n'
                                            'timeout 60 venv-pip install --dry-run --no-index '
                                            '--find-links=%s lumi-later' % wheelhouse)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # (flock and its sleep)
        holder.wait()
    assert out.stdout.count('lumi-base==1.0') == 2 and 'Would install lumi-later-1.0' in out.stdout
    assert 'waiting' not in out.stderr and 'has the change' not in out.stdout
    assert sha256(idir / SQUASHFS) == before


def test_in_a_laif_module(tmp_path, laif_sif, laif_wheels, eb_version):
    """The recommended image family: the container is started with singularity run, the image's Python is the venv
    /opt/venv. A package that needs one of the image's is installed next to it, without a copy."""
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    inst, idir, _ = install_laif(tmp_path / 'install', laif_sif, laif_wheels, eb_version=eb_version)
    extra = tmp_path / 'wheels'
    extra.mkdir()
    write_wheel(extra, 'laif-extra', requires=['laif-base'], code='from laif_base import VERSION as BASE\n')
    out = inst.module_shell(LAIF_MODULE, 'venv-pip install --no-index --find-links=%s laif-extra\n'
                                         'python -c "import laif_extra; print(laif_extra.__file__, laif_extra.BASE)"\n'
                                         'venv-pip list --format=freeze' % extra).stdout
    assert 'Requirement already satisfied: laif-base in /opt/venv/lib/' in out
    assert '/user-software/venv/pytorch/lib/python3.11/site-packages/laif_extra/__init__.py 1.0\n' in out
    assert {'laif-extra==1.0', 'laif-base==1.0', 'laif-top==1.0'} <= set(out.split())
    # packed where the runtime can, the change a layer
    assert ('user-software.packed has the change as a layer' in out) == SQUASHFS_WORKS


def squashfs_modes(squashfs):
    """{path in the SquashFS file: permission string} (unsquashfs -ll)."""
    listing = subprocess.run(['unsquashfs', '-ll', str(squashfs)], capture_output=True, text=True, check=True)
    return {line.split()[-1]: line.split()[0] for line in listing.stdout.splitlines()
            if line.startswith(('-', 'd')) and 'squashfs-root' in line}


@pytest.mark.needs('image-src')
def test_what_venv_pip_adds_is_readable_for_all_under_umask_077(packed, wheelhouse):
    """Others of a project read a shared install: what venv-pip adds is readable for them, whatever the umask."""
    inst, idir = packed
    inst.module_shell('Demo/1.0', 'umask 077\nvenv-pip install -q --no-index --find-links=%s lumi-later' % wheelhouse)
    added = {path: mode for path, mode in squashfs_modes(idir / CHANGES).items()
             if 'lumi_later' in path}
    assert added and all(mode[7] == 'r' for mode in added.values()), added


@pytest.mark.needs('image-src')
def test_a_venv_pip_that_changes_nothing_keeps_the_file(packed):
    """pip install of what is installed already: the SquashFS file is not packed again, and venv-pip says so."""
    inst, idir = packed
    before = (idir / PACKED).lstat(), (idir / SQUASHFS).stat()
    proc = inst.module_shell('Demo/1.0', 'venv-pip install --no-index lumi-base')
    after = (idir / PACKED).lstat(), (idir / SQUASHFS).stat()
    assert [(stat.st_ino, stat.st_mtime_ns) for stat in after] == [(stat.st_ino, stat.st_mtime_ns) for stat in before]
    assert len(generations(idir)) == 1
    assert 'venv-pip: nothing changed in /user-software/venv/demo' in proc.stdout
    assert 'has the change' not in proc.stdout


@pytest.mark.needs('image-src')
def test_venv_pip_refuses_while_both_copies_exist(packed, wheelhouse):
    """After unmake-squashfs the venv is there twice: venv-pip changes neither, and says how to go on."""
    inst, idir = packed
    before = sha256(idir / SQUASHFS)
    proc = inst.module_shell('Demo/1.0', 'unmake-squashfs >/dev/null\nvenv-pip install --no-index --find-links=%s '
                             'lumi-later' % wheelhouse, check=False)
    assert proc.returncode == 1
    assert 'both %s and %s exist' % (idir / PACKED, idir / 'user-software') in proc.stderr
    assert sha256(idir / SQUASHFS) == before
    assert not list((idir / 'user-software').rglob('lumi_later'))


@pytest.mark.needs('image-src')
def test_the_module_names_the_state_through_the_link_and_its_commands_pin_it(packed, tmp_path, wheelhouse):
    """The module names the packed venv's files through the link (new jobs see a change without a reload); a command
    of the module gives the runtime the files of the generation the link names when it starts (never the base of
    one state and the layer of another; an empty layer left out), the user's own overlay first, as the module set
    it."""
    inst, idir = packed
    shown = fake_command(tmp_path / 'show', 'singularity', 'echo "$APPTAINER_OVERLAY"\necho "$SINGULARITY_OVERLAY"\n')
    user_overlay = tmp_path / 'mine.img'
    user_overlay.write_bytes(b'')
    give(tmp_path, inst.user)
    script = 'echo "$APPTAINER_OVERLAY"\nPATH=%s:$PATH python -c pass\n' % shown
    first = inst.module_shell('Demo/1.0', script, pre='export APPTAINER_OVERLAY=%s:ro' % user_overlay).stdout
    generation = (idir / PACKED).resolve()
    through = '%s:ro,%s/%s:ro,%s/%s:ro' % (user_overlay, idir, SQUASHFS, idir, CHANGES)
    pinned = '%s:ro,%s/user-software.squashfs:ro' % (user_overlay, generation)  # (its layer is empty: left out)
    assert first.splitlines() == [through, pinned, pinned]
    # after a change, with the module as loaded before: the new generation, with its layer
    second = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later >/dev/null\n' % ' '.join(
        local_wheels(wheelhouse)) + script).stdout
    generation = (idir / PACKED).resolve()
    pinned = '%s/user-software.squashfs:ro,%s/user-software.changes.squashfs:ro' % (generation, generation)
    assert second.splitlines() == [through.split(',', 1)[1], pinned, pinned]


def not_seen(path, bind):
    """What venv-pip says of a path pip was given that the container does not see, with the bind it advises."""
    return ("venv-pip: pip runs in the container, which does not see %s: it sees the host's paths that the runtime "
            "binds (your home, the current directory, /tmp, and SINGULARITY_BINDPATH's). Bind it (export "
            "SINGULARITY_BINDPATH=%s,$SINGULARITY_BINDPATH APPTAINER_BINDPATH=%s,$APPTAINER_BINDPATH) and run "
            "venv-pip again\n" % (path, bind, bind))


@pytest.mark.needs('image-src')
def test_a_requirements_file_the_container_does_not_see_is_named(packed, wheelhouse):
    """pip runs in the container: a requirements file on a host path that the runtime does not bind is missing there
    (issue 39 L: pip said so, with no word of why): after pip's own error, venv-pip names the file and says how to
    bind it; bound as it says, the same command works."""
    inst, idir = packed
    unbound = Path(tempfile.mkdtemp(prefix='lumi-ct-unbound-', dir='/srv'))
    try:
        (unbound / 'requirements.txt').write_text('lumi-later\n')
        give(unbound, inst.user)
        install = 'venv-pip install %s -r %s' % (' '.join(local_wheels(wheelhouse)), unbound / 'requirements.txt')
        proc = inst.module_shell('Demo/1.0', install, check=False)
        assert proc.returncode != 0
        assert not_seen(unbound / 'requirements.txt', unbound) in proc.stderr, proc.stderr
        proc = inst.module_shell('Demo/1.0', 'export SINGULARITY_BINDPATH=%s,$SINGULARITY_BINDPATH '
                                 'APPTAINER_BINDPATH=%s,$APPTAINER_BINDPATH\n%s' % (unbound, unbound, install))
        assert 'has the change' in proc.stdout and 'does not see' not in proc.stderr
    finally:
        shutil.rmtree(unbound)


@pytest.mark.needs('image-src')
def test_a_wheel_directory_the_container_does_not_see_is_named_in_an_unpacked_venv(unpacked, wheelhouse):
    """In an unpacked venv (every LAIF easyconfig's, the plain AMD one's) too, a --find-links directory on a host
    path that the runtime does not bind is named after pip's failure, and the bind that venv-pip advises is that
    directory's, not its parent's (binding /srv for /srv/wheels would hide the image's own /srv)."""
    inst, idir = unpacked
    unbound = Path(tempfile.mkdtemp(prefix='lumi-ct-unbound-', dir='/srv'))
    try:
        shutil.copytree(wheelhouse, unbound / 'wheels')
        give(unbound, inst.user)
        proc = inst.module_shell('Demo/1.0', 'venv-pip install --no-index --find-links=%s lumi-later' % (
            unbound / 'wheels'), check=False)
        assert proc.returncode != 0
        assert not_seen(unbound / 'wheels', unbound / 'wheels') in proc.stderr, proc.stderr
    finally:
        shutil.rmtree(unbound)


@pytest.mark.needs('image-src')
def test_a_deleted_venv_is_reported(packed):
    """The packed venv deleted (its link, or the SquashFS file in it): module load and the wrappers say so, and what
    to do."""
    inst, idir = packed
    (idir / SQUASHFS).unlink()
    proc = inst.module_shell('Demo/1.0', 'python -c pass')
    said = ' '.join(proc.stderr.split())
    assert said.count('the virtual environment') == 2 and 'is missing' in said and 'eb --rebuild' in said
    (idir / PACKED).unlink()
    proc = inst.module_shell('Demo/1.0', 'python -c pass')
    said = ' '.join(proc.stderr.split())
    assert said.count('the virtual environment') == 2 and 'is missing' in said and 'eb --rebuild' in said


def test_commands_of_the_image_and_of_venv_pip_packages_run_with_the_venv(unpacked, wheelhouse):
    """The image's console script runs with the venv's Python, before and after venv-pip; a package installed with
    venv-pip that has a command of that name replaces it, and uninstalling it brings the image's back."""
    inst, idir = unpacked
    report = '%s lumi_base' % IMAGE_TOOL_COMMAND
    out = inst.module_shell('Demo/1.0', 'singularity exec "$SIF" ' + report).stdout
    assert json.loads(out) == ['/user-software/venv/demo', {'lumi_base': 'imported'}]
    inst.module_shell('Demo/1.0', 'venv-pip install -q --no-index --find-links=%s lumi-report' % wheelhouse)
    assert inst.module_shell('Demo/1.0', 'singularity exec "$SIF" ' + report).stdout == 'from the venv\n'
    inst.module_shell('Demo/1.0', 'venv-pip uninstall -y -q lumi-report')
    out = inst.module_shell('Demo/1.0', 'singularity exec "$SIF" ' + report).stdout
    assert json.loads(out) == ['/user-software/venv/demo', {'lumi_base': 'imported'}]


def test_a_package_command_named_python_leaves_the_venvs_python_alone(unpacked, tmp_path):
    """A wheel with a console script named like the venv's Python (python, python3): pip would replace the venv's
    python with a script that starts itself for ever. venv-pip leaves these commands out, says so naming the
    package, and the venv's Python works, also after the package is uninstalled."""
    venv_pip_of_a_package_command_named_python(*unpacked, tmp_path)


@pytest.mark.needs('image-src')
def test_a_package_command_named_python_in_a_packed_venv(packed, tmp_path):
    venv_pip_of_a_package_command_named_python(*packed, tmp_path)


def venv_pip_of_a_package_command_named_python(inst, idir, tmp_path):
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    write_wheel(wheels, 'lumi-python', code='def main():\n    print("lumi-python runs")\n',
                commands={'python': 'lumi_python:main', 'python3': 'lumi_python:main', 'lumi-py': 'lumi_python:main'})
    proc = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-python\n'
                                         'python -c "import sys, lumi_python; print(sys.prefix)"\n'
                                         'singularity exec "$SIF" python3 -c "import sys; print(sys.prefix)"\n'
                                         'singularity exec "$SIF" lumi-py' % ' '.join(local_wheels(wheels)))
    assert proc.stderr.splitlines() == [
        "venv-pip: warning: the command %s of lumi-python was left out: it would replace the virtual "
        "environment's own Python" % name for name in ('python', 'python3')]
    ran = [line for line in proc.stdout.splitlines() if not line.startswith('venv-pip: ')]  # (packed: replaced)
    assert ran == ['/user-software/venv/demo', '/user-software/venv/demo', 'lumi-python runs']
    out = inst.module_shell('Demo/1.0', 'venv-pip uninstall -y -q lumi-python\n'
                                        'python -c "import sys; print(sys.prefix)"')
    assert out.stdout.splitlines()[-1] == '/user-software/venv/demo'


@pytest.mark.needs('image-src')
def test_commands_that_only_read_see_the_venv_as_it_is_now(unpacked):
    """venv-pip list and freeze without a reload after make-squashfs and rm -r user-software (the module bound the
    directory), and after unmake-squashfs and rm user-software.packed (it bound the file): they use what is
    there now."""
    inst, idir = unpacked
    proc = inst.module_shell('Demo/1.0', 'make-squashfs >/dev/null\nrm -r "$CONTAINERROOT/user-software"\n'
                                         'venv-pip list --format=freeze\n'
                                         'module load Demo/1.0\n'
                                         'unmake-squashfs >/dev/null\nrm "$CONTAINERROOT/user-software.packed"\n'
                                         'venv-pip freeze\n')
    assert proc.stdout.split().count('lumi-base==1.0') == 2
    assert proc.stderr == ''


# The image's commands that pip did not write (entry points with extras, calling a class's method), one with a
# space in its name, and a script in a bin/ of a package's own, which is no command.
ODD_CODE = '''import json
import sys


def main():
    print(json.dumps([sys.prefix, "main"]))


class Tool:
    @staticmethod
    def run():
        print(json.dumps([sys.prefix, "Tool.run"]))
'''
ODD_ENTRY_POINTS = {'extras-tool': 'odd_commands:main [cli]', 'dotted-tool': 'odd_commands:Tool.run'}


@pytest.fixture(scope='module')
def odd_commands(tmp_path_factory, demo_sif):
    """Demo/1.0 (venv unpacked) from an image whose distribution odd-commands has ODD_ENTRY_POINTS, the command
    'my tool' in /usr/bin, and odd_commands/bin/inner-tool in its RECORD."""
    require_runtime()
    require_tools('mksquashfs', 'siftool', 'flock')
    root = tmp_path_factory.mktemp('odd-commands')
    site = root / 'tree' / 'usr' / 'lib' / 'python3' / 'dist-packages'
    (root / 'tree' / 'usr' / 'bin').mkdir(parents=True)
    write_distribution(site, 'odd-commands', '1.0', ODD_CODE, ('my tool',), IMAGE_PYTHON, ODD_ENTRY_POINTS)
    inner = site / 'odd_commands' / 'bin' / 'inner-tool'
    inner.parent.mkdir()
    inner.write_text('#!%s\nprint("inner")\n' % IMAGE_PYTHON)
    inner.chmod(0o755)
    with open(next(site.glob('odd_commands-*.dist-info')) / 'RECORD', 'a') as record:
        record.write('odd_commands/bin/inner-tool,,\n')
    sif = make_test_sif(root / 'odd.sif', trees={'/usr': root / 'tree' / 'usr'})
    return install_demo(root / 'install', sif, squash_user_software=False)


def test_image_entry_points_with_extras_or_a_method(odd_commands):
    """`tool = mod:main [cli]` and `tool = mod:Tool.run` become commands that run with the venv's Python."""
    inst, idir = odd_commands
    out = inst.module_shell('Demo/1.0', 'singularity exec "$SIF" extras-tool\nsingularity exec "$SIF" dotted-tool')
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        ['/user-software/venv/demo', 'main'], ['/user-software/venv/demo', 'Tool.run']]


def test_image_commands_only_from_the_environments_scripts_dir(odd_commands):
    """A script in a bin/ inside a package is not a command; those of /usr/bin are."""
    inst, idir = odd_commands
    out = inst.module_shell('Demo/1.0', 'singularity exec "$SIF" sh -c "command -v inner-tool || echo none"\n'
                                        'singularity exec "$SIF" sh -c "command -v %s"' % IMAGE_TOOL_COMMAND)
    assert out.stdout.splitlines() == ['none', '/user-software/venv/demo/bin/%s' % IMAGE_TOOL_COMMAND]


def test_an_image_command_with_a_space_in_its_name(odd_commands, wheelhouse):
    """'my tool' runs with the venv's Python, and stays one of the image's commands after a venv-pip."""
    inst, idir = odd_commands
    manifest = idir / 'user-software' / 'venv' / 'demo' / 'bin' / '.image-commands'
    assert 'my tool' in manifest.read_text().splitlines()
    out = inst.module_shell('Demo/1.0', 'venv-pip install -q %s lumi-later\nsingularity exec "$SIF" "my tool"'
                            % ' '.join(local_wheels(wheelhouse)))
    assert json.loads(out.stdout) == ['/user-software/venv/demo', 'main']
    listed = manifest.read_text().splitlines()
    assert 'my tool' in listed and 'my' not in listed


HELP_COMMANDS = ['start-shell', 'venv-pip', 'list-packages', 'make-squashfs', 'unmake-squashfs',
                 'jupyter-container-kernel']


@pytest.mark.needs('image-src')
def test_commands_answer_help_and_refuse_arguments_they_do_not_take(packed):
    """-h and --help of every command of the module say how to use it (their own usage, not bash's or pip's, which
    name commands that do not exist outside the container: what it does, its options, where it works, what it never
    touches), and change nothing; make-squashfs and unmake-squashfs, which take no arguments, stop at one before
    anything is done (unmake-squashfs --help used to unpack the venv), venv-pip without a pip command before it
    starts a container (pip's own help named 'python -m pip')."""
    inst, idir = packed
    before = sorted(str(path.relative_to(idir)) for path in idir.rglob('*'))
    runs = [(command, option) for command in HELP_COMMANDS for option in ('--help', '-h')]
    runs += [('jupyter-container-kernel', 'install --help'), ('jupyter-container-kernel', 'remove -h')]
    runs += [('make-squashfs', '--force'), ('unmake-squashfs', 'here'), ('venv-pip', '')]
    script = ''.join('echo "== %s|%s"; %s %s; echo "status $?"\n' % (run * 2) for run in runs)
    proc = inst.module_shell('Demo/1.0', script, check=False)
    assert proc.stdout.count("== ") == len(runs), proc.stdout
    for answer in proc.stdout.split("== ")[1:]:
        command, option = answer.split('\n')[0].split('|')
        said, status = answer.split('\n', 1)[1].rsplit('status ', 1)
        if option.endswith(('--help', '-h')):
            # what it does, its options, where it works, what it never touches
            assert (said.startswith('usage: %s' % command), status) == (True, '0\n'), (command, option, said)
            assert '\noptions:\n' in said and '\nwhere: ' in said and '\nnever touches: ' in said, said
        else:
            assert (said, status) == ('', '1\n'), (command, option, said)
    assert proc.stderr.splitlines()[-3:] == [
        "make-squashfs: error: make-squashfs takes no arguments, '--force' was given (usage: make-squashfs; -h says "
        "more)",
        "unmake-squashfs: error: unmake-squashfs takes no arguments, 'here' was given (usage: unmake-squashfs; -h "
        "says more)",
        "venv-pip: error: no pip command given (usage: venv-pip <pip command> [pip's options]; venv-pip -h says "
        "more)"], proc.stderr
    assert sorted(str(path.relative_to(idir)) for path in idir.rglob('*')) == before
