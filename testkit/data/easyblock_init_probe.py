"""What easybuild-easyblocks' own tests demand of every easyblock when it is made from an easyconfig (their
test/easyblocks/init_easyblocks.py), checked in the EasyBuild that runs this program.

Run by an EasyBuild venv's Python with the easyblock included (EASYBUILD_INCLUDE_EASYBLOCKS, as `eb` takes it):
    python easyblock_init_probe.py <directory for the easyconfig>
It prints one JSON object: the module the easyblock came from and the list of what is wrong (empty: nothing).
"""
import json
import os
import sys

from easybuild.framework.easyconfig import MANDATORY
from easybuild.framework.easyconfig.easyconfig import EasyConfig, get_easyblock_class
from easybuild.tools import environment, run
from easybuild.tools.options import set_up_configuration

EASYBLOCK = 'SingularityContainer'
# EasyBuild 5 deprecates these (run_shell_cmd replaces them): an easyblock must not even hold them
DEPRECATED = ['run_cmd', 'run_cmd_qa']
# An easyblock may hold these only as they are in their present home
MOVED = {'modify_env': environment, 'read_environment': environment, 'parse_log_for_error': run}
# Old names of EasyBuild functions: the new name, which an easyblock must use instead
RENAMED = {'source_path': 'source_paths', 'get_avail_core_count': 'get_core_count', 'get_os_type': 'get_kernel_name',
           'det_full_ec_version': 'det_installversion'}


def extra_options_problems(extra_options):
    """extra_options: a dict of easyconfig parameter names (Python names) to [default, help, category]."""
    if not isinstance(extra_options, dict):
        return ['extra_options() is a %s, not a dict' % type(extra_options).__name__]
    problems = []
    for name, value in extra_options.items():
        if not name.isidentifier():
            problems.append('the easyconfig parameter name %r is not a Python name' % name)
        if not (isinstance(value, list) and len(value) == 3):
            problems.append('extra_options()[%r] is not a list [default, help, category]: %r' % (name, value))
    return problems


def write_easyconfig(directory, extra_options):
    """The easyconfig of upstream's test: no sources, the mandatory parameters given."""
    lines = ['easyblock = %r' % EASYBLOCK, "name = 'foo'", "version = '1.3.2'", "homepage = 'http://example.com'",
             "description = 'Dummy easyconfig file.'", 'toolchain = SYSTEM', 'sources = []']
    lines += ['%s = %r' % (name, value[0] or 'foo') for name, value in extra_options.items() if value[2] == MANDATORY]
    path = os.path.join(directory, 'foo-1.3.2.eb')
    with open(path, 'w') as handle:
        handle.write('\n'.join(lines) + '\n')
    return path


def name_problems(module):
    """What the easyblock's module holds of EasyBuild's deprecated, moved or renamed names."""
    problems = ['%s holds %s, deprecated: use run_shell_cmd' % (module.__name__, name)
                for name in DEPRECATED if hasattr(module, name)]
    problems += ['%s holds %s, but not the one of %s' % (module.__name__, name, home.__name__)
                 for name, home in MOVED.items()
                 if hasattr(module, name) and getattr(module, name) is not getattr(home, name, None)]
    problems += ['%s holds %s, which EasyBuild renamed %s' % (module.__name__, old, new)
                 for old, new in RENAMED.items() if hasattr(module, old)]
    return problems


def main(directory):
    set_up_configuration(args=[], silent=True)
    easyblock_class = get_easyblock_class(EASYBLOCK)
    extra_options = easyblock_class.extra_options()
    problems = extra_options_problems(extra_options)
    app = easyblock_class(EasyConfig(write_easyconfig(directory, extra_options)))
    module = sys.modules[app.__module__]
    problems += name_problems(module)
    app.close_log()
    os.remove(app.logfile)
    print(json.dumps({'module': module.__name__, 'problems': problems}))


if __name__ == '__main__':
    main(sys.argv[1])
