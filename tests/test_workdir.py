"""venv-pip's work dir, on node-local storage that others share (/dev/shm, /tmp) or in a project's TMPDIR: what it
finds there of others is left alone and never followed, a setgid place works, and where pip runs out of space it
works in the next place. One EasyBuild version: the script is the same under both."""
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from support import require_other_users, require_runtime, require_tools
from testkit.install import (RUNTIME, RUNTIME_SETUID, Installation, base_env, demo_easyconfig, fake_command,
                             install_demo, local_wheels, package_index, run, spawn, write_wheel)
from testkit.users import MEMBER, OUTSIDER, OWNER, PROJECT_GROUP, give, project_gid, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.system]  # the system tier: other users

MODULE = 'Demo/1.0'


@pytest.fixture(autouse=True)
def other_users():
    """Others plant things where venv-pip works; only root can be them (and mount a small file system)."""
    require_other_users()


@pytest.fixture(scope='module')
def packed(tmp_path_factory, demo_sif, wheelhouse):
    """Demo/1.0 with its venv packed in layers: (Installation, install dir)."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'flock')
    return install_demo(tmp_path_factory.mktemp('workdir') / 'install', demo_sif, pip_requirements=['lumi-base'],
                        squash_user_software=True, pip_install_options=local_wheels(wheelhouse))


def place(path, mode, group=None):
    """A directory where venv-pip may work: root's, of `group` (a gid) if given, with mode."""
    path.mkdir()
    os.chown(path, 0, group if group is not None else 0)
    path.chmod(mode)
    return path


def venv_pip(inst, tmpdir, args, check=True, path=()):
    env = base_env([str(p) for p in path])
    env['TMPDIR'] = str(tmpdir)
    return inst.module_shell(MODULE, 'venv-pip %s' % args, env=env, check=check)


@pytest.mark.needs('image-src')
def test_a_setgid_tmpdir_of_the_project(packed, tmp_path, wheelhouse):
    """A project's TMPDIR is setgid to the project's group (here with the sticky bit, as venv-pip works only where
    others cannot rename its work dir): the overlay in a work dir there used to fail to mount (the group is not
    mapped in the runtime's user namespace), and venv-pip blamed pip."""
    inst, idir = packed
    tmpdir = place(tmp_path / 'project-tmp', 0o3770, group=project_gid())
    out = venv_pip(inst, tmpdir, 'install %s lumi-later' % ' '.join(local_wheels(wheelhouse))).stdout
    assert 'user-software.packed has the change as a layer' in out
    assert not list(tmpdir.iterdir())


def modes(top):
    """{path: (mode, owner, content)} of what is under top, links not followed."""
    found = {}
    for path in [top] + sorted(top.rglob('*')):
        info = path.lstat()
        found[path] = (stat.S_IMODE(info.st_mode), info.st_uid, path.read_text() if path.is_file() else None)
    return found


def plant(who, path, kind, target=None, record=None):
    """What `who` puts at path: a link to target, a directory (with a record of a venv-pip run in it), or a FIFO."""
    script = {'link': 'ln -s "$2" "$1"', 'directory': 'mkdir -m 0700 "$1"', 'fifo': 'mkfifo "$1"'}[kind]
    if record:
        script += ' && echo "$3" > "$1/.venv-pip-run"'
    run(['bash', '-c', script, 'plant', str(path), str(target), record or ''], user=who)
    return path


def swap_what_appears(directory, tmp_path):
    """A member's process that watches `directory` (inotify, as a real attacker would) and puts a directory of their
    own, with a .pth file in it, in the place of each venv-pip work dir that appears there, keeping the original
    aside: what venv-pip would then write into is the member's."""
    require_tools('inotifywait')
    script = (
        'inotifywait -q -m -e create -e moved_to --format %f "$1" | while IFS= read -r name; do\n'
        '    case "$name" in venv-pip.*.aside | venv-pip.*.mine) continue ;; venv-pip.*) ;; *) continue ;; esac\n'
        '    mkdir -m 2777 "$1/$name.mine" && echo "import os" >"$1/$name.mine/members.pth" &&\n'
        '        mv -T "$1/$name" "$1/$name.aside" && mv -T "$1/$name.mine" "$1/$name" && echo "swapped $name"\n'
        'done\n')
    watcher = spawn(['bash', '-c', script, 'swap', str(directory)], user=MEMBER, stdout=subprocess.PIPE, text=True,
                    start_new_session=True)
    time.sleep(1)  # (inotifywait is watching)
    return watcher


