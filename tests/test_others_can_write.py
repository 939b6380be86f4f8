"""'Other users can write or rename here' as the kernel decides it: the library's others_can_replace_in (venv-pip's
work places and pip's cache, make-squashfs's, the Jupyter prefix) and its Python twin in the easyblock
(install_lock.others_can_replace_in), against the kernel itself on generated directories of the owner's: each mode,
group and POSIX ACL (named users and groups, the mask), and whether a process of another test user can in fact make a
name there. A group that lists no member but is another user's primary group (PARTNER's) counts; so do the named
entries of an ACL (Debian's acl package), unless its mask leaves them no write. No container, no EasyBuild."""
import itertools
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from singularitycontainer_src.render import Install, library_text
from support import require, require_other_users
from testkit.install import run
from testkit.users import MEMBER, OUTSIDER, OWNER, PARTNER, PROJECT_GROUP, project_gid, user

MODES = [0o700, 0o750, 0o770, 0o775, 0o777, 0o2770, 0o1777]
# the owner's private group, the project's (members), the outsider's (no member list, but PARTNER's primary group)
GROUPS = ['owner', 'project', 'outsider']
ACLS = ['', 'u:%s:rwx' % MEMBER, 'u:%s:r-x' % OUTSIDER, 'g:%s:rwx' % PROJECT_GROUP, 'u:%s:rwx,m::r-x' % MEMBER,
        'g:%s:rwx' % OUTSIDER, 'u:%s:rwx' % OWNER, 'u:%s:rwx,g:%s:rwx' % (PARTNER, PROJECT_GROUP)]
# the other users: in the directory's group, named in its ACL, or neither ('nobody': where the group is OUTSIDER's)
OTHERS = [MEMBER, OUTSIDER, PARTNER, 'nobody']

# Each directory given, on a line of its own where the library says others can replace what the owner makes there
LIBRARY_SAYS = 'for dir; do if others_can_replace_in "$dir" >/dev/null; then echo "$dir"; fi; done\n'
TWIN_SAYS = ('import sys\nfrom singularitycontainer_src.install_lock import others_can_replace_in\n'
             'print("".join(d + "\\n" for d in sys.argv[1:] if others_can_replace_in(d)), end="")\n')
# Each directory given where this user can make a name (and so rename one: no case has the sticky bit but one)
KERNEL_LETS = ('for dir; do if mkdir "$dir/probe.$USER" 2>/dev/null; then rmdir "$dir/probe.$USER"; echo "$dir"; fi;'
               ' done\n')


@pytest.fixture
def place():
    """A directory of root's that all may enter and none may write in, in /tmp (sticky): the owner's directories
    go there (pytest's own are root's alone, which other users cannot enter)."""
    require_other_users()
    require(shutil.which('setfacl'), "setfacl (Debian's acl package)")
    path = tempfile.mkdtemp(prefix='lumi-ct-acl-', dir='/tmp')
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def make_cases(place):
    """{directory: (mode, group, acl)}: every combination, each a directory of the owner's."""
    gids = {'owner': user(OWNER).gid, 'project': project_gid(), 'outsider': user(OUTSIDER).gid}
    cases = {}
    for number, (mode, group, acl) in enumerate(itertools.product(MODES, GROUPS, ACLS)):
        path = os.path.join(place, 'case%03d' % number)
        os.mkdir(path)
        os.chown(path, user(OWNER).uid, gids[group])
        os.chmod(path, mode)
        if acl:
            subprocess.run(['setfacl', '-m', acl, path], check=True)
        cases[path] = (oct(mode), group, acl)
    return cases


