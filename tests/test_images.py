"""The test images are what a real build makes: the /.singularity.d layout of `apptainer build`, whichever way they are
packed; and an image with python3 only is installed like the others."""
import subprocess

import pytest

from support import require, require_runtime, require_tools
from testkit.images import ROOTFS, build_sif, image_layer, make_test_sif, sif_partition_offset
from testkit.install import APPTAINER, install_demo, run

pytestmark = pytest.mark.runtime


def singularity_d(sif, dest):
    """{path: content} of the image's /.singularity.d, read with unsquashfs (no runtime involved)."""
    run(['unsquashfs', '-no-progress', '-quiet', '-o', str(sif_partition_offset(sif)), '-d', str(dest), str(sif),
         '.singularity.d'])
    root = dest / '.singularity.d'
    return {str(path.relative_to(root)): (path.read_text() if path.is_file() else None, path.stat().st_mode & 0o777)
            for path in sorted(root.rglob('*'))}


@pytest.mark.once_only('the images are built (by root, with make setup\'s Apptainer) and read with unsquashfs: no '
                       'container', in_setuid_run=True)
def test_test_images_have_the_layout_of_apptainer_build(tmp_path):
    """A test image packed with mksquashfs and siftool against one that the real apptainer build makes from the
    same tree: the same files with the same text and modes in /.singularity.d, but for the labels and the
    definition, which a build writes anew. Both built as root: images are made by whoever sets up the machine (on
    LUMI, the site or the AI Factory), and `apptainer build` of a root-owned tree needs root (or fakeroot)."""
    require_tools('mksquashfs', 'unsquashfs', 'siftool')
    require(APPTAINER.exists(), 'Apptainer in %s (make setup installs it)' % APPTAINER)
    tree = tmp_path / 'tree'
    subprocess.run(['cp', '-al', str(ROOTFS), str(tree)], check=True)
    image_layer(tree, laif={'laif-base': '1.0'}, env={'GREETING': 'hello'})
    ours = singularity_d(build_sif(tree, tmp_path / 'siftool.sif', 'siftool'), tmp_path / 'ours')
    real = singularity_d(build_sif(tree, tmp_path / 'apptainer.sif', 'apptainer'), tmp_path / 'real')
    for rebuilt in ('labels.json', 'Singularity'):
        assert rebuilt in ours and rebuilt in real
        del ours[rebuilt], real[rebuilt]
    # a build keeps the definitions of the builds before it: here the one that made the root file system
    history = {name for name in real if name.startswith('bootstrap_history')}
    assert history
    assert ours == {name: real[name] for name in real if name not in history}
    for name in ('env/01-base.sh', 'env/90-environment.sh', 'env/94-appsbase.sh', 'env/95-apps.sh', 'env/99-base.sh',
                 'env/99-runtimevars.sh', 'actions/exec', 'actions/run', 'actions/shell', 'libs', 'runscript',
                 'startscript'):
        assert name in real, name
    assert "export GREETING=hello\n" in real['env/90-environment.sh'][0]
    assert 'LAIF_RUNSCRIPT_RAN=yes' in real['runscript'][0]


@pytest.mark.once_only('which Python the install finds is the easyblock\'s, from one container start that is every '
                       'install\'s (the other tests, under both runtimes)')
def test_an_image_with_python3_only(tmp_path):
    """No python in the image, only python3: the install finds it, and the wrappers run the venv's python."""
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'siftool')
    sif = make_test_sif(tmp_path / 'python3-only.sif', python_command=False)
    inst, _ = install_demo(tmp_path, sif)
    out = inst.module_shell('Demo/1.0', 'python -c "import sys; print(sys.prefix)"\n'
                                        'singularity exec "$SIF" sh -c "command -v python3; command -v python"')
    assert out.stdout.split() == ['/user-software/venv/demo', '/user-software/venv/demo/bin/python3',
                                  '/user-software/venv/demo/bin/python']
    assert out.stderr == ''
