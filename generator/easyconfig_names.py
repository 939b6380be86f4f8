"""The easyconfig fields that generate-ec writes besides the easyblock's parameters, and the names it writes them
under: by default the names that EasyBuild 4.9 and 5 both read; for a spec with ``easybuild: 5``, the names that
EasyBuild 5 gives some of them (version_suffix for versionsuffix, ...). The source of those is EasyBuild 5's own table,
ALTERNATIVE_EASYCONFIG_PARAMETERS ({EasyBuild 5's name: the name both read}), from the EasyBuild installed beside
generate-ec, if any (generate-ec needs it for nothing else).
"""

try:
    from easybuild.tools.version import VERSION as EASYBUILD_VERSION
except ImportError:
    EASYBUILD_VERSION = None
try:
    from easybuild.framework.easyconfig.parser import ALTERNATIVE_EASYCONFIG_PARAMETERS
except ImportError:  # EasyBuild 4.9 knows the names both read only (or there is no EasyBuild)
    ALTERNATIVE_EASYCONFIG_PARAMETERS = {}

FIELDS = ('easyblock', 'name', 'version', 'versionsuffix', 'homepage', 'whatis', 'description', 'toolchain', 'sources',
          'checksums', 'moduleclass')
EASYBUILD_5_NAMES = {old: new for new, old in ALTERNATIVE_EASYCONFIG_PARAMETERS.items() if old in FIELDS}


def names(easybuild):
    """{field: the name it is written under} in easyconfigs for ``easybuild`` ('5'; None: the names both read)."""
    renamed = EASYBUILD_5_NAMES if easybuild == '5' else {}
    return {field: renamed.get(field, field) for field in FIELDS}


def easybuild_5_problem():
    """None if generate-ec knows EasyBuild 5's names, else what to do."""
    if EASYBUILD_5_NAMES:
        return None
    found = 'EasyBuild %s' % EASYBUILD_VERSION if EASYBUILD_VERSION else 'none'
    return ("5 needs EasyBuild 5's names, which generate-ec reads from the EasyBuild installed with it, and that is "
            "%s: install easybuild-framework 5 beside generate-ec" % found)


def renamed_fields():
    """What easybuild: 5 changes, as text: 'version_suffix for versionsuffix, env_mod_category for moduleclass'."""
    return ', '.join('%s for %s' % (EASYBUILD_5_NAMES[field], field) for field in FIELDS
                     if field in EASYBUILD_5_NAMES)