def test_others_can_replace_in_is_what_the_kernel_allows(place):
    """On every case, the library (bash) and its Python twin say that others can replace what the owner makes there
    exactly where the kernel lets another test user make a name (the sticky bit aside: there others cannot rename
    what the owner makes, and neither says they can)."""
    cases = make_cases(place)
    library = os.path.join(place, 'commands.sh')
    with open(library, 'w') as handle:
        handle.write(library_text(Install('Test/1.0')))
    os.chmod(library, 0o644)
    dirs = sorted(cases)
    sticky = {path for path, (mode, _, _) in cases.items() if int(mode, 8) & 0o1000}
    kernel = set()
    for other in OTHERS:
        kernel |= set(run(['bash', '-c', KERNEL_LETS, 'probe'] + dirs, user=other, cwd='/').stdout.split())
    expected = kernel - sticky
    said = run(['bash', '-c', 'set -euo pipefail\ncommand_name=test\nsource "$0"\n' + LIBRARY_SAYS, library] + dirs,
               user=OWNER).stdout.split()
    twin = run([sys.executable, '-c', TWIN_SAYS] + dirs, user=OWNER).stdout.split()
    for name, answer in (('the library', said), ('the Python twin', twin)):
        wrong = {path: cases[path] + ('kernel lets others' if path in expected else 'kernel lets nobody',)
                 for path in set(answer) ^ expected}
        assert not wrong, '%s differs from the kernel: %s' % (name, wrong)
    only_by_acl = {path for path in expected if cases[path][1] == 'owner' and not int(cases[path][0], 8) & 0o002}
    assert only_by_acl, 'no case where only an ACL lets others in'


def test_the_library_says_which_acl_entry_lets_others_in(place):
    """The one line says how: the user or group an ACL names, or a group that is another user's primary group."""
    path = os.path.join(place, 'acl')
    os.mkdir(path)
    os.chown(path, user(OWNER).uid, user(OWNER).gid)
    os.chmod(path, 0o700)
    subprocess.run(['setfacl', '-m', 'u:%s:rwx' % MEMBER, path], check=True)
    library = os.path.join(place, 'commands.sh')
    with open(library, 'w') as handle:
        handle.write(library_text(Install('Test/1.0')))
    script = 'set -euo pipefail\ncommand_name=test\nsource "$0"\nothers_can_replace_in "$1"\n'
    out = run(['bash', '-c', script, library, path], user=OWNER).stdout
    assert out == '%s (whose ACL lets the user %s write in it, without the sticky bit)\n' % (path, MEMBER)
    os.chown(path, user(OWNER).uid, user(OUTSIDER).gid)
    subprocess.run(['setfacl', '-b', path], check=True)
    os.chmod(path, 0o770)
    out = run(['bash', '-c', script, library, path], user=OUTSIDER).stdout
    assert out == '%s (which is %s\'s)\n' % (path, OWNER)
    os.chown(path, user(OUTSIDER).uid, user(OUTSIDER).gid)
    out = run(['bash', '-c', script, library, path], user=OUTSIDER).stdout
    assert out == '%s (which the group %s may write in, without the sticky bit)\n' % (path, OUTSIDER)


def test_without_getfacl_an_acl_counts_and_a_plain_directory_is_its_mode(place):
    """On a node without getfacl (the acl package): a directory with a POSIX ACL counts, as one whose ACL cannot be
    read; one without is judged by its mode, as with getfacl (ls marks an ACL with '+' after the mode)."""
    library = os.path.join(place, 'commands.sh')
    with open(library, 'w') as handle:
        handle.write(library_text(Install('Test/1.0')))
    bins = os.path.join(place, 'bin')  # (the commands the library uses, without getfacl)
    os.mkdir(bins)
    for tool in ('realpath', 'readlink', 'stat', 'id', 'getent', 'cut', 'awk', 'ls', 'tr', 'sed', 'head', 'cat'):
        os.symlink(shutil.which(tool), os.path.join(bins, tool))
    plain, with_acl = os.path.join(place, 'plain'), os.path.join(place, 'acl')
    for path in (plain, with_acl):
        os.mkdir(path)
        os.chown(path, user(OWNER).uid, user(OWNER).gid)
        os.chmod(path, 0o770)
    subprocess.run(['setfacl', '-m', 'u:%s:rwx' % MEMBER, with_acl], check=True)
    script = 'set -euo pipefail\ncommand_name=test\nsource "$0"\n' + LIBRARY_SAYS
    out = run(['/bin/bash', '-c', script, library, plain, with_acl], user=OWNER, env=dict(os.environ, PATH=bins)).stdout
    assert out.split() == [with_acl]
