"""The shipped easyconfigs: in sync with their spec, clean for eb --check-style, parsed by eb --dry-run,
and installed for real from the shipped spec."""
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import yaml

from support import EASYBLOCK, REPO, generate_ec_command, require_other_users, require_runtime, require_tools
from testkit.images import make_test_sif
from testkit.install import CONTAINER_PYTHON_VERSION, SQUASHFS_WORKS, Installation, base_env, run, write_wheel
from testkit.users import MEMBER, OWNER, give, project_gid, user

pytestmark = pytest.mark.runtime  # drives the container runtime: make test runs it with a real one too

EC_DIR = REPO / 'easyconfigs' / 'p' / 'PyTorch'
EASYCONFIGS = sorted(EC_DIR.glob('*.eb'))
# Other sites' easyconfigs, each tree with a spec of its own (easyconfigs/<site>/p/PyTorch/PyTorch.yaml)
DAWN_DIR = REPO / 'easyconfigs' / 'dawn' / 'p' / 'PyTorch'
DAWN_EASYCONFIGS = sorted(DAWN_DIR.glob('*.eb'))
# Every spec under easyconfigs/, as make check-easyconfigs finds them
SPECS = sorted((REPO / 'easyconfigs').rglob('*.yaml'))


def laif_easyconfig_names(spec):
    """The easyconfig names of the spec's LAIF entries, by the naming rule of README.md (written out here, so that
    generate-ec's own code is checked against it), and the releases (tags) with their image variants."""
    names, variants = [], {}
    for entry in spec['containers']:
        family = entry.get('family', spec['defaults'].get('family'))
        if family != 'laif':
            continue
        values = dict(spec['defaults'], **spec.get('family_defaults', {}).get('laif', {}))
        values.update(entry)
        names.append('%s-%s-rocm-%s-python-%s-singularity-laif-%s%s-%s.eb' % (
            spec['name'], values['version'], values['rocm'], values['container_python_version'],
            values['image_variant'], '-' + values['variant'] if values.get('variant') else '', values['tag'][:8]))
        variants.setdefault(values['tag'], set()).add(values['image_variant'])
    return names, variants


