"""generate-ec in a project's shared directory, run by the project's users (testkit.users): what it writes (a spec's
new entries with inspect/releases --add, easyconfigs with -o) goes through a temporary file made exclusively beside
the target and renamed, never through a name another user can plant; a file it replaces keeps its mode, owner and
group (as far as the user may keep them); a new file gets the mode the umask gives; a read-only spec is refused.

These tests run generate-ec as the users, with this checkout's code (PYTHONPATH is carried to them), so they need
root to switch users (testkit.users.SWITCHING)."""
import grp
import os
import pwd
import stat

import pytest

from generator_support import FULL_SBOM, LAIF_NAME, PYTORCH_FILES, PYTORCH_SPEC, generate_ec, make_image
from support import generate_ec_command, require_other_users
from testkit.install import run
from testkit.specs import SHARED_SPEC
from testkit.users import MEMBER, OWNER, PROJECT_GROUP, give, user


@pytest.fixture(autouse=True)
def other_users():
    """Every test here switches between the test users."""
    require_other_users()


RELEASE = 'lumi-multitorch-u24r64f21m43t29-20260225_144743'
IMAGE = 'lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif'
PLANTED = 'spec.yaml.tmp-generate-ec'  # the fixed name generate-ec wrote through
SPEC = SHARED_SPEC
BASHRC = 'export SECRET=only-mine\n'


def add_command(how, central):
    """generate-ec's arguments that add the image to spec.yaml: by inspect or by releases."""
    if how == 'inspect':
        return ['inspect', str(central / RELEASE / IMAGE), '--spec', 'spec.yaml']
    return ['releases', str(central), '--spec', 'spec.yaml', '--add']


def generate_ec_as(who, args, cwd, umask='002', check=False):
    """Run the generate-ec console script as the test user `who` with this umask (PYTHONPATH, and so this
    checkout's generator, carried over)."""
    return run(['bash', '-c', 'umask %s && exec "$@"' % umask, 'generate-ec', generate_ec_command()] + list(args),
               cwd=str(cwd), user=who, check=check)


def owned(path, who, group, mode):
    """Make path `who`'s, of the group named `group`, with `mode`, as if they had made it."""
    give(path, user(who), grp.getgrnam(group).gr_gid)
    os.chmod(str(path), mode)


def ownership(path):
    """(owner, group, mode) of path (not followed)."""
    info = os.lstat(str(path))
    return pwd.getpwuid(info.st_uid).pw_name, grp.getgrgid(info.st_gid).gr_name, stat.S_IMODE(info.st_mode)


@pytest.fixture
def central(tmp_path):
    """A central directory with one release, whose full image the spec does not have (no .md: the checksum is
    computed)."""
    directory = tmp_path / 'containers' / RELEASE
    directory.mkdir(parents=True)
    os.replace(make_image(tmp_path, IMAGE, FULL_SBOM), str(directory / IMAGE))
    return tmp_path / 'containers'


@pytest.fixture
def project(tmp_path):
    """The project's directory (the owner's, group-writable for the project, setgid), with the spec in it, 0664."""
    directory = tmp_path / 'project'
    directory.mkdir()
    owned(directory, OWNER, PROJECT_GROUP, 0o2775)
    (directory / 'spec.yaml').write_text(SPEC)
    owned(directory / 'spec.yaml', OWNER, PROJECT_GROUP, 0o664)
    return directory


@pytest.fixture
def bashrc(tmp_path):
    """A file of the owner's that nobody else may read or write (their ~/.bashrc)."""
    home = tmp_path / 'home'
    home.mkdir()
    (home / '.bashrc').write_text(BASHRC)
    owned(home / '.bashrc', OWNER, OWNER, 0o600)
    return home / '.bashrc'


@pytest.mark.parametrize('how', ['inspect', 'releases'])
def test_add_writes_through_no_name_another_member_can_plant(how, project, bashrc, central):
    run(['ln', '-s', str(bashrc), str(project / PLANTED)], user=MEMBER)
    proc = generate_ec_as(OWNER, add_command(how, central), project)
    assert proc.returncode == 0, proc.stderr
    assert bashrc.read_text() == BASHRC
    assert ownership(bashrc) == (OWNER, OWNER, 0o600)
    spec = project / 'spec.yaml'
    assert not spec.is_symlink() and spec.is_file()
    assert ownership(spec) == (OWNER, PROJECT_GROUP, 0o664)
    assert spec.read_text().startswith(SPEC) and IMAGE in spec.read_text()
    assert sorted(os.listdir(str(project))) == ['spec.yaml', PLANTED]  # nothing left behind


@pytest.mark.parametrize('how', ['inspect', 'releases'])
def test_add_keeps_the_group_and_mode_of_the_spec(how, tmp_path, central):
    """A member adds to the owner's spec in a directory without the setgid bit: the spec stays the project's, and
    group-writable although the member's umask is 022 (its owner is the member now: only root can keep that)."""
    directory = tmp_path / 'project'
    directory.mkdir()
    owned(directory, OWNER, PROJECT_GROUP, 0o775)
    (directory / 'spec.yaml').write_text(SPEC)
    owned(directory / 'spec.yaml', OWNER, PROJECT_GROUP, 0o664)
    proc = generate_ec_as(MEMBER, add_command(how, central), directory, umask='022')
    assert proc.returncode == 0, proc.stderr
    assert ownership(directory / 'spec.yaml') == (MEMBER, PROJECT_GROUP, 0o664)
    assert IMAGE in (directory / 'spec.yaml').read_text()


