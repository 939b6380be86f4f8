"""ROCm, the platform of LUMI's AMD images and of the LUMI AI Factory's: an entry gives ``rocm``, which names the
easyconfig (-rocm-<rocm>) and the description shows (ROCm <rocm>); and what generate-ec inspect reads of it in an
image's software list."""

import re

from singularitycontainer_src.parameters import VERSION, pattern_problem
from generator.family import Family, Platform

ROCM = Platform('rocm', 'ROCm', pattern_problem(VERSION, 'a valid ROCm version (e.g. 6.2.4)'))
# The Debian package whose version is the image's ROCm's
ROCM_PACKAGE = 'rocm-core'


class RocmFamily(Family):
    """A family of images built on ROCm."""

    PLATFORM = ROCM


def rocm_core_version(apt):
    """The ROCm version of an image whose software list ({apt name: version}) has rocm-core, else None."""
    match = re.match(r'[0-9]+\.[0-9]+\.[0-9]+', apt.get(ROCM_PACKAGE, ''))
    return match.group(0) if match else None
