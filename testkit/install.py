"""Installs with the real parts: EasyBuild (5.x and 4.9.4) installs with this project's easyblock, Lmod shells,
the container runtime in use and what it can do, the demo and LAIF-like test installations, wheels and fake commands.

No pytest: the tests, make demo and make bench use it alike. Where something it needs is not installed, it raises
Missing (the tests skip on it, or fail in CI: tests/conftest.py).
"""
import contextlib
import functools
import http.server
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zipfile
from pathlib import Path

from .easyblock import EASYBLOCK
from .images import ROOTFS, make_test_sif
from .users import OWNER, TEST_USERS, as_user, give, missing_users, user as test_user


TOOLS = Path(os.environ.get('LUMI_CT_TOOLS', '/opt/lumi-container-tools'))
EB_VENVS = {'5': TOOLS / 'eb5', '4.9': TOOLS / 'eb49'}
# torch installed with pip --target by make setup, bound into the test image of the distributed tests.
TORCH_SITE = os.environ.get('LUMI_CT_TORCH', str(TOOLS / 'torch-2.13.0'))
# ipykernel and what it needs, as wheels for the test images' Python (make setup fetches them)
KERNEL_WHEELS = Path(os.environ.get('LUMI_CT_KERNEL_WHEELS', str(TOOLS / 'kernel-wheels')))
LMOD_CMD = os.environ.get('LMOD_CMD') or '/usr/share/lmod/lmod/libexec/lmod'
LMOD_INIT = '/usr/share/lmod/lmod/init/bash'


def _container_python_version():
    """The version of the test images' Python: Debian 12's (images.ROOTFS), whatever runs the tests."""
    versions = sorted((int(match.group(1)), int(match.group(2))) for match in (
        re.fullmatch(r'python(\d+)\.(\d+)', path.name) for path in (ROOTFS / 'usr' / 'lib').glob('python3.*')) if match)
    return '%d.%d' % (versions[-1] if versions else sys.version_info[:2])


CONTAINER_PYTHON_VERSION = _container_python_version()

# The container runtime the tests drive: the one LUMI_CT_SINGULARITY names (make test SINGULARITY=...), else the
# Apptainer that make setup installs, called as singularity (LUMI's name; it reads the SINGULARITY_* names too).
APPTAINER = TOOLS / 'apptainer' / 'bin' / 'apptainer'
RUNTIME = os.environ.get('LUMI_CT_SINGULARITY') or str(APPTAINER.parent / 'singularity')
# The setuid runtime that make test builds (tools/install-apptainer-suid.sh): LUMI's mode, for make test's second run
# and the benchmarks
SETUID_RUNTIME = TOOLS / 'apptainer-suid' / 'bin' / 'singularity'

# What a runtime can do beyond Singularity 3.4.2, the oldest one the tests ran against. A test that needs one of
# these is marked @pytest.mark.needs(feature) and left out (deselected) with a runtime that lacks it
# (tests/conftest.py).
FEATURES = {
    'image-src': 'SquashFS files bound with image-src= (Singularity 3.6 and later, Apptainer)',
    'env-precedence': "SINGULARITYENV_* winning over the image's own environment (Singularity 3.6 and later)",
    'apptainer': "Apptainer's own names, APPTAINER_* (Apptainer)",
}


def runtime_features():
    """The FEATURES the runtime has, by its name and version."""
    try:
        out = subprocess.run([RUNTIME, '--version'], capture_output=True, text=True).stdout
    except OSError:  # missing: the tests' require_runtime() says so
        return set(FEATURES)
    match = re.search(r'(\S+) version (\d+)\.(\d+)', out)
    if not match:
        return set()
    name, version = match.group(1), (int(match.group(2)), int(match.group(3)))
    if name == 'apptainer':
        return set(FEATURES)
    return {'image-src', 'env-precedence'} if version >= (3, 6) else set()