@pytest.mark.needs('image-src')
def test_a_tmpdir_where_members_can_rename_is_not_used(packed, tmp_path, wheelhouse):
    """A project's TMPDIR on LUMI's /scratch (the project's group may write, no sticky bit), and the user's own
    directory in it: another member can rename what venv-pip makes there and put their own in its place (they did,
    watching with inotify: their .pth file went into a venv they may not change). venv-pip does not work there, says
    why in one line, and works in the next place; the member's swaps find nothing to swap."""
    inst, idir = packed
    project_tmp = place(tmp_path / 'project-tmp', 0o2770, group=project_gid())
    own = project_tmp / 'owners'
    own.mkdir()
    give(own, user(OWNER))
    own.chmod(0o700)
    watcher = swap_what_appears(project_tmp, tmp_path)
    try:
        install = 'install %s lumi-many-files' % ' '.join(local_wheels(wheelhouse))
        for tmpdir, args in [(project_tmp, install), (own, 'uninstall -y lumi-many-files')]:
            proc = venv_pip(inst, tmpdir, args)
            assert 'has the change' in proc.stdout
            assert proc.stderr.count('venv-pip: not working in %s: other users can rename or replace what you make '
                                     'in %s (which the group %s may write in, without the sticky bit)' % (
                                         tmpdir, project_tmp, PROJECT_GROUP)) == 1, proc.stderr
            assert sorted(path.name for path in project_tmp.iterdir()) == ['owners']
            assert not list(own.iterdir())
        listing = inst.module_shell(MODULE, 'python -c "import sys; print(sys.path)"; list-packages --format=freeze')
        assert 'members' not in listing.stdout and 'lumi-base==' in listing.stdout
    finally:
        os.killpg(watcher.pid, signal.SIGKILL)
    assert 'swapped' not in watcher.communicate()[0]


@pytest.mark.needs('image-src')
def test_a_tmpdir_that_an_acl_opens_to_a_member_is_not_used(packed, tmp_path, wheelhouse):
    """The owner's own TMPDIR (0700 and the owner's own group) with a POSIX ACL that lets a member write: a member
    watching it swapped venv-pip's work dir for theirs, and their EXT3 image with a .pth went into the venv, since the
    mode bits and /etc/group said nobody else could. The kernel's answer counts (tests/test_others_can_write.py):
    venv-pip does not work there, says why in one line, and works in the next place."""
    require_tools('setfacl')
    inst, idir = packed
    acl_tmp = tmp_path / 'acl-tmp'
    acl_tmp.mkdir()
    give(acl_tmp, user(OWNER))
    acl_tmp.chmod(0o700)
    run(['setfacl', '-m', 'u:%s:rwx' % MEMBER, str(acl_tmp)], user=None)
    wheel = write_wheel(tmp_path, 'lumi-acl').parent
    watcher = swap_what_appears(acl_tmp, tmp_path)
    try:
        for args in ('install %s lumi-acl' % ' '.join(local_wheels(wheel)), 'uninstall -y lumi-acl'):
            proc = venv_pip(inst, acl_tmp, args)
            assert 'has the change' in proc.stdout
            assert proc.stderr.count('venv-pip: not working in %s: other users can rename or replace what you make '
                                     'in %s (whose ACL lets the user %s write in it, without the sticky bit)' % (
                                         acl_tmp, acl_tmp, MEMBER)) == 1, proc.stderr
            assert not list(acl_tmp.iterdir())
    finally:
        os.killpg(watcher.pid, signal.SIGKILL)
    assert 'swapped' not in watcher.communicate()[0]


def record_names(*places):
    """inotifywait, as root, printing the path of every name made or moved in below places (recursively) until killed:
    the process, whose output is read after killpg."""
    require_tools('inotifywait')
    watcher = spawn(['inotifywait', '-q', '-m', '-r', '-e', 'create', '-e', 'moved_to', '--format', '%w%f'] +
                    [str(place) for place in places], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                    start_new_session=True)
    time.sleep(1)  # (inotifywait is watching)
    return watcher


