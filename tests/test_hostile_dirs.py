"""Hostile directories (issue 32): every command that writes in a place others can write (a project's shared install,
a project's Jupyter prefix or easyconfig directory, the TMPDIR where venv-pip works) is run once while inotifywait
records every name it creates there, then again while another real user has planted, at each of those names that is
fixed and at each variant of them that a planter can know in advance, a link to a file of the victim, a FIFO and a
directory. Each time the victim's files stay as they were (content, mode, owner), the command succeeds or stops with
a message (never hangs: each runs under a timeout), and the project's install still works.

The recording is inotify's (inotifywait -m -r -e create,moved_to, Debian's inotify-tools), not strace's: it sees what
appears in the watched places whoever makes it and however (a rename, mksquashfs, a process the runtime starts),
costs the commands nothing, and needs no ptrace of another user's processes. A name from mktemp (random, made
exclusively) cannot be known in advance: the test checks that the random part names no host or process, plants at
a variant of it (the same name with other characters) to show that nothing is taken from a name alone, and skips
the rest. Names the commands write inside a directory they made themselves can be planted only while that directory
is writable for others: test_a_new_directory_is_the_commands_own_until_it_is_whole plants there, at the moment
inotify shows the directory.

Who: lumi-owner is the victim, lumi-member plants in the project's (group-writable) install dir and Jupyter prefix,
lumi-outsider in the world-writable sticky directory the test makes for TMPDIR (as /tmp, /dev/shm). The names
venv-pip built from the host and its process before (case A) are planted too, for the next 50 process ids of this
host (another host's would meet only a run there: no name the commands make now has a host or process in it).
One shared install for the file (about 20 s); the whole file costs about 65 s (130 s on a busy 2-core machine)."""
import fnmatch
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from generator_support import FULL_SBOM, PYTORCH_SPEC, make_image
from support import require_other_users, require_tools
from test_generator_shared import IMAGE, RELEASE, SPEC, add_command, generate_ec_as
from test_shared_install import MODULE, easyconfig, eb, install
from testkit.install import (EB_SITE, LUMI_MODULES_TREE, LUMI_SOFTWARE_TREE, base_env, fake_command, run, spawn,
                             wait_for, write_wheel)
from testkit.users import MEMBER, OUTSIDER, OWNER, give, project_gid, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too
pytestmark = [pytestmark, pytest.mark.system]  # the system tier: other users

TIMEOUT = 180  # seconds any one command may take here; a hang is a failure, not a wait until CI's time limit


def prefix_names():
    """What the install and a reinstall create in the project's EasyBuild prefix, where the install dir is made (the
    trees of plain EasyBuild, or LUMI's EasyBuild-user's: EB_SITE)."""
    software = '/'.join(LUMI_SOFTWARE_TREE) if EB_SITE == 'lumi' else 'software'
    modules = '/'.join(LUMI_MODULES_TREE) if EB_SITE == 'lumi' else 'modules/all'
    classes = modules + '/devel' if EB_SITE == 'lumi' else 'modules/devel'  # (the module class link's, EasyBuild's)
    parents = [software.rsplit('/', i)[0] for i in range(software.count('/') + 1)] + [
        modules.rsplit('/', i)[0] for i in range(modules.count('/') + 1)] + [classes]
    names = {parent: 'fixed' for parent in parents}
    names.update({
        software + '/Demo/1.0': 'fixed',
        software + '/Demo/1.0/*': 'inside',
        # a date: predictable, and taken by another name if it is there (-2, -3, ...)
        software + '/Demo/1.0.previous-????????-??????*': 'fixed',
        software + '/Demo/1.0.user-software.packed.backup-????????-??????*': 'fixed',
        software + '/Demo': 'fixed',
        modules + '/Demo': 'fixed', modules + '/Demo/1.0.lua': 'fixed',
        'ebfiles_repo*': 'fixed',
        # EasyBuild's own: its lock (a directory it makes with mkdir, stopping if it is there), the module class link
        software + '/.locks': 'fixed', software + '/.locks/*_Demo_1.0.lock': 'fixed',
        classes + '/Demo': 'fixed', classes + '/Demo/1.0.lua': 'fixed',
    })
    return names