RUNTIME_FEATURES = runtime_features()


def runtime_is_setuid():
    """Whether the runtime starts containers with its setuid starter (as LUMI's SingularityCE does), not in a user
    namespace: its starter-suid is root's and setuid, and its configuration allows it."""
    prefix = Path(os.path.realpath(RUNTIME)).parent.parent
    for name in ('apptainer', 'singularity'):
        starter, conf = prefix / 'libexec' / name / 'bin' / 'starter-suid', prefix / 'etc' / name / (name + '.conf')
        try:
            status = starter.stat()
            allowed = re.search(r'^allow setuid\s*=\s*yes\s*$', conf.read_text(), re.M)
        except OSError:
            continue
        return bool(status.st_uid == 0 and status.st_mode & 0o4000 and allowed)
    return False


RUNTIME_SETUID = runtime_is_setuid()

# LUMI's EasyBuild-user (LUMI-SoftwareStack, modules/EasyBuild-config/25.01.lua) puts
# easybuild/config/easybuild-production.cfg into EASYBUILD_CONFIGFILES in user mode too: of its [override] values,
# these touch modes (eb --show-config marks them (F)). It installs software and modules into separate trees under
# EBU_USER_PREFIX (SW/<stack>/<partition>; modules/LUMI/<version>/partition/<partition>, no module suffix); the
# partition of the container modules is 'container'.
LUMI_EASYBUILD_CONFIG = '[override]\numask=002\ngroup-writable-installdir=True\n'
LUMI_SOFTWARE_TREE = ('SW', 'LUMI-24.03', 'container')
LUMI_MODULES_TREE = ('modules', 'LUMI', '24.03', 'partition', 'container')
# The EasyBuild configuration of the shared-install and hostile-directory tests: LUMI's where the runtime is LUMI's
# (setuid), so that make test runs them under both, each in one of its two sessions; LUMI_CT_EB_SITE=plain|lumi
# chooses
EB_SITE = os.environ.get('LUMI_CT_EB_SITE') or ('lumi' if RUNTIME_SETUID else 'plain')
# Installs with pip requirements pack the venv into a SquashFS file only where the runtime can bind it
SQUASHFS_WORKS = 'image-src' in RUNTIME_FEATURES


class Missing(Exception):
    """Something the kit needs is not installed here; `what` names it."""

    def __init__(self, what):
        super().__init__('%s is missing (make setup installs it)' % what)
        self.what = what


@functools.lru_cache(maxsize=None)
def runtime_probe():
    """None if the real runtime starts a container of a test image here, else what it said (once a process)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the image is made as root, and started as the test user
        proc = run([RUNTIME, 'exec', str(make_test_sif(Path(tmp) / 'probe.sif')), '/bin/true'], check=False)
    return None if proc.returncode == 0 else (proc.stderr.strip() or 'exit code %d' % proc.returncode)


def eb_missing(version):
    """What installs with EasyBuild `version` ('5' or '4.9') lack here (its venv, Lmod), or None."""
    if not (EB_VENVS[version] / 'bin' / 'eb').exists():
        return 'EasyBuild %s in %s' % (version, EB_VENVS[version])
    if not os.path.exists(LMOD_CMD):
        return 'Lmod (%s)' % LMOD_CMD
    return None


def base_env(extra_path=()):
    """The environment for eb and module commands: Lmod, and the runtime the tests use first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('EASYBUILD_', 'SINGULARITY', 'APPTAINER', 'LMOD', '__LMOD', '_LMFILES_',
                                'LOADEDMODULES', 'MODULEPATH', 'SIF', 'RUNSCRIPTS', 'CONTAINERROOT', 'PIP_'))}
    env['PIP_CONFIG_FILE'] = os.devnull  # pip in the container as a user without pip settings of their own
    path = list(extra_path) + [os.path.dirname(RUNTIME)]
    env['PATH'] = os.pathsep.join(path + [env.get('PATH', '/usr/bin:/bin')])
    env['LMOD_CMD'] = LMOD_CMD
    env['EASYBUILD_MODULES_TOOL'] = 'Lmod'
    env['EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES'] = '1'
    return env