def recorded(watcher):
    time.sleep(0.5)
    os.killpg(watcher.pid, signal.SIGKILL)
    return watcher.communicate()[0].splitlines()


@pytest.mark.needs('image-src')
def test_pip_keeps_its_temporary_files_in_the_work_dir(packed, tmp_path, wheelhouse):
    """pip installing from an index (a local one, over HTTP) downloads and unpacks in its temporary directory: that
    is the work dir's private one, never the caller's TMPDIR, for a change and for a command that changes nothing
    (download, install --dry-run). In a project's TMPDIR (group-writable, no sticky bit) a member swapped the owner's
    pip-unpack-* for a wheel with a .pth of theirs, which went into the venv: inotify sees no name made there now. In
    the owner's own TMPDIR, only venv-pip's work dirs, with pip's temporary files in them."""
    inst, idir = packed
    project_tmp = place(tmp_path / 'project-tmp', 0o2770, group=project_gid())
    own, downloads = tmp_path / 'own', tmp_path / 'downloads'
    for directory in (own, downloads):
        directory.mkdir()
        give(directory, user(OWNER))
    wheels = tmp_path / 'wheels'
    shutil.copytree(wheelhouse, wheels)
    write_wheel(wheels, 'lumi-indexed')
    with package_index(wheels) as index:
        index = ' '.join(index)
        watcher = record_names(project_tmp, own)
        try:
            for tmpdir, args in [(project_tmp, 'install %s lumi-indexed' % index),
                                 (project_tmp, 'download -d %s %s lumi-top' % (downloads, index)),
                                 (project_tmp, 'install --dry-run %s lumi-top' % index),
                                 (project_tmp, 'uninstall -y lumi-indexed'),
                                 (own, 'install %s lumi-indexed' % index), (own, 'uninstall -y lumi-indexed')]:
                proc = venv_pip(inst, tmpdir, args)
                assert 'WARNING' not in proc.stderr, proc.stderr
        finally:
            names = recorded(watcher)
    assert sorted(path.name for path in downloads.iterdir()) == [
        'lumi_base-1.0-py3-none-any.whl', 'lumi_top-1.0-py3-none-any.whl']
    assert not [name for name in names if name.startswith(str(project_tmp))], names
    tops = {os.path.relpath(name, own).split('/')[0] for name in names}
    assert tops and all(top.startswith('venv-pip.') for top in tops), tops
    assert [name for name in names if re.search(r'/venv-pip\.[^/]*/tmp/pip-unpack-[^/]*$', name)], names


@pytest.fixture
def outside_the_binds():
    """A directory of root's in /opt (which the runtime does not bind into the container), and in it one of the
    owner's, 0700: a TMPDIR the container cannot see, as /run/user/<uid> or a node-local /local on a cluster."""
    top = Path(tempfile.mkdtemp(prefix='lumi-ct-unbound-', dir='/opt'))
    top.chmod(0o755)
    (top / 'tmp').mkdir()
    give(top / 'tmp', user(OWNER))
    (top / 'tmp').chmod(0o700)
    yield top / 'tmp'
    shutil.rmtree(top)


@pytest.mark.needs('image-src')
def test_a_tmpdir_the_container_cannot_see(packed, outside_the_binds, tmp_path):
    """A TMPDIR outside the container's binds is where venv-pip works: the change (under a setuid runtime, the copy
    out of the EXT3 image too) and pip's temporary files are there, bound into the container, and the change is made
    without a word about it."""
    inst, idir = packed
    wheel = write_wheel(tmp_path, 'lumi-unbound').parent
    for args in ('install %s lumi-unbound' % ' '.join(local_wheels(wheel)), 'uninstall -y lumi-unbound'):
        proc = venv_pip(inst, outside_the_binds, args)
        assert 'has the change' in proc.stdout, proc.stderr
        assert 'warning' not in proc.stderr.lower(), proc.stderr
        assert not list(outside_the_binds.iterdir())
        layer = idir / 'user-software.packed' / 'user-software.changes.squashfs'
        listing = run(['unsquashfs', '-d', '', '-lc', str(layer)], user=None).stdout
        assert set(path.split('/')[1] for path in listing.split('\n') if path.count('/') > 1) <= {'user-software'}


