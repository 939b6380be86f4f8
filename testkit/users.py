"""The users of the tests: on LUMI nobody is root, nodes are shared by many users, and a project's installs are
shared by its group. tools/setup-users.sh (make setup) makes these users; the tests run everything that installs or
uses a module as OWNER, and take MEMBER and OUTSIDER where other users matter. Root starts only what root starts on
LUMI too (the Slurm and munge daemons) and sets the machine up (the test images, the users).

Run as root (make test), a command goes to a user through as_user(), which gives the process the user's ids,
groups, home and name, and a PATH without root's own directories. Run as anyone else (make test SINGULARITY=... by
a user, on LUMI), there is nobody to switch to: commands run as that user.
"""
import grp
import os
import pwd
from pathlib import Path

# The set of users: 'lumi' (lumi-owner, ...), or the one LUMI_CT_USERS names. make test runs the suite with each
# runtime at once, each with a set of its own (tools/setup-users.sh makes 'lumi' and 'lumis'): their homes, caches,
# port files and processes stay apart.
USERS = os.environ.get('LUMI_CT_USERS') or 'lumi'
OWNER = USERS + '-owner'          # installs and uses the modules; in PROJECT_GROUP
MEMBER = USERS + '-member'        # another member of PROJECT_GROUP
OUTSIDER = USERS + '-outsider'    # another user of the same nodes, in no group of the others
# a user whose primary group is OUTSIDER's own: a group that lists no member, and yet is not OUTSIDER's alone (where
# "others can write here" must take the kernel's view)
PARTNER = USERS + '-partner'
PROJECT_GROUP = USERS + '-project'
TEST_USERS = (OWNER, MEMBER, OUTSIDER, PARTNER)

# Whether commands can be given to the test users (only root can); otherwise they run as whoever runs the tests
SWITCHING = os.geteuid() == 0


class User:
    """A user of the machine: name, uid, gid (primary group), groups (all gids) and home."""

    def __init__(self, name):
        entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid, self.home = name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)
        self.groups = sorted({self.gid} | {group.gr_gid for group in grp.getgrall() if name in group.gr_mem})

    def __repr__(self):
        return 'User(%r)' % self.name


def missing_users():
    """The test users that do not exist here (make setup makes them)."""
    missing = []
    for name in TEST_USERS:
        try:
            pwd.getpwnam(name)
        except KeyError:
            missing.append(name)
    return missing


def user(name=OWNER):
    """The test user `name` when the tests can switch users, else the user running them."""
    return User(name) if SWITCHING else User(pwd.getpwuid(os.geteuid()).pw_name)


def project_gid():
    return grp.getgrnam(PROJECT_GROUP).gr_gid


def user_env(who, env):
    """env as the user's login would have it: their HOME, USER and LOGNAME; root's own directories and settings
    left out (PATH entries under /root, pyenv's and the session's variables)."""
    env = {key: value for key, value in env.items() if not key.startswith(('PYENV', 'XDG_', 'VIRTUAL_ENV'))}
    env.update(HOME=str(who.home), USER=who.name, LOGNAME=who.name)
    if 'PATH' in env:
        env['PATH'] = os.pathsep.join(entry for entry in env['PATH'].split(os.pathsep)
                                      if entry and not (entry + '/').startswith('/root/'))
    return env


def as_user(who, env=None, cwd=None):
    """Keyword arguments for subprocess.run/Popen that run the process as `who` (a User; None: as the caller), in
    env (default: this process's) and cwd (default: the user's home, where a login starts)."""
    env = dict(os.environ if env is None else env)
    if who is None or not SWITCHING or who.uid == os.geteuid():
        return {'env': env, 'cwd': cwd}
    return {'env': user_env(who, env), 'cwd': str(who.home) if cwd is None else cwd,
            'user': who.uid, 'group': who.gid, 'extra_groups': who.groups}


def give(path, who, group=None):
    """Make path (recursively) belong to `who` (and `group`, a gid, else the user's own group), as if they had
    made it; nothing to do unless the tests can switch users."""
    if not SWITCHING or who is None:
        return
    gid = who.gid if group is None else group
    path = Path(path)
    os.lchown(path, who.uid, gid)
    if path.is_dir() and not path.is_symlink():
        for top, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(top, name), who.uid, gid)