def user_named(name):
    """The test user `name` (testkit.users), or None for None; Missing if make setup has not made the users."""
    if name is None:
        return None
    if missing_users():
        raise Missing('the test users %s (tools/setup-users.sh)' % ', '.join(missing_users()))
    return test_user(name)


def run(cmd, env=None, check=True, cwd=None, timeout=900, input=None, user=OWNER):
    """Run a command (list, or a bash script as str) as `user` (a test user's name: LUMI users are never root; None
    for root's own work, such as setting up the machine); return the CompletedProcess with text output."""
    if isinstance(cmd, str):
        cmd = ['bash', '-c', cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input,
                          **as_user(user_named(user), env, cwd))
    if check and proc.returncode != 0:
        raise AssertionError('command failed (%s): %s\nstdout:\n%s\nstderr:\n%s' % (
            proc.returncode, cmd, proc.stdout[-6000:], proc.stderr[-6000:]))
    return proc


def spawn(cmd, env=None, cwd=None, user=OWNER, **popen_args):
    """Start a command as `user`, as run() does, without waiting for it: subprocess.Popen with popen_args."""
    return subprocess.Popen(cmd, **as_user(user_named(user), env, cwd), **popen_args)


class Installation:
    """An EasyBuild prefix with sources, where easyconfigs get installed with this project's easyblock."""

    def __init__(self, root, eb_version='5', syntax='Lua', user=OWNER, site='plain'):
        missing = eb_missing(eb_version)
        if missing:
            raise Missing(missing)
        self.root = Path(root)
        self.prefix = self.root / 'prefix'
        self.sources = self.root / 'sources'
        self.sources.mkdir(parents=True, exist_ok=True)
        (self.root / 'tmp').mkdir(exist_ok=True)  # EASYBUILD_TMPDIR, and eb's TMPDIR (eb_environment)
        self.eb_version = eb_version
        self.syntax = syntax
        self.user_name = user
        self.user = user_named(user)
        self.site = site  # plain EasyBuild, or as LUMI's EasyBuild-user configures it (LUMI_EASYBUILD_CONFIG)
        if site == 'lumi':
            (self.root / 'easybuild-production.cfg').write_text(LUMI_EASYBUILD_CONFIG)
        give(self.root, self.user)  # the user's own EasyBuild prefix, as on LUMI

    @property
    def software_dir(self):
        return self.prefix.joinpath(*LUMI_SOFTWARE_TREE) if self.site == 'lumi' else self.prefix / 'software'

    @property
    def modules_dir(self):
        return self.prefix.joinpath(*LUMI_MODULES_TREE) if self.site == 'lumi' else self.prefix / 'modules' / 'all'

    def module_file(self, name, version):
        return self.modules_dir / name / (version + ('.lua' if self.syntax == 'Lua' else ''))

    def add_source(self, image, name=None):
        """A copy of the image file in this prefix's sources (as `name`), the user's, as if they had fetched it.
        (shutil.copyfile, not Path.write_bytes(read_bytes()): that holds the 90 MiB of a test image in memory, 0.1 to
        0.3 s more at each install here.)"""
        target = self.sources / (name or Path(image).name)
        shutil.copyfile(image, target)
        give(target, self.user)
        return target

    def env(self, **extra):
        env = base_env()
        venv = EB_VENVS[self.eb_version]
        env.update({
            'EB_PYTHON': str(venv / 'bin' / 'python'),
            'EASYBUILD_PREFIX': str(self.prefix),
            'EASYBUILD_SOURCEPATH': str(self.sources),
            'EASYBUILD_BUILDPATH': str(self.root / 'build'),
            'EASYBUILD_MODULE_SYNTAX': self.syntax,
            'EASYBUILD_INCLUDE_EASYBLOCKS': str(EASYBLOCK),
            'EASYBUILD_TMPDIR': str(self.root / 'tmp'),
        })
        if self.site == 'lumi':
            env.update({
                'EASYBUILD_CONFIGFILES': str(self.root / 'easybuild-production.cfg'),
                'EASYBUILD_INSTALLPATH_SOFTWARE': str(self.software_dir),
                'EASYBUILD_INSTALLPATH_MODULES': str(self.modules_dir),
                'EASYBUILD_SUFFIX_MODULES_PATH': '',
            })
        env.update(extra)
        return env

    def eb(self, *args, check=True, env=None):
        cmd = [str(EB_VENVS[self.eb_version] / 'bin' / 'eb')] + [str(a) for a in args]
        return run(cmd, env=eb_environment(env or self.env()), check=check, user=self.user_name)

    def write_easyconfig(self, filename, text):
        path = self.root / 'easyconfigs' / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
        give(path.parent, self.user)
        return path

    def installdir(self, name, version):
        return self.software_dir / name / version

    def shell_command(self, script, pre=''):
        """The command that runs a bash script with Lmod initialised and this prefix's modules on MODULEPATH."""
        modules = shlex.quote(str(self.modules_dir))
        return ['bash', '-c', 'source %s\n%s\nmodule use %s\n%s' % (LMOD_INIT, pre, modules, script)]

    def shell(self, script, check=True, env=None, pre='', user=None):
        """Run a bash script with Lmod initialised and this prefix's modules on MODULEPATH, as this installation's
        user (or `user`, another test user's name)."""
        return run(self.shell_command(script, pre), env=env or base_env(), check=check, user=user or self.user_name)

    def module_shell(self, module, script, **kwargs):
        """Run a bash script after 'module load module' (keyword arguments as for shell)."""
        return self.shell('module load %s\n%s' % (module, script), **kwargs)