@pytest.mark.needs('image-src')
def test_a_writable_overlay_of_the_users_is_left_out_of_a_change(packed, tmp_path, wheelhouse):
    """The user's own writable overlay in SINGULARITY_OVERLAY (README invites one: a directory in a user namespace,
    an EXT3 image under a setuid runtime) made every change fail ("more than one writable overlay"): a change leaves
    it out, saying so in one line, and the user's containers still have it, with the change."""
    inst, idir = packed
    if RUNTIME_SETUID:
        overlay = tmp_path / 'mine.img'
        run([RUNTIME, 'overlay', 'create', '--size', '64', str(overlay)], env=dict(base_env(), TMPDIR=str(tmp_path)),
            user=None)
    else:
        overlay = tmp_path / 'mine'
        overlay.mkdir()
    give(overlay, user(OWNER))
    env = dict(base_env(), SINGULARITY_OVERLAY=str(overlay), APPTAINER_OVERLAY=str(overlay))
    wheel = write_wheel(tmp_path, 'lumi-overlaid').parent
    install = 'venv-pip install %s lumi-overlaid' % ' '.join(local_wheels(wheel))
    proc = inst.module_shell(MODULE, install + '\necho "$SINGULARITY_OVERLAY"\npython -c "import lumi_overlaid"\n'
                             'venv-pip uninstall -y lumi-overlaid', env=env)
    assert proc.stderr.count('venv-pip: leaving your writable overlay %s out of the change\'s containers' % overlay) \
        == 2, proc.stderr
    assert 'has the change' in proc.stdout and '\n%s,' % overlay in proc.stdout


@pytest.mark.once_only('a writable EXT3 image is the setuid runtime\'s (in a user namespace the change gets a '
                       'directory, which needs no mkfs.ext3)', in_setuid_run=True)
@pytest.mark.needs('image-src')
def test_without_mkfs_ext3_a_change_is_a_repack(packed, tmp_path, wheelhouse):
    """A node without mkfs.ext3 (venv-pip makes the change's EXT3 image with it, and else the runtime, which needs it
    too): venv-pip stopped. It repacks the whole venv instead, which needs no writable layer, saying why in one
    line."""
    inst, idir = packed
    shim = fake_command(tmp_path / 'shim', 'singularity', (
        'if [ "$1 $2" = "overlay create" ]; then echo "FATAL:   mkfs.ext3 not found on this node" >&2; exit 255; fi\n'
        'exec %s "$@"\n') % RUNTIME)
    fake_command(shim, 'mkfs.ext3', 'echo "mkfs.ext3: not found" >&2\nexit 127\n')
    wheel = write_wheel(tmp_path, 'lumi-no-mkfs').parent
    proc = venv_pip(inst, tmp_path, 'install %s lumi-no-mkfs' % ' '.join(local_wheels(wheel)), path=[shim])
    assert 'has the change' in proc.stdout, proc.stderr
    if RUNTIME_SETUID:
        assert proc.stderr.startswith('venv-pip: cannot make a writable image for the change in %s/venv-pip.' %
                                      tmp_path), proc.stderr
        assert proc.stderr.endswith(' (FATAL:   mkfs.ext3 not found on this node): repacking the whole venv '
                                    'instead\n') and proc.stderr.count('\n') == 1, proc.stderr
    venv_pip(inst, tmp_path, 'uninstall -y lumi-no-mkfs')


def test_the_installs_pip_keeps_its_temporary_files_private(tmp_path, demo_sif, wheelhouse):
    """The install's own pip (pip_requirements from an index, over HTTP) keeps what it downloads and unpacks in a
    private directory of the install's, not in EasyBuild's TMPDIR where that is in a project's directory
    (group-writable, no sticky bit): inotify sees EasyBuild's own names made there, none of pip's."""
    project_tmp = place(tmp_path / 'project-tmp', 0o2770, group=project_gid())
    inst = Installation(tmp_path / 'eb')
    inst.add_source(demo_sif, 'demo.sif')
    with package_index(wheelhouse) as index:
        ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(
            pip_requirements=['lumi-top'], pip_install_options=index, squash_user_software=False))
        watcher = record_names(project_tmp)
        try:
            inst.eb(ec, env=inst.env(EASYBUILD_TMPDIR=str(project_tmp)))
        finally:
            names = recorded(watcher)
    assert names and not [name for name in names if '/pip-' in name], names
    listing = inst.module_shell(MODULE, 'list-packages --format=freeze').stdout
    assert 'lumi-top==1.0' in listing and 'lumi-base==1.0' in listing


