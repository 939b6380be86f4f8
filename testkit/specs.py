"""The specs of generate-ec's tests, and the image the LAIF ones describe: one text of each, that the tests vary.

    BASE, spec_text         an AMD image's spec (family amd, the default), with replacements and lines appended
    LAIF_BASE, laif_text    a LUMI AI Factory image's spec, likewise; LAIF_NAME: the easyconfig it gives
    INSPECT_SPEC            a LAIF spec with comments, which inspect --spec keeps (tests/test_generator_inspect.py)
    RELEASES_SPEC           three LAIF entries and comments, which releases --add keeps (tests/test_releases.py)
    SHARED_SPEC             a project's shared spec, which its members add to (tests/test_generator_shared.py)
    FULL_SBOM               the /.sbom.json of the full LAIF image of 20260225 (testkit.images.make_sbom_sif packs
                            it into a small SIF that inspect reads)

The tests' error messages name lines of these texts: the line numbers are written beside BASE and LAIF_BASE.
The specs and golden easyconfigs read from files are in testkit/data/generator.
"""

__all__ = ["BASE", "FULL_SBOM", "INSPECT_SPEC", "LAIF_BASE", "LAIF_NAME", "RELEASES_SPEC", "SHARED_SPEC", "laif_text",
           "spec_text"]

BASE = """\
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"
  rocm: "6.2.4"
  container_venv: pytorch
containers:
  - version: "2.7.1"
    date: "20250827"
    dockerhash: 0d479e852886
"""
# line numbers in BASE:      1 name, 2 homepage, 3 description, 4 defaults, 5 python, 6 rocm, 7 venv,
#                            8 containers, 9 version, 10 date, 11 dockerhash; appended lines start at 12

LAIF_BASE = """\
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"
  container_venv: pytorch
containers:
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260225_144743"
    image_variant: full
"""
# line numbers in LAIF_BASE: 1 name, 2 homepage, 3 description, 4 defaults, 5 python, 6 venv, 7 containers,
#                            8 family, 9 version, 10 rocm, 11 digest, 12 tag, 13 image_variant; appended from 14
LAIF_NAME = 'PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260225.eb'


def _varied(text, replace, append):
    for old, new in replace:
        if old not in text:
            raise ValueError('%r is not in the spec to replace' % old)
        text = text.replace(old, new)
    return text + append


def spec_text(replace=(), append=''):
    """BASE with each (old, new) of `replace` replaced and `append` appended."""
    return _varied(BASE, replace, append)


def laif_text(replace=(), append=''):
    """LAIF_BASE with each (old, new) of `replace` replaced and `append` appended."""
    return _varied(LAIF_BASE, replace, append)


INSPECT_SPEC = """\
# A spec with comments, which inspect --spec keeps.
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"  # the Python of all images
  container_venv: pytorch
containers:
  # the first release
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260124_092648"
    image_variant: full

# the settings of the LAIF images
family_defaults:
  laif: {container_entry: run, copy_image: false}
"""

# The torch and full images of 20260124 and the torch image of 20260225.
RELEASES_SPEC = """\
# PyTorch images; comments and layout stay when releases --add appends.
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"  # the Python of all images
  container_venv: pytorch
containers:
  # the first releases
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260124_092648"
    image_variant: torch
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260124_092648"
    image_variant: full
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260225_144743"
    image_variant: torch

# the settings of the LAIF images
family_defaults:
  laif: {container_entry: run, copy_image: false}
"""

SHARED_SPEC = """\
# A project's spec: its members add the new images.
name: PyTorch
homepage: https://pytorch.org/
description: Test spec.
defaults:
  container_python_version: "3.12"
  container_venv: pytorch
containers:
  - family: laif
    version: "2.9.1"
    rocm: "6.4.4"
    digest: u24r64f21m43t29
    tag: "20260124_092648"
    image_variant: full
"""

FULL_SBOM = {
    'apt': [{'name': 'libc6', 'version': '2.39-0ubuntu8.6'}, {'name': 'python3.12', 'version': '3.12.3-1ubuntu0.8'},
            {'name': 'rocm-core', 'version': '6.4.4.60404-129~24.04'}],
    'pip': [{'name': 'numpy', 'version': '2.1.3'}, {'name': 'torch', 'version': '2.9.1+rocm6.4.4'},
            {'name': 'vllm', 'version': '0.15.1+rocm644'}, {'name': 'deepspeed', 'version': '0.18.6'},
            {'name': 'flash_attn', 'version': '2.8.3'}, {'name': 'transformers', 'version': '4.57.1'}],
}