def test_easyconfigs_match_their_spec():
    generate_ec = generate_ec_command()
    proc = run([generate_ec, '--check', '-o', '.', 'PyTorch.yaml'], cwd=EC_DIR, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = run([generate_ec, '--list', 'PyTorch.yaml'], cwd=EC_DIR).stdout.split()
    assert sorted(names) == [p.name for p in EASYCONFIGS]
    assert 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-20250827.eb' in names
    assert 'PyTorch-2.7.1-rocm-6.2.4-python-3.12-singularity-exampleVenv-20250827.eb' in names
    assert 'PyTorch-2.3.1-rocm-6.0.3-python-3.12-singularity-exampleVenv-20240923.eb' in names
    # LUMI AI Factory images: the torch and the full variant of each release in the spec. Their easyconfigs use
    # the easyblock's container_entry, copy_image and container_env_defaults, so test_check_style_and_dry_run needs
    # an easyblock with those parameters.
    laif = [name for name in names if '-singularity-laif-' in name]
    expected, variants = laif_easyconfig_names(yaml.safe_load((EC_DIR / 'PyTorch.yaml').read_text()))
    assert sorted(laif) == sorted(expected) and len(variants) >= 5
    assert all(found == {'torch', 'full'} for found in variants.values()), variants
    full = (EC_DIR / 'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260225.eb').read_text()
    for line in ("container_entry = 'run'\n", 'copy_image = False\n', "    'FI_MR_CACHE_MONITOR': 'userfaultfd',\n",
                 "sources = ['lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif']\n",
                 "central_sif_dir = '/appl/local/laifs/containers/lumi-multitorch-u24r64f21m43t29-20260225_144743'\n"):
        assert line in full
    assert 'NCCL_NET_GDR_LEVEL' not in full  # it hangs with these images (laifs-container-recipes #30)


@pytest.mark.once_only('generate-ec --check starts no container')
@pytest.mark.parametrize('spec', SPECS, ids=[str(spec.relative_to(REPO)) for spec in SPECS])
def test_every_spec_is_in_sync(spec):
    """Each spec under easyconfigs/ (LUMI's, Dawn's) and its easyconfigs beside it, as make check-easyconfigs runs
    them: generate-ec --check finds nothing to change, and every easyconfig there is the spec's."""
    generate_ec = generate_ec_command()
    proc = run([generate_ec, '--check', '-o', '.', spec.name], cwd=spec.parent, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = run([generate_ec, '--list', spec.name], cwd=spec.parent).stdout.split()
    assert sorted(names) == sorted(p.name for p in spec.parent.glob('*.eb'))
    assert DAWN_DIR / 'PyTorch.yaml' in SPECS and EC_DIR / 'PyTorch.yaml' in SPECS


@pytest.mark.once_only('--check-style and --dry-run start no container', in_setuid_run=True)
@pytest.mark.parametrize('eb_version', ['5', '4.9'])
def test_check_style_and_dry_run(tmp_path, eb_version):
    inst = Installation(tmp_path, eb_version=eb_version)
    proc = inst.eb('--check-style', *EASYCONFIGS, *DAWN_EASYCONFIGS, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for directory, easyconfigs in ((EC_DIR, EASYCONFIGS), (DAWN_DIR, DAWN_EASYCONFIGS)):
        proc = inst.eb('--dry-run', *easyconfigs, '--robot-paths=%s' % directory, check=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        for ec in easyconfigs:
            assert 'PyTorch/%s' % ec.name[len('PyTorch-'):-len('.eb')] in out


def check_easybuild_5_names(tmp_path, ec):
    """An easyconfig with EasyBuild 5's names: clean for EasyBuild 5's --check-style and -x; EasyBuild 4.9 cannot
    read it (which is why a spec cannot ask for both)."""
    text = ec.read_text()
    assert "\nversion_suffix = '" in text and "\nenv_mod_category = 'devel'\n" in text
    assert '\nversionsuffix = ' not in text and '\nmoduleclass = ' not in text
    with tempfile.TemporaryDirectory(prefix='eb5-') as short:  # eb -x names a lock after its whole prefix path
        eb5 = Installation(short)
        eb5.eb('--check-style', ec)
        assert ec.name[:-len('.eb')].replace('PyTorch-', 'PyTorch/', 1) in eb5.eb('-x', ec).stdout
        proc = Installation(Path(short) / '4.9', eb_version='4.9').eb('-x', ec, check=False)
    assert proc.returncode != 0 and 'version_suffix -> versionsuffix' in proc.stdout + proc.stderr


@pytest.mark.once_only('it checks generate-ec\'s easyconfigs as EasyBuild installs them; the container commands of '
                       'the install are every install\'s (test_easyblock.py, test_venv.py, under both runtimes); '
                       'run under LUMI\'s', in_setuid_run=True)
@pytest.mark.parametrize('names', ['4.9-and-5', '5'])
def test_generated_easyconfig_installs_and_works(tmp_path, names):
    """The shipped spec's exampleVenv entry, adapted only to this machine, generated and installed with eb (5):
    with the names of easyconfig fields that EasyBuild 4.9 and 5 both read, and with EasyBuild 5's (easybuild: 5).

    Adapted: the Python version (the test image's), the binds (LUMI's file systems do not exist here) and
    pip's options (local wheels, no network). The image is a real SIF with the components' metadata, named
    as the spec names it; the requirements torchmetrics and pytorch-lightning are stand-in wheels.
    """
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'siftool')
    spec = yaml.safe_load((EC_DIR / 'PyTorch.yaml').read_text())
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    for requirement in spec['defaults']['pip_requirements']:
        write_wheel(wheels, requirement, code='GENERATED = True\n')
    spec['defaults'].update(
        container_python_version=CONTAINER_PYTHON_VERSION, container_bind=['/tmp'],
        pip_install_options=['--no-index', '--find-links=%s' % wheels], squash_user_software=SQUASHFS_WORKS,
        wrapped_commands=[cmd.replace(spec['defaults']['container_python_version'], CONTAINER_PYTHON_VERSION)
                          for cmd in spec['defaults']['wrapped_commands']])
    entry = next(c for c in spec['containers'] if c['version'] == '2.7.1' and 'variant' not in c)
    spec['containers'] = [entry]
    if names == '5':
        del spec['easybuild_4_9']
        spec['easybuild'] = 5
    (tmp_path / 'spec.yaml').write_text(yaml.safe_dump(spec))
    run([generate_ec_command(), '-o', str(tmp_path / 'ecs'), str(tmp_path / 'spec.yaml')])
    suffix = '-rocm-6.2.4-python-%s-singularity-exampleVenv-20250827' % CONTAINER_PYTHON_VERSION
    ec = tmp_path / 'ecs' / ('PyTorch-2.7.1%s.eb' % suffix)
    assert [p.name for p in (tmp_path / 'ecs').iterdir()] == [ec.name]
    if names == '5':
        check_easybuild_5_names(tmp_path, ec)

    # The image: the spec's components as installed distributions, found through PYTHONPATH.
    dists = tmp_path / 'dists'
    for name, version in entry['container_components'].items():
        info = dists / ('%s-%s.dist-info' % (name.replace('-', '_'), version))
        info.mkdir(parents=True)
        (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, version))
    inst = Installation(tmp_path / 'install')
    sif_name = 'lumi-pytorch-rocm-6.2.4-python-%s-pytorch-v2.7.1-dockerhash-0d479e852886.sif' % (
        CONTAINER_PYTHON_VERSION)
    make_test_sif(inst.sources / sif_name, trees={'/opt/components': dists},
                  env={'PYTHONPATH': '/opt/components'})
    inst.eb(ec)

    idir = inst.installdir('PyTorch', '2.7.1' + suffix)
    packed = idir / 'user-software.packed' / 'user-software.squashfs'
    assert (idir / sif_name).is_file() and packed.is_file() == SQUASHFS_WORKS
    out = inst.shell('module load PyTorch/2.7.1%s\necho "$SIFPYTORCH $NCCL_SOCKET_IFNAME"\n'
                     'python -c "import torchmetrics, pytorch_lightning; print(torchmetrics.GENERATED)"\n'
                     'list-packages --format=freeze | grep -i -e deepspeed -e torchmetrics' % suffix).stdout
    assert out.splitlines() == ['%s hsn' % (idir / sif_name), 'True', 'DeepSpeed==0.17.4', 'torchmetrics==1.0']


def test_lumi_user_repo_in_a_projects_prefix_is_the_projects(tmp_path):
    """Under umask 002 in a project's prefix (setgid, group-writable), make lumi-user-repo leaves what it writes for
    the other members to update (they run it again), and it names each easyconfig on the robot path (LUMI's own, as
    EasyBuild-user sets EASYBUILD_ROBOT_PATHS) that one of the same name in the repo shadows."""
    require_other_users()
    checkout = tmp_path / 'checkout'  # (readable for the test users, as a clone of theirs)
    for path in [Path('tools/lumi-user-repo.sh'), Path('easyblocks/generic/singularitycontainer.py')] + [
            ec.relative_to(REPO) for ec in EASYCONFIGS]:
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, checkout / path)
    lumis = tmp_path / 'LUMI-EasyBuild-contrib' / 'easyconfigs'
    (lumis / 'p' / 'PyTorch').mkdir(parents=True)
    shadowed = EASYCONFIGS[0].name
    (lumis / 'p' / 'PyTorch' / shadowed).write_text("name = 'PyTorch'\n")
    (lumis / 'p' / 'PyTorch' / 'PyTorch-0.1-lumis-own.eb').write_text("name = 'PyTorch'\n")
    prefix = tmp_path / 'project' / 'EasyBuild'
    prefix.mkdir(parents=True)
    give(prefix, user(OWNER), group=project_gid())
    os.chmod(prefix, 0o2775)
    repo = prefix / 'UserRepo' / 'easybuild'
    command = ['bash', '-c', 'umask 002; exec tools/lumi-user-repo.sh "$1"', 'lumi-user-repo', str(repo)]
    env = dict(os.environ, EASYBUILD_ROBOT_PATHS='%s:%s' % (repo / 'easyconfigs', lumis))
    said = run(command, cwd=checkout, env=env, user=OWNER).stdout
    assert said.count('shadows') == 1
    assert '%s shadows %s, which has the same name' % (repo / 'easyconfigs' / 'p' / 'PyTorch' / shadowed,
                                                       lumis / 'p' / 'PyTorch' / shadowed) in said
    for top, dirs, files in os.walk(repo):
        assert stat.S_IMODE(os.stat(top).st_mode) == 0o2775, top
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode) == 0o664, name
    run(command, cwd=checkout, env=env, user=MEMBER)  # (install replaces the owner's files in the group's dirs)
    easyblock = repo / 'easyblocks' / 'generic' / 'singularitycontainer.py'
    assert easyblock.owner() == MEMBER and easyblock.read_bytes() == EASYBLOCK.read_bytes()
    # an easyconfig that a member edited stays, and is named; removed, it is this checkout's again
    edited = repo / 'easyconfigs' / 'p' / 'PyTorch' / EASYCONFIGS[1].name
    run(['bash', '-c', 'echo "# mine" >> "$1"', 'edit', str(edited)], user=MEMBER)
    proc = run(command, cwd=checkout, env=env, user=OWNER, check=False)
    assert proc.returncode == 1 and proc.stderr == (
        'lumi-user-repo: %s was changed since lumi-user-repo wrote it (by you or another member): left as it is. '
        'Remove it (rm %s) and run make lumi-user-repo again to take this checkout\'s\n' % (edited, edited))
    assert edited.read_text().endswith('# mine\n') and edited.owner() == MEMBER
    assert run(command, cwd=checkout, env=env, user=OWNER, check=False).stderr.count('was changed since') == 1
    run(['rm', str(edited)], user=OWNER)
    assert run(command, cwd=checkout, env=env, user=OWNER).stderr == ''
    assert edited.read_bytes() == EASYCONFIGS[1].read_bytes()
    # a repository that an earlier version wrote, without the manifest: its files are taken for the script's own
    manifest = repo / '.lumi-user-repo.sha256'
    run(['rm', str(manifest)], user=OWNER)
    run(['bash', '-c', 'echo "# older" >> "$1"', 'edit', str(edited)], user=OWNER)
    assert run(command, cwd=checkout, env=env, user=OWNER).stderr == ''
    assert edited.read_bytes() == EASYCONFIGS[1].read_bytes() and manifest.is_file()