@pytest.mark.needs('image-src')
def test_what_others_plant_where_venv_pip_works_is_left_alone(packed, tmp_path, wheelhouse):
    """In /dev/shm (sticky, anyone writes) an outsider, in a project's TMPDIR (setgid, group-writable, sticky) a
    member, plant links to the victim's files under the names of venv-pip's work dirs (as earlier versions named them
    too, with a process that has ended), a directory of their own with a record of a run in it, a FIFO: venv-pip
    works, the victim's files keep their modes, and what others planted stays. Only what a killed run of the victim
    left (a directory of theirs with its record, also as earlier versions wrote it) goes; one of theirs without a
    record stays."""
    inst, idir = packed
    host, dead = socket.gethostname(), 4194304  # above the kernel's largest process id
    victim = tmp_path / 'victims-data'
    (victim / 'sub').mkdir(parents=True)
    (victim / 'sub' / 'notes').write_text('mine\n')
    give(victim, user(OWNER))
    (victim / 'sub' / 'notes').chmod(0o400)
    (victim / 'sub').chmod(0o500)
    before = modes(victim)
    places = {OUTSIDER: place(tmp_path / 'shm', 0o1777),
              MEMBER: place(tmp_path / 'project-tmp', 0o3775, group=project_gid())}
    for (who, tmpdir), package in zip(places.items(), ['lumi-needs-wheel', 'lumi-top']):
        planted = [plant(who, tmpdir / ('venv-pip.%s.%d.AbC123' % (host, dead)), 'link', victim),
                   plant(who, tmpdir / 'venv-pip.XyZ789', 'link', victim),
                   plant(who, tmpdir / 'venv-pip.dir123', 'directory', record='%s %s %d 1' % (who, host, dead)),
                   plant(who, tmpdir / 'venv-pip.fifo12', 'fifo')]
        own = plant(OWNER, tmpdir / 'venv-pip.mine12', 'directory')  # the victim's, without a record
        left = plant(OWNER, tmpdir / 'venv-pip.left12', 'directory', record='%s %s %d 1' % (OWNER, host, dead))
        older = plant(OWNER, tmpdir / 'venv-pip.older1', 'directory', record='%s %d 1' % (host, dead))  # (earlier)
        out = venv_pip(inst, tmpdir, 'install %s %s' % (' '.join(local_wheels(wheelhouse)), package)).stdout
        assert 'has the change' in out
        assert modes(victim) == before
        assert all(os.path.lexists(path) for path in planted + [own]), who
        assert not left.exists() and not older.exists()
        assert sorted(tmpdir.iterdir()) == sorted(planted + [own])


# What venv-pip counts for a change's writable layer before pip writes: under a setuid runtime an EXT3 image, whose
# journal takes 134 MiB of the work place at once on a disk (on a tmpfs, a few: mkfs.ext3 leaves holes there)
JOURNAL = (136 << 20) if RUNTIME_SETUID else 0


def venv_pip_in_a_small_tmpdir(inst, tmp_path, kib, args):
    """venv-pip with these arguments and a TMPDIR of its own, a tmpfs of `kib` KiB: its process, what it left in the
    TMPDIR, and the TMPDIR."""
    small = place(tmp_path / 'small', 0o755)
    run(['mount', '-t', 'tmpfs', '-o', 'size=%dk,mode=1777' % kib, 'tmpfs', str(small)], user=None)
    try:
        return venv_pip(inst, small, args), list(small.iterdir()), small
    finally:
        run(['umount', str(small)], user=None)


@pytest.mark.once_only('a writable EXT3 image is the setuid runtime\'s (in a user namespace the change gets a '
                       'directory, which has no journal)', in_setuid_run=True)