# What the commands create in the shared places, as fnmatch patterns of the path from the place: 'fixed' names
# a planter knows; 'random' ones come from mktemp ('??????') or Python's mkstemp ('*'), inside which 'inside' names
# are fixed but in a directory only its maker can write (test_a_new_directory_is_the_commands_own_until_it_is_whole)
NAMES = {
    'install dir': {
        'user-software.packed': 'fixed',
        'user-software': 'fixed',
        '.user-software.lock': 'fixed',
        '.user-software.lock.holder': 'fixed',
        '.user-software.lock.new.??????': 'random',
        '.user-software.lock.holder.new.??????': 'random',
        '.user-software.link.??????': 'random',
        '.user-software.packed.??????': 'random',
        '.user-software.packed.??????/*': 'inside',
    },
    'TMPDIR': {
        'venv-pip.??????': 'random',
        'venv-pip.??????/*': 'inside',
        # pip's own in the container (Python's tempfile: random, made exclusively)
        'pip-*': 'random',
        '????????': 'random',
    },
    'Jupyter prefix': {
        'share': 'fixed',
        'share/jupyter': 'fixed',
        'share/jupyter/kernels': 'fixed',
        'share/jupyter/kernels/demo-1.0': 'fixed',
        'share/jupyter/kernels/.demo-1.0.new.??????': 'random',
        'share/jupyter/kernels/.demo-1.0.new.??????/kernel.json': 'inside',
    },
    'easyconfig dir': {
        'PyTorch-*.eb': 'fixed',
        '.PyTorch-*.eb.*.tmp-generate-ec': 'random',
        'spec.yaml': 'fixed',
        '.spec.yaml.*.tmp-generate-ec': 'random',
    },
    'prefix': prefix_names(),
}
BASHRC = 'export SECRET=only-mine\n'


@pytest.fixture(autouse=True)
def other_users():
    require_other_users()
    require_tools('inotifywait', 'timeout')