def test_lumi_user_repo_names_what_it_shadows_as_lumis_robot_path_finds_it(tmp_path):
    """LUMI's robot path (partition/container) holds the root of LUMI-EasyBuild-containers, whose easyconfigs are
    under easybuild/easyconfigs/, and EasyBuild finds an easyconfig by its name anywhere below a robot path: make
    lumi-user-repo names those it shadows, with EasyBuild-user's EASYBUILD_ROBOT_PATHS and without it (LUMI's
    LUMI-EasyBuild-contrib and LUMI_CONTAINER_REPOSITORY_ROOT's LUMI-EasyBuild-containers)."""
    containers = tmp_path / 'containers' / 'LUMI-EasyBuild-containers'
    theirs = containers / 'easybuild' / 'easyconfigs' / 'p' / 'PyTorch' / EASYCONFIGS[0].name
    theirs.parent.mkdir(parents=True)
    theirs.write_text("name = 'PyTorch'\n")
    repo = tmp_path / 'EasyBuild' / 'UserRepo' / 'easybuild'
    for robot_paths in ('%s:%s' % (repo / 'easyconfigs', containers), None):
        env = dict(base_env(), LUMI_CONTAINER_REPOSITORY_ROOT=str(tmp_path / 'containers'))
        if robot_paths:
            env['EASYBUILD_ROBOT_PATHS'] = robot_paths
        said = run(['tools/lumi-user-repo.sh', str(repo)], cwd=REPO, env=env, user=None).stdout
        assert said.count('shadows') == 1, said
        assert '%s shadows %s, which has the same name' % (repo / 'easyconfigs' / 'p' / 'PyTorch' / theirs.name,
                                                           theirs) in said


