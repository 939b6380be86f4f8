"""make demo, the README's first command: it runs to the end and shows what it says it shows."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import require_runtime, require_tools

DEMO = Path(__file__).resolve().parent.parent / 'demo' / 'demo.py'


@pytest.mark.system
@pytest.mark.needs('image-src')  # its venv is packed, as on LUMI
def test_demo():
    require_runtime()
    require_tools('mksquashfs', 'unsquashfs', 'siftool')
    proc = subprocess.run([sys.executable, str(DEMO)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ), timeout=600)
    work = re.search(r'The install is in (\S+) \(remove it', proc.stdout)
    if work:
        shutil.rmtree(work.group(1))
    assert proc.returncode == 0, proc.stdout
    for line in ('in the container: VIRTUAL_ENV=/user-software/venv/demo',
                 "['an argument with spaces', '$HOME', '*']",
                 'nid005000',
                 '/user-software is read-only (SquashFS)',
                 'added later with venv-pip',
                 'user-software.packed',  # ls of the install: the venv stayed packed (the link to its generation),
                 'user-software.changes.squashfs',  # and in the generation the change is a layer on the SquashFS
                 'user-software.squashfs'):  # file
        assert line in proc.stdout.splitlines(), line
    assert 'Outside the container, with the module loaded, run: venv-pip install lumi-demo-extra\n' in proc.stdout
    assert proc.stdout.rstrip().endswith('(remove it when you are finished).')