def test_add_by_root_keeps_the_owner(project, central, monkeypatch, capsys):
    """Root (here in the test's process) is the one user who can keep another user's ownership."""
    (project / 'spec.yaml').chmod(0o640)
    monkeypatch.chdir(str(project))
    code, out, err = generate_ec(add_command('releases', central), capsys)
    assert code == 0, err
    assert ownership(project / 'spec.yaml') == (OWNER, PROJECT_GROUP, 0o640)


@pytest.mark.parametrize('how', ['inspect', 'releases'])
@pytest.mark.parametrize('case', ['read-only', 'symlink'])
def test_add_refuses_a_read_only_spec_or_a_link(case, how, project, central):
    """Refused before the image is read (here it is not a SIF image at all), and nothing is written."""
    (central / RELEASE / IMAGE).write_text('not an image\n')
    spec = project / 'spec.yaml'
    if case == 'read-only':
        spec.chmod(0o444)
        problem = 'spec.yaml: read-only (mode 0444): generate-ec does not replace a file you may not write; ' \
            'make it writable first (chmod u+w)'
    else:
        os.replace(str(spec), str(project / 'real.yaml'))
        run(['ln', '-s', 'real.yaml', str(spec)], user=OWNER)
        problem = 'spec.yaml: a symbolic link (to real.yaml): generate-ec replaces files, not links; give the file ' \
            'itself'
    before = sorted(os.listdir(str(project)))
    proc = generate_ec_as(OWNER, add_command(how, central), project)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == problem
    assert sorted(os.listdir(str(project))) == before
    if case == 'read-only':
        assert ownership(spec) == (OWNER, PROJECT_GROUP, 0o444) and spec.read_text() == SPEC
    else:
        assert os.readlink(str(spec)) == 'real.yaml' and (project / 'real.yaml').read_text() == SPEC


def test_another_members_read_only_spec_names_its_owner(project, central):
    """A spec that another member keeps 0644 in the group's directory: refused, with whom to ask (chmod u+w is not
    the member's to run)."""
    (central / RELEASE / IMAGE).write_text('not an image\n')
    spec = project / 'spec.yaml'
    spec.chmod(0o644)
    proc = generate_ec_as(MEMBER, add_command('releases', central), project)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        'spec.yaml: read-only (mode 0644): generate-ec does not replace a file you may not write; ask its owner, '
        '%s, to make it writable for the group (chmod g+w)' % OWNER)
    assert ownership(spec) == (OWNER, PROJECT_GROUP, 0o644) and spec.read_text() == SPEC


def test_easyconfigs_get_the_mode_the_umask_gives(project, tmp_path):
    """New easyconfigs get the umask's mode (and the setgid directory's group); an easyconfig that is rewritten
    keeps its mode and group."""
    proc = generate_ec_as(OWNER, ['-o', 'out', PYTORCH_SPEC], project, umask='022', check=True)
    out = project / 'out'
    assert sorted(os.listdir(str(out))) == sorted(PYTORCH_FILES), proc.stdout
    for name in PYTORCH_FILES:
        assert ownership(out / name) == (OWNER, PROJECT_GROUP, 0o644)
    proc = generate_ec_as(OWNER, ['-o', 'team', PYTORCH_SPEC], project, umask='002', check=True)
    for name in PYTORCH_FILES:
        assert ownership(project / 'team' / name) == (OWNER, PROJECT_GROUP, 0o664)

    stale = project / 'team' / PYTORCH_FILES[0]
    stale.write_text('# out of date\n')
    proc = generate_ec_as(MEMBER, ['-o', 'team', PYTORCH_SPEC], project, umask='022', check=True)
    assert proc.stdout.splitlines() == [os.path.join('team', name) for name in PYTORCH_FILES]
    assert ownership(stale) == (MEMBER, PROJECT_GROUP, 0o664)
    assert stale.read_text() == (project / 'out' / PYTORCH_FILES[0]).read_text()
    assert sorted(os.listdir(str(project / 'team'))) == sorted(PYTORCH_FILES)


def test_easyconfigs_are_not_written_through_a_planted_link(project, bashrc):
    out = project / 'out'
    out.mkdir()
    owned(out, OWNER, PROJECT_GROUP, 0o2775)
    run(['ln', '-s', str(bashrc), str(out / PYTORCH_FILES[1])], user=MEMBER)
    proc = generate_ec_as(OWNER, ['-o', 'out', PYTORCH_SPEC], project)
    assert proc.returncode == 2
    assert proc.stderr == 'generate-ec: cannot write out/%s: a symbolic link (to %s): generate-ec replaces files, ' \
        'not links; give the file itself; nothing was written\n' % (PYTORCH_FILES[1], bashrc)
    assert sorted(os.listdir(str(out))) == [PYTORCH_FILES[1]]
    assert bashrc.read_text() == BASHRC and ownership(bashrc) == (OWNER, OWNER, 0o600)


def test_the_image_was_added(project, central):
    """(What the tests above add is a real entry: the spec generates the image's easyconfig.)"""
    assert generate_ec_as(OWNER, add_command('inspect', central), project).returncode == 0
    proc = generate_ec_as(OWNER, ['-o', 'out', 'spec.yaml'], project, check=True)
    assert os.path.join('out', LAIF_NAME) in proc.stdout.splitlines()