def eb_environment(env):
    """env for eb, with TMPDIR its EASYBUILD_TMPDIR: EasyBuild makes a directory of a fake vsc package with mkdtemp
    before it reads its configuration, and leaves it (in /tmp, at every eb); EasyBuild sets TMPDIR itself after."""
    return dict(env, TMPDIR=env['EASYBUILD_TMPDIR'])


def demo_easyconfig(name='Demo', version='1.0', suffix='', sif='demo.sif', **params):
    """An easyconfig for the test image; params become easyconfig parameters (repr'd)."""
    lines = [
        "easyblock = 'SingularityContainer'",
        "name = %r" % name,
        "version = %r" % version,
        "versionsuffix = %r" % suffix,
        "homepage = 'https://example.org/'",
        "description = 'A test container'",
        "toolchain = SYSTEM",
        "sources = [%r]" % sif,
        "moduleclass = 'devel'",
    ]
    params.setdefault('container_bind', ['/tmp'])
    params.setdefault('container_python_version', CONTAINER_PYTHON_VERSION)
    params.setdefault('torch_runscripts', True)
    for key, value in params.items():
        lines.append('%s = %r' % (key, value))
    return '\n'.join(lines) + '\n'


def write_wheel(wheels, name, version='1.0', requires=(), code='VALUE = 1\n', broken=False, modules=None,
                commands=None):
    """A pure-Python wheel, written directly as the zip file it is: package `name` (dashes as underscores) with
    `code` as its __init__.py, plus `modules` ({path in the package: text}), compressed if there are any, and
    `commands` ({console script: 'module:function'})."""
    package = name.replace('-', '_')
    dist_info = '%s-%s.dist-info' % (package, version)
    metadata = 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, version)
    metadata += ''.join('Requires-Dist: %s\n' % req for req in requires)
    files = {'%s/__init__.py' % package: code}
    files.update(('%s/%s' % (package, path), text) for path, text in (modules or {}).items())
    files['%s/METADATA' % dist_info] = metadata
    if commands:
        files['%s/entry_points.txt' % dist_info] = '[console_scripts]\n' + ''.join(
            '%s = %s\n' % item for item in commands.items())
    files['%s/WHEEL' % dist_info] = 'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n'
    if broken:
        files.pop('%s/METADATA' % dist_info)
    files['%s/RECORD' % dist_info] = ''.join('%s,,\n' % f for f in files) + '%s/RECORD,,\n' % dist_info
    path = Path(wheels) / ('%s-%s-py3-none-any.whl' % (package, version))
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED if modules else zipfile.ZIP_STORED) as whl:
        for fname, text in files.items():
            whl.writestr(fname, text)
    return path