@pytest.mark.needs('image-src')
def test_a_place_without_room_for_the_ext3_journal_is_not_used(packed, tmp_path):
    """A work place on a disk (ext4, as a node's /tmp) with room for the change that venv-pip estimated, but not for
    the EXT3 image's journal (about 134 MiB, written at once): venv-pip stopped ("cannot make a writable layer").
    It counts the journal, and works in the next place."""
    inst, idir = packed
    small = place(tmp_path / 'disk', 0o755)
    image = tmp_path / 'disk.img'
    run(['truncate', '-s', '120M', str(image)], user=None)
    run(['mkfs.ext4', '-q', '-m', '0', str(image)], user=None)
    run(['mount', '-o', 'loop', str(image), str(small)], user=None)
    try:
        small.chmod(0o1777)
        wheel = write_wheel(tmp_path, 'lumi-journal').parent
        proc = venv_pip(inst, small, 'install %s lumi-journal' % ' '.join(local_wheels(wheel)))
        assert 'has the change' in proc.stdout and not [path for path in small.iterdir() if path.name != 'lost+found']
    finally:
        run(['umount', str(small)], user=None)
    venv_pip(inst, tmp_path, 'uninstall -y lumi-journal')


@pytest.mark.needs('image-src')
def test_where_pip_runs_out_of_space_venv_pip_works_in_the_next_place(packed, tmp_path):
    """TMPDIR has the room that venv-pip estimates, but not for what pip installs: venv-pip says so, and works in
    the next place (here /dev/shm); nothing is left in either."""
    inst, idir = packed
    wheels = tmp_path / 'big-wheels'
    wheels.mkdir()
    size = (96 << 20) + JOURNAL  # (more than the room: where the journal takes less of it, as on a tmpfs)
    write_wheel(wheels, 'lumi-big', modules={'zeros.bin': '\0' * size})
    proc, left, small = venv_pip_in_a_small_tmpdir(inst, tmp_path, (72 << 10) + (JOURNAL >> 10),
                                                   'install --no-index --find-links=%s lumi-big' % wheels)
    assert 'venv-pip: pip ran out of space in %s; trying the next place\n' % small in proc.stderr
    assert 'has the change' in proc.stdout
    assert not left
    assert not [path for path in os.listdir('/dev/shm') if path.startswith('venv-pip.')
                and os.stat(os.path.join('/dev/shm', path), follow_symlinks=False).st_uid == user(OWNER).uid]
    assert inst.module_shell(MODULE, 'python -c "import lumi_big, os; print(os.path.getsize(os.path.join('
                             'os.path.dirname(lumi_big.__file__), \'zeros.bin\')))"').stdout == '%d\n' % size


@pytest.mark.needs('image-src')
def test_where_putting_a_layered_change_together_runs_out_of_space_venv_pip_works_in_the_next_place(packed, tmp_path):
    """TMPDIR has room for what pip installs, not for that and the earlier layer unpacked beside it, which the new
    layer holds too (issue 40 E: venv-pip stopped, "cannot unpack ...; nothing was changed", and its copy of pip's
    output took that room twice): it works in the next place, as where pip runs out of space."""
    inst, idir = packed
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    write_wheel(wheels, 'lumi-earlier', modules={'data.txt': os.urandom(6 << 20).hex()})  # 12 MiB, a layer still
    venv_pip(inst, place(tmp_path / 'tmp', 0o1777), 'install --no-index --find-links=%s lumi-earlier' % wheels)
    earlier = unpacked_bytes(idir / 'user-software.packed' / 'user-software.changes.squashfs')
    need = earlier * 2 + (64 << 20) + JOURNAL  # (what venv-pip estimates a layered change needs)
    write_wheel(wheels, 'lumi-zeros', modules={'zeros.bin': '\0' * (need + (4 << 20))})
    proc, left, small = venv_pip_in_a_small_tmpdir(inst, tmp_path, (need >> 10) + (8 << 10),
                                                   'install --no-index --find-links=%s lumi-zeros' % wheels)
    assert (' ran out of space in %s; trying the next place\n' % small) in proc.stderr
    assert 'has the change as a layer' in proc.stdout and not left
    assert inst.module_shell(MODULE, 'python -c "import lumi_earlier, lumi_zeros"').returncode == 0