@pytest.mark.once_only('make lumi-user-repo, --avail-easyconfig-params and --dry-run start no container',
                       in_setuid_run=True)
def test_lumi_user_repo_target(tmp_path):
    """make lumi-user-repo puts the easyblock and the easyconfigs where LUMI's EasyBuild-user module looks: its
    include glob finds the easyblock, its robot path the easyconfigs."""
    prefix = tmp_path / 'EasyBuild'
    run(['make', '-s', 'lumi-user-repo', 'EBU_USER_PREFIX=%s' % prefix], cwd=REPO)
    repo = prefix / 'UserRepo' / 'easybuild'
    assert (repo / 'easyblocks' / 'generic' / 'singularitycontainer.py').read_bytes() == EASYBLOCK.read_bytes()
    assert sorted(p.name for p in (repo / 'easyconfigs' / 'p' / 'PyTorch').iterdir()) == [p.name for p in EASYCONFIGS]
    inst = Installation(tmp_path / 'eb')
    env = inst.env(EASYBUILD_INCLUDE_EASYBLOCKS='%s/*/*.py' % (repo / 'easyblocks'),
                   EASYBUILD_ROBOT_PATHS=str(repo / 'easyconfigs'))
    out = inst.eb('--avail-easyconfig-params', '--easyblock', 'SingularityContainer', env=env).stdout
    assert 'container_entry' in out and 'copy_image' in out
    name = 'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260225.eb'
    out = inst.eb('--dry-run', name, env=env).stdout
    assert 'PyTorch/2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260225' in out