def local_wheels(wheels):
    """pip options that install from the directory wheels only."""
    return ['--no-index', '--find-links=%s' % wheels]


@contextlib.contextmanager
def package_index(wheels):
    """The wheels of the directory `wheels` as a package index (PEP 503's simple form) served over HTTP on this
    machine's loopback while the block runs, as pip meets an index: it downloads each file into its temporary
    directory. Yields pip's options to install from it alone."""
    root = Path(tempfile.mkdtemp(prefix='lumi-ct-index-'))
    os.chmod(root, 0o755)
    try:
        projects = {}
        for wheel in sorted(Path(wheels).glob('*.whl')):
            projects.setdefault(re.sub(r'[-_.]+', '-', wheel.name.split('-')[0]).lower(), []).append(wheel)
        for project, files in projects.items():
            (root / 'simple' / project).mkdir(parents=True)
            links = ''.join('<a href="/files/%s">%s</a>\n' % (wheel.name, wheel.name) for wheel in files)
            (root / 'simple' / project / 'index.html').write_text('<html><body>\n%s</body></html>\n' % links)
        shutil.copytree(wheels, root / 'files')
        handler = functools.partial(_QuietHandler, directory=str(root))
        server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield ['--index-url', 'http://127.0.0.1:%d/simple/' % server.server_address[1]]
        finally:
            server.shutdown()
            server.server_close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def fake_command(directory, name, script):
    """An executable `name` in directory (created) with the shell script's body; returns the directory, to put
    first on PATH."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text('#!/bin/sh\n' + script)
    (directory / name).chmod(0o755)
    return directory


def failing_mksquashfs(directory):
    """A directory to put first on PATH: its mksquashfs writes part of the file, then fails as a full disk would."""
    return fake_command(directory, 'mksquashfs', 'echo partial > "$2"\necho "mksquashfs: no space left" >&2\nexit 1\n')


def slow_step(directory, step):
    """(A directory to put first on PATH, a file): its fake runtime (step 'pip': while it runs pip install),
    mksquashfs (step 'pack', after writing part of its output) or unsquashfs (step 'unpack') writes the file, then
    sleeps; the fake runtime, like a real one, passes a SIGTERM on to what it runs. The file holds the pid of the
    process that sleeps."""
    directory = Path(directory)
    started = directory / 'started'
    if step == 'pip':
        return fake_command(directory / 'slow', 'singularity', (
            'case " $* " in *" pip install "*)\n'
            '    : > %s\n    sleep 300 &\n    trap \'kill $!; exit 143\' TERM\n    wait $!\n    exit 1 ;;\n'
            'esac\nexec %s "$@"\n') % (started, RUNTIME)), started
    if step == 'unpack':
        return fake_command(directory / 'slow', 'unsquashfs', 'echo $$ > %s\nexec sleep 300\n' % started), started
    return fake_command(directory / 'slow', 'mksquashfs',
                        'echo partial > "$2"\necho $$ > %s\nexec sleep 300\n' % started), started


def cache_roots(suffix='*'):
    """The cache roots in /tmp of this run's test users whose names go on with `suffix` (a glob: '-<job>-*', a job's):
    /tmp is the machine's, and make test's other run (its users of their own) has roots there too, not this run's to
    remove."""
    return {path for name in TEST_USERS for path in Path('/tmp').glob(name + '-caches' + suffix)}


def wait_for(predicate, what, timeout=60):
    """Wait until predicate() is true; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'timed out waiting for ' + what
        time.sleep(0.05)