@pytest.mark.needs('image-src')
def test_a_container_that_does_not_start_is_not_pip_failing(packed, tmp_path, wheelhouse):
    """The runtime cannot mount the overlay in the work dir (its exit code 255): venv-pip says that, where, and that
    TMPDIR chooses the place; not that pip failed."""
    inst, idir = packed
    refuses = fake_command(tmp_path / 'refuses', 'singularity', (
        'case "${APPTAINER_OVERLAY:-}" in *venv-pip.*) echo "FATAL: no overlay here" >&2; exit 255 ;; esac\n'
        'exec %s "$@"\n') % RUNTIME)
    tmpdir = place(tmp_path / 'tmp', 0o1777)
    proc = venv_pip(inst, tmpdir, 'install %s lumi-top' % ' '.join(local_wheels(wheelhouse)), check=False,
                    path=[refuses])
    assert proc.returncode == 255
    last = proc.stderr.splitlines()[-1]
    assert last.startswith('venv-pip: error: the container did not start on the work dir %s/venv-pip.' % tmpdir)
    assert last.endswith('(the runtime says why above); the venv was not changed. TMPDIR chooses where venv-pip works '
                         'first: set it to another place to work there')
    assert 'pip failed' not in proc.stderr
    assert not list(tmpdir.iterdir())


@pytest.mark.needs('image-src')
def test_a_command_not_found_in_the_container_is_not_a_container_that_did_not_start(packed, tmp_path, wheelhouse):
    """The runtime's 255 is also its status for a command not found in the container: where the container starts
    (venv-pip tries it with true), venv-pip says that, not that the work dir is at fault."""
    inst, idir = packed
    not_found = fake_command(tmp_path / 'not-found', 'singularity', (
        'for arg in "$@"; do [ "$arg" != -c ] || { echo \'FATAL: "python": executable file not found\' >&2; '
        'exit 255; }; done\nexec %s "$@"\n') % RUNTIME)
    tmpdir = place(tmp_path / 'tmp', 0o1777)
    proc = venv_pip(inst, tmpdir, 'install %s lumi-top' % ' '.join(local_wheels(wheelhouse)), check=False,
                    path=[not_found])
    assert proc.returncode == 255
    assert proc.stderr.splitlines()[-1] == (
        "venv-pip: error: the container starts, but the command in it ended with exit code 255, the runtime's "
        "status for a command it did not find there (the runtime says which above); the venv was not changed")
    assert 'did not start' not in proc.stderr and 'pip failed' not in proc.stderr
    assert not list(tmpdir.iterdir())


def unpacked_bytes(*squashfs_files):
    """What the files of the SquashFS files take unpacked (as venv-pip estimates it)."""
    total = 0
    for path in squashfs_files:
        if path.exists():
            listing = run(['unsquashfs', '-lls', str(path)], user=None).stdout
            total += sum(int(line.split()[2]) for line in listing.splitlines() if line.startswith('-'))
    return total


@pytest.mark.needs('image-src')
def test_where_pip_runs_out_of_space_in_a_full_repack_venv_pip_works_in_the_next_place(packed, tmp_path):
    """The same where venv-pip repacks the whole venv (here: the venv as one SquashFS file, without a layer): the
    work dir has the room venv-pip estimates for the venv, not for what pip installs; it works in the next place."""
    inst, idir = packed
    generation = (idir / 'user-software.packed').resolve()
    (generation / 'user-software.changes.squashfs').unlink()  # (as make-squashfs leaves it where no layers stack)
    need = unpacked_bytes(generation / 'user-software.squashfs') * 11 // 10 + (64 << 20)
    wheels = tmp_path / 'big-wheels'
    wheels.mkdir()
    write_wheel(wheels, 'lumi-big-repacked', modules={'zeros.bin': '\0' * (96 << 20)})
    proc, left, small = venv_pip_in_a_small_tmpdir(inst, tmp_path, (need >> 10) + (16 << 10),
                                                   'install --no-index --find-links=%s lumi-big-repacked' % wheels)
    assert 'venv-pip: pip ran out of space in %s; trying the next place\n' % small in proc.stderr
    assert 'user-software.packed has the change; new jobs use it' in proc.stdout  # (repacked: not a layer)
    assert not left
    assert inst.module_shell(MODULE, 'python -c "import lumi_big_repacked"').returncode == 0