class Recording:
    """inotifywait on the directories `places` ({label: path}), recursively: the paths (from their place) of what is
    created or renamed into them while it runs, with whether each is a directory."""

    def __init__(self, places):
        self.places = {label: Path(path) for label, path in places.items()}

    def __enter__(self):
        self.watcher = subprocess.Popen(
            ['inotifywait', '-m', '-r', '-e', 'create,moved_to', '--format', '%e\t%w%f']
            + [str(path) for path in self.places.values()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while 'Watches established' not in self.watcher.stderr.readline():
            assert self.watcher.poll() is None, 'inotifywait did not start'
        return self

    def __exit__(self, *exc):
        time.sleep(0.2)  # (the last events)
        self.watcher.terminate()
        out, _ = self.watcher.communicate(timeout=30)
        self.created = {}
        for line in out.splitlines():
            events, path = line.split('\t', 1)
            for label, place in self.places.items():
                if path.startswith(str(place) + '/'):
                    self.created.setdefault(label, {})[path[len(str(place)) + 1:]] = 'ISDIR' in events
        return False


def classify(label, created):
    """{name: (pattern, kind)} of the names created in the place `label` (NAMES); fails for a name the table does not
    know, or one that names this host or a process (as venv-pip's '.tmp.<host>.<pid>' did: case A)."""
    kinds = {}
    unknown = [name for name in created if not any(fnmatch.fnmatchcase(name, pattern) for pattern in NAMES[label])]
    assert not unknown, '%s: %s created there, which this test does not know: add them to NAMES, and plants' % (
        label, ', '.join(sorted(unknown)))
    for name in created:
        kind = next((pattern, kind) for pattern, kind in NAMES[label].items() if fnmatch.fnmatchcase(name, pattern))
        host = r'(^|[./-])%s([./-]|$)' % re.escape(socket.gethostname())
        # (a name the table has as it is, such as LUMI's stack LUMI-24.03, is known in advance by everyone anyway)
        literal = not any(char in kind[0] for char in '*?[')
        assert kind[1] == 'inside' or literal or not (re.search(host, name) or re.search(r'\.\d{2,}(\.|$)', name)), (
            '%s: %s is named after the host or a process: another user can know it in advance' % (label, name))
        kinds[name] = kind
    return kinds


def variant(pattern):
    """A name of the pattern of a random name that the command did not make: what a planter could try."""
    return pattern.replace('?', 'P').replace('*', 'Planted')


def plant(who, path, kind, victim):
    """What `who` puts at path: a link to the victim's ~/.bashrc (a file) or data directory, a FIFO, a directory."""
    script = {'link': 'ln -s -- "$2" "$1"', 'fifo': 'mkfifo -m 0666 -- "$1"', 'directory': 'mkdir -m 0777 -- "$1"'}
    target = victim / ('data' if kind == 'link to dir' else '.bashrc')
    run(['bash', '-c', script[kind.split()[0]], 'plant', str(path), str(target)], user=who)


def plants_for(label, created, kinds):
    """[(path from the place, what)] to plant at: each fixed name (a link of the right kind, a FIFO, a directory,
    rotated over the names) and a variant of each random one; none inside the command's own directories."""
    wanted = []
    for name, (pattern, kind) in sorted(classify(label, created).items()):
        if kind == 'inside':
            continue
        target = name if kind == 'fixed' else variant(pattern)
        link = 'link to dir' if created[name] else 'link'
        wanted.append((target, [link, 'fifo', 'directory'][kinds % 3]))
        kinds += 1
    return wanted


def victims_files(tmp_path):
    """The victim's home as the plants reach it: ~/.bashrc, and data/ with a file only the victim may read."""
    home = tmp_path / 'victim'
    (home / 'data').mkdir(parents=True)
    (home / '.bashrc').write_text(BASHRC)
    (home / 'data' / 'results').write_text('42\n')
    give(home, user(OWNER))
    (home / 'data' / 'results').chmod(0o400)
    (home / 'data').chmod(0o700)
    home.chmod(0o755)
    return home


def state_of(top):
    """{path: (mode, owner, group, content)} under top, links not followed."""
    found = {}
    for path in [top] + sorted(top.rglob('*')):
        info = path.lstat()
        found[path] = (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid,
                       path.read_bytes() if stat.S_ISREG(info.st_mode) else None)
    return found


class Project:
    """The shared install (OWNER's, the project's, group-writable), the victim's home, and the places others write:
    TMPDIR (sticky, anyone writes), the project's Jupyter prefix and easyconfig directory (group-writable)."""

    def __init__(self, root, inst, idir, wheels):
        self.root, self.inst, self.idir, self.wheels = root, inst, idir, wheels
        self.victim = victims_files(root)
        self.before = state_of(self.victim)
        self.tmpdir = root / 'tmp'
        self.tmpdir.mkdir()
        self.tmpdir.chmod(0o1777)
        self.prefix = root / 'jupyter-prefix'
        self.easyconfigs = root / 'easyconfigs-out'
        for shared in (self.prefix, self.easyconfigs):
            shared.mkdir()
            os.chown(shared, user(OWNER).uid, project_gid())
            shared.chmod(0o2775)
        self.planted = []

    def places(self, *labels):
        where = {'install dir': self.idir, 'TMPDIR': self.tmpdir, 'Jupyter prefix': self.prefix,
                 'easyconfig dir': self.easyconfigs, 'prefix': self.inst.prefix}
        return {label: where[label] for label in labels}

    def command(self, script, who=OWNER, umask='002'):
        """A module command as `who` under a timeout: (exit code, stdout, stderr)."""
        env = base_env()
        env['TMPDIR'] = str(self.tmpdir)
        proc = self.inst.shell('umask %s\nmodule load %s\ntimeout -k 10 %d bash -c %s' % (
            umask, MODULE, TIMEOUT, _quote(script)), env=env, check=False, user=who)
        return proc

    def pip(self, args, who=OWNER):
        """venv-pip with args; an install from the test's wheels only."""
        if args.startswith('install '):
            args = 'install --no-index --find-links=%s %s' % (self.wheels, args[len('install '):])
        return self.command('venv-pip %s' % args, who)

    def plant(self, label, wanted):
        """Plant [(name, what)] in the place `label`, as whoever may write there but the victim."""
        place = self.places(label)[label]
        who = OUTSIDER if label == 'TMPDIR' else MEMBER
        for name, what in wanted:
            path = place / name
            if not os.path.lexists(path) and os.path.isdir(path.parent) and not path.parent.is_symlink():
                plant(who, path, what, self.victim)
                self.planted.append(path)

    def clear(self):
        """The plants go (with whatever the victim's command put into a planted directory)."""
        for path in self.planted:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif os.path.lexists(path):
                path.unlink()
        self.planted = []

    def check(self, proc, what):
        """The victim's files are as they were; the command succeeded or said why not; the install works."""
        assert state_of(self.victim) == self.before, '%s changed the victim\'s files' % what
        assert proc.returncode != 124, '%s hung (killed after %d s)' % (what, TIMEOUT)
        if proc.returncode != 0:
            assert re.search(r'(error|cannot|not |already exists)', proc.stderr + proc.stdout), (
                '%s failed without a message: %s' % (what, proc.stderr[-2000:]))
        self.clear()
        works = self.inst.module_shell(MODULE, 'python -c "import lumi_base; print(lumi_base.NAME)"', user=MEMBER,
                                       check=False)
        assert works.stdout == 'base\n', '%s: the install no longer works: %s' % (what, works.stderr[-2000:])


def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.fixture(scope='module')
def project(tmp_path_factory, demo_sif, wheelhouse):
    """The shared install, with its install recorded: (Project, {label: created})."""
    require_other_users()  # (a module's fixture is made before the autouse one of each test)
    require_tools('inotifywait', 'timeout')
    root = tmp_path_factory.mktemp('hostile')
    wheels = root / 'wheels'
    shutil.copytree(wheelhouse, wheels)
    # jupyter-container-kernel install checks only that ipykernel imports: a stand-in (the real one is
    # test_jupyter_kernel's)
    write_wheel(wheels, 'ipykernel', code='', modules={'kernelapp.py': ''})
    installed = root / 'project'
    (installed / 'prefix').mkdir(parents=True)
    with Recording({'prefix': installed / 'prefix'}) as recording:
        inst, idir = install(installed, demo_sif, wheels, squash=True, umask='002')
    project = Project(root, inst, idir, wheels)
    assert project.pip('install ipykernel').returncode == 0
    return project, recording.created


def record_and_plant(project, labels, run_once, rounds=3, reset=lambda turn: None):
    """Run run_once() recorded, then `rounds` times with plants (their kinds rotated over the names) at what the
    recording saw in the places `labels`; check each run (Project.check). reset(turn) before each run puts back what
    the run before made (where the plants are to go). The recorded names, per place."""
    reset(-1)
    with Recording(project.places(*labels)) as recording:
        proc = run_once()
    assert proc.returncode == 0, proc.stderr[-3000:]
    project.check(proc, 'the recorded run')
    for kinds in range(rounds):
        reset(kinds)
        for label in labels:
            project.plant(label, plants_for(label, recording.created.get(label, {}), kinds))
        proc = run_once()
        project.check(proc, 'a run with plants %s' % kinds)
    return recording.created


@pytest.mark.needs('image-src')
def test_venv_pip_install_and_uninstall(project):
    """venv-pip install (a layer) and uninstall: in the install dir the member, in TMPDIR the outsider plant; also
    at the lock and its holder record, replaced by the member, and at the names earlier versions used (case A)."""
    project, _ = project
    created = record_and_plant(project, ['install dir', 'TMPDIR'], lambda: project.pip('install lumi-later'),
                               rounds=1)
    assert ('venv-pip.??????', 'random') in classify('TMPDIR', created['TMPDIR']).values(), created
    record_and_plant(project, ['install dir', 'TMPDIR'], lambda: project.pip('uninstall -y lumi-later'), rounds=1)
    legacy = ['user-software.squashfs.tmp.%s.%d' % (socket.gethostname(), pid) for pid in next_pids(50)]
    for what in ('fifo', 'directory', 'link'):
        project.plant('install dir', [(name, what) for name in legacy])
        for fixed in ('.user-software.lock', '.user-software.lock.holder'):
            replace(project, project.idir / fixed, what)
        proc = project.pip('install lumi-later')
        project.check(proc, 'venv-pip with a %s at the lock' % what)
        restore_lock(project)


def next_pids(count):
    last = int(Path('/proc/sys/kernel/ns_last_pid').read_text())
    return range(last + 1, last + 1 + count)


def replace(project, path, what):
    """The member puts `what` in place of the install's file at path."""
    run(['rm', '-f', '--', str(path)], user=MEMBER)
    project.plant('install dir', [(path.name, what)])


def restore_lock(project):
    """(What a member who planted at the lock would have to remove: the next command makes a new one.)"""
    for name in ('.user-software.lock', '.user-software.lock.holder'):
        path = project.idir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path) and not stat.S_ISREG(path.lstat().st_mode):
            path.unlink()


def pause_at_chmod(directory, pattern):
    """(A directory to put first on PATH, its started file, its go-on file): its chmod, once the real one has
    changed a path that matches the shell pattern, says so and waits (at most a minute) for the test to plant."""
    started, go_on = directory / 'started', directory / 'go-on'
    fake_command(directory / 'bin', 'chmod', (
        '/bin/chmod "$@" || exit\nfor arg in "$@"; do\n    case "$arg" in\n        %s)\n'
        '            if [ ! -e %s ]; then\n                : > %s\n'
        '                for _ in $(seq 600); do [ -e %s ] && break; sleep 0.1; done\n            fi ;;\n'
        '    esac\ndone\n') % (pattern, started, started, go_on))
    give(directory, user(OWNER))
    return directory / 'bin', started, go_on


def plant_inside_while_it_is_made(project, tmp_path, script, place, pattern, names):
    """Run the module command `script` as the victim; when its chmod has made a new directory of `pattern` in place
    (inotify would show it to a planter), the member plants links to the victim's ~/.bashrc at `names` in it. What
    the member could plant, and the command's result."""
    bin_dir, started, go_on = pause_at_chmod(tmp_path / 'pause', '*/' + pattern)
    env = base_env([str(bin_dir)])
    env['TMPDIR'] = str(project.tmpdir)
    command = project.inst.shell_command('umask 002\nmodule load %s\ntimeout -k 10 %d bash -c %s' % (
        MODULE, TIMEOUT, _quote(script)))
    there = set(place.glob(pattern))
    running = spawn(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    planted = []
    try:
        wait_for(lambda: started.exists() or running.poll() is not None, 'the command to make its new directory',
                 timeout=TIMEOUT)
        assert started.exists(), 'the command ended before it made its new directory: %s' % running.stderr.read()
        [new] = set(place.glob(pattern)) - there
        for name in names:
            proc = run(['ln', '-s', '--', str(project.victim / '.bashrc'), str(new / name)], user=MEMBER,
                       check=False)
            if proc.returncode == 0:
                planted.append(name)
    finally:
        go_on.touch()
        out, err = running.communicate(timeout=TIMEOUT + 30)
    return planted, subprocess.CompletedProcess(command, running.returncode, out, err)


@pytest.mark.needs('image-src')
def test_a_new_directory_is_the_commands_own_until_it_is_whole(project, tmp_path):
    """A new generation of the packed venv, and a new kernel's directory, are group-writable in a project's install
    or prefix (the umask's mode: the next member's change removes a superseded generation). Made so at once, a
    member who saw it appear could plant links at the names the command then writes into it (.generation, the
    SquashFS files, kernel.json): venv-pip's mksquashfs and chmod, and jupyter-container-kernel's kernel.json, wrote
    through them into the victim's ~/.bashrc. They stay private (mktemp's 0700) until they are whole."""
    project, _ = project
    planted, proc = plant_inside_while_it_is_made(
        project, tmp_path / 'venv-pip', 'venv-pip install --no-index --find-links=%s lumi-later' % project.wheels,
        project.idir, '.user-software.packed.??????',
        ['.generation', 'user-software.squashfs', 'user-software.changes.squashfs', '.venv-form'])
    project.check(proc, 'venv-pip with plants in its new generation (%s)' % ', '.join(planted))
    assert proc.returncode == 0, proc.stderr
    kernels = project.prefix / 'race' / 'share' / 'jupyter' / 'kernels'
    planted, proc = plant_inside_while_it_is_made(
        project, tmp_path / 'kernel', 'jupyter-container-kernel install --prefix %s' % kernels.parent.parent.parent,
        kernels, '.demo-1.0.new.??????', ['kernel.json'])
    project.check(proc, 'jupyter-container-kernel with plants in its new directory (%s)' % ', '.join(planted))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.needs('image-src')
def test_a_merge(project):
    """A member's change, then the owner's: the owner's cannot be a layer on the member's file, and venv-pip packs
    the layers and the change into one new SquashFS file."""
    project, _ = project

    def merge():
        assert project.pip('install lumi-top', who=MEMBER).returncode == 0
        return project.pip('uninstall -y lumi-top')
    record_and_plant(project, ['install dir', 'TMPDIR'], merge, rounds=1)


def remove(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


@pytest.mark.needs('image-src')
def test_unmake_and_make_squashfs(project):
    """unmake-squashfs (user-software/ from the packed venv), then make-squashfs (a new generation from it)."""
    project, _ = project
    unpacked, link = project.idir / 'user-software', project.idir / 'user-software.packed'
    record_and_plant(project, ['install dir'], lambda: project.command('unmake-squashfs'),
                     reset=lambda turn: remove(unpacked))
    if not unpacked.is_dir():  # (the last run found a plant there, and stopped)
        assert project.command('unmake-squashfs').returncode == 0
    # the unpacked venv is the one in use without the link: make-squashfs packs it
    record_and_plant(project, ['install dir'], lambda: project.command('make-squashfs'),
                     reset=lambda turn: link.unlink() if link.is_symlink() else None)
    if not link.is_symlink():
        assert project.command('make-squashfs').returncode == 0
    remove(unpacked)  # (packed again, as the other tests expect)


@pytest.mark.needs('image-src')
def test_jupyter_kernel_install_and_remove_in_a_project(project):
    """jupyter-container-kernel install, then remove, with --prefix in the project's directory: the member plants at
    share/jupyter/kernels and what is in it (each run but the last finds no share/ there; the last finds the
    kernels directory without the kernel)."""
    project, _ = project
    prefix = project.prefix
    kernels = prefix / 'share' / 'jupyter' / 'kernels'

    def reset(turn):
        remove(kernels / 'demo-1.0' if turn == 3 else prefix / 'share')
    record_and_plant(project, ['Jupyter prefix'], lambda: project.command(
        'jupyter-container-kernel install --prefix %s && jupyter-container-kernel remove --prefix %s'
        % (prefix, prefix)),
        rounds=4, reset=reset)


def test_generate_ec_writes_easyconfigs_and_adds_to_a_spec(project, tmp_path):
    """generate-ec -o into the project's group-writable directory, and inspect --add to a spec in it."""
    project, _ = project
    out = project.easyconfigs

    def reset(turn):
        for path in out.glob('*.eb'):
            path.unlink()
    record_and_plant(project, ['easyconfig dir'], lambda: generate_ec_as(OWNER, ['-o', str(out), PYTORCH_SPEC],
                                                                         tmp_path), reset=reset)
    central = tmp_path / 'containers' / RELEASE
    central.mkdir(parents=True)
    os.replace(make_image(tmp_path, IMAGE, FULL_SBOM), str(central / IMAGE))
    spec = out / 'spec.yaml'

    def fresh_spec(turn):
        spec.write_text(SPEC)
        os.chown(spec, user(OWNER).uid, project_gid())
        spec.chmod(0o664)
    record_and_plant(project, ['easyconfig dir'],
                     lambda: generate_ec_as(OWNER, add_command('inspect', central.parent), out), reset=fresh_spec)


@pytest.mark.needs('image-src')
def test_the_install_and_a_reinstall(project):
    """What the install made in the project's prefix is known (recorded by the fixture); a reinstall by the owner
    while the member has planted at the names of the day that it keeps things under (the previous installation for
    running jobs, the changed venv: a date to the second, for the next minutes) and at the fixed names that are not
    there: it goes on under other names, and leaves the plants alone."""
    project, installed = project
    classify('prefix', installed['prefix'])
    software = project.idir.parent
    now = time.time()
    stamps = [time.strftime('%Y%m%d-%H%M%S', time.localtime(now + second)) for second in range(180)]
    kinds = ['link to dir', 'fifo', 'directory']
    wanted = [('1.0.%s-%s' % (kind, stamp), kinds[i % 3]) for i, stamp in enumerate(stamps)
              for kind in ('previous', 'user-software.packed.backup')]
    demo = os.path.relpath(software, project.inst.prefix)
    project.plant('prefix', [(demo + '/' + name, what) for name, what in wanted])
    planted = list(project.planted)
    with Recording(project.places('prefix')) as recording:
        proc = eb(project.inst, easyconfig(project.inst), '--rebuild', '--group-writable-installdir', check=False)
    classify('prefix', recording.created['prefix'])
    assert all(os.path.lexists(path) for path in planted), 'the reinstall removed what the member planted'
    assert proc.returncode == 0, proc.stdout[-3000:]
    project.check(proc, 'eb --rebuild with plants')
    kept = [path for path in software.glob('1.0.*') if path.is_dir() and not path.is_symlink()]
    assert kept, 'the reinstall kept nothing of the previous installation'