# Test installations: the demo image, and a LUMI AI Factory-like one as the LAIF easyconfigs install it

def install_demo(root, sif, eb_version='5', syntax='Lua', **params):
    """Install the demo easyconfig with the given parameters; return (Installation, installdir)."""
    inst = Installation(root, eb_version=eb_version, syntax=syntax)
    inst.add_source(sif, 'demo.sif')
    params.setdefault('wrapped_commands', ['python', 'python3', 'pip'])
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(**params))
    inst.eb(ec, '--robot-paths=' + str(ec.parent))
    return inst, inst.installdir('Demo', '1.0')


# A container_env_defaults value that a shell would expand or run: it reaches the container as written
LITERAL_DEFAULT = 'pa$$word $(touch /tmp/lumi-ct-expanded) `id` \\ "q"'

# Where the images of the distributed tests find torch: the host's torch tree, bound there (torch_bind())
TORCH_IN_CONTAINER = '/opt/torch-site-packages'


def torch_bind():
    """The container_bind entry that puts the host's torch where the test images look for it."""
    return '%s:%s' % (TORCH_SITE, TORCH_IN_CONTAINER)


# A LUMI AI Factory image's name: lumi-multitorch-<variant>-<digest>-<tag>.sif (the digest's t213: torch 2.13)
LAIF_SIF_NAME = 'lumi-multitorch-torch-u24r64f21m43t213-20260225_144743.sif'
# What the LAIF-like test image's /opt/venv holds: a package that requirements depend on, and one they upgrade
LAIF_PACKAGES = {'laif-base': '1.0', 'laif-upgrade': '1.0'}
# The LAIF easyconfigs' settings, adapted to this machine (binds, local wheels); installed by install_laif
LAIF_MODULE = 'PyTorch/2.13.0-laif'
LAIF_DEFAULTS = {'FI_MR_CACHE_MONITOR': 'userfaultfd', 'NCCL_SOCKET_IFNAME': 'hsn0,hsn1,hsn2,hsn3'}


def install_laif(root, laif_sif, wheels, eb_version='5', syntax='Lua', **params):
    """The LAIF-like image in a central release directory (not in the source path), installed in place as the
    LAIF easyconfigs do it; returns (Installation, installdir, central image)."""
    inst = Installation(root, eb_version=eb_version, syntax=syntax)
    central = Path(root) / 'laifs' / 'containers' / 'lumi-multitorch-u24r64f21m43t213-20260225_144743'
    central.mkdir(parents=True)
    shutil.copy(laif_sif, central / LAIF_SIF_NAME)
    settings = dict(
        name='PyTorch', version='2.13.0', suffix='-laif', sif=LAIF_SIF_NAME, container_entry='run',
        copy_image=False, central_sif_dir=str(central), container_bind=['/tmp', torch_bind()],
        container_env_defaults=LAIF_DEFAULTS, container_venv='pytorch',
        wrapped_commands=['python', 'python3', 'pip', 'torchrun'],
        container_components={'laif-base': '1.0', 'torch': '2.13.0'},
        pip_requirements=['laif-top', 'laif-upgrade==2.0'], squash_user_software=SQUASHFS_WORKS,
        pip_install_options=local_wheels(wheels))
    settings.update(params)
    ec = inst.write_easyconfig('PyTorch-2.13.0-laif.eb', demo_easyconfig(**settings))
    inst.eb(ec)
    return inst, inst.installdir('PyTorch', '2.13.0-laif'), central / LAIF_SIF_NAME
