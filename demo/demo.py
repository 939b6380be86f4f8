"""make demo: build a small real SIF image, install it with eb and the SingularityContainer easyblock,
load the module with Lmod and use the container the way a LUMI user would."""
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from testkit.images import make_test_sif
from testkit.install import Installation, Missing, demo_easyconfig, run, write_wheel
from testkit.users import give, user


def step(text):
    print('\n\033[1m== %s\033[0m' % text, flush=True)


def show(inst, script):
    """Run commands in a shell with the module loaded, echoing each like a terminal session."""
    lines = ['echo %s; %s' % (shlex.quote('$ ' + line), line) for line in script.strip().splitlines()]
    out = inst.shell('module load Demo/1.0\n' + '\n'.join(lines))
    print(out.stdout.rstrip())


def build_wheel(workdir):
    """A tiny local wheel: the pip requirement installed in the container's venv at install time."""
    wheels = workdir / 'wheels'
    wheels.mkdir()
    write_wheel(wheels, 'lumi-demo-greeting', code='def hello():\n    return "hello from the venv"\n')
    write_wheel(wheels, 'lumi-demo-extra', code='MESSAGE = "added later with venv-pip"\n')
    return wheels


def main():
    work = Path(tempfile.mkdtemp(prefix='lumi-container-demo-'))
    # Everything from the install on runs as a user (testkit.users), as on LUMI, where nobody is root
    work.chmod(0o755)
    give(work, user())
    step('Building a small real SIF image (mksquashfs + siftool)')
    sif = make_test_sif(work / 'demo.sif')
    print(run(['siftool', 'list', str(sif)]).stdout.rstrip())

    step('Installing it with eb and the SingularityContainer easyblock (EasyBuild 5, Lmod), as the user %s' %
         user().name)
    inst = Installation(work / 'eb')
    shutil.copy(sif, inst.sources / 'demo.sif')
    wheels = build_wheel(work)
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(
        container_bind=['/tmp'], wrapped_commands=['python', 'pip'],
        pip_requirements=['lumi-demo-greeting'],
        pip_install_options=['--no-index', '--find-links=%s' % wheels]))
    print(ec.read_text())
    inst.eb(ec)
    installdir = inst.installdir('Demo', '1.0')
    print('installed in %s:' % installdir)
    print('  ' + '  '.join(sorted(p.name for p in installdir.iterdir())))

    step('module load Demo/1.0: the variables a job script uses')
    show(inst, '''
echo "SIF=$SIF"
echo "RUNSCRIPTS=$RUNSCRIPTS"
echo "SINGULARITY_BINDPATH=$SINGULARITY_BINDPATH"
echo "SINGULARITYENV_PREPEND_PATH=$SINGULARITYENV_PREPEND_PATH"
echo "SINGULARITY_OVERLAY=$SINGULARITY_OVERLAY"
''')

    step('Running in the container: start-shell, the python wrapper, singularity exec')
    show(inst, '''
start-shell -c 'echo "in the container: VIRTUAL_ENV=$VIRTUAL_ENV"; command -v python'
python -c 'import sys, lumi_demo_greeting; print(lumi_demo_greeting.hello(), "with Python", sys.version.split()[0])'
python -c 'import sys; print(sys.argv[1:])' "an argument with spaces" '$HOME' '*'
singularity exec "$SIF" get-master 'nid[005000-005003]'
touch /tmp/x-demo && singularity exec "$SIF" touch /user-software/x || echo "/user-software is read-only (SquashFS)"
''')
    step('Adding a package later: venv-pip (the venv stays packed, in user-software.packed: the change is a layer)')
    show(inst, '''
pip install lumi-demo-extra 2>&1 || true
venv-pip install --no-index --find-links=%s lumi-demo-extra 2>&1
python -c 'import lumi_demo_extra; print(lumi_demo_extra.MESSAGE)'
ls "$CONTAINERROOT" | grep user-software
ls "$CONTAINERROOT/user-software.packed/"
''' % shlex.quote(str(wheels)))
    print('\nAll done. The install is in %s (remove it when you are finished).' % work)


if __name__ == '__main__':
    try:
        main()
    except (subprocess.CalledProcessError, AssertionError, Missing) as err:
        sys.exit('demo failed: %s' % err)
