"""The easyconfig parameters: one table (PARAMETERS) for extra_options, the checks of the easyblock and those of
generate-ec. A check returns what is wrong with one value (or an entry of a list or dict), or None. Shapes say what
a parameter's value may be; each walks a value once and returns what is wrong with it and where."""
import re
from collections import OrderedDict, namedtuple

from .layout import (CACHE_DIRS, CACHE_ROOT, CONTAINER_ENTRIES, CONTAINER_USER_SOFTWARE, GPU_DEVICE_VARIABLES,
                     LUMI_CENTRAL_SIF_DEFAULT, LUMI_CENTRAL_SIF_SUBDIR, MODULE_CONTAINER_VARIABLES, MODULE_FAMILY)
from .container import RUNTIME_KINDS, RUNTIME_OPTIONS_VARIABLE
from .scripts import MODULE_COMMANDS


# Names and versions the parameters take
VENV_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.-]*\Z')
COMMAND_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z')
ENV_NAME = re.compile(r'[A-Za-z_][A-Za-z0-9_]*\Z')
MODULE_NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.+/-]*\Z')
DISTRIBUTION_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.+-]*\Z')
VERSION = re.compile(r'[0-9]+(\.[0-9]+)*([.+-][0-9A-Za-z]+)*\Z')
PYTHON_VERSION = re.compile(r'[0-9]+\.[0-9]+\Z')
# newlines, NUL and the other control characters; a tab is fine
CONTROL_CHARACTER = re.compile(r'[\x00-\x08\x0a-\x1f\x7f]')
# What Apptainer and SingularityCE take as options of a bind (src:dst:opts, comma-separated): read-only or not, and
# for an image file bound, the path in it and the partition of a SIF file
BIND_OPTION = re.compile(r'(ro|rw|image-src=(/[^,]*)?|id=[0-9]+)\Z')


def pattern_problem(regex, what):
    """A check: the value must match regex, else it is not what."""
    def problem(value):
        return None if regex.match(value) else "%r is not %s" % (value, what)
    return problem


def one_line_problem(value):
    if CONTROL_CHARACTER.search(value):
        return "%r must not contain a newline or other control characters" % value
    return None


def no_nul_problem(value):
    return "%r must not contain a NUL character" % value if '\0' in value else None


def container_env_value_problem(value):
    """Apptainer (and SingularityCE, as far as known) evaluates SINGULARITYENV_* values in a shell in the container:
    $, backquotes and backslashes would be expanded or run there, so the value would not arrive as written."""
    if re.search(r'[$`\\]', value):
        return ("%r contains $, ` or \\, which the container runtime expands in SINGULARITYENV_* values; give it in "
                "container_env_defaults, which reaches the container as written" % value)
    return one_line_problem(value)


def absolute_path_problem(value):
    return one_line_problem(value) or (None if value.startswith('/') else "%r is not an absolute path" % value)


def bind_fields(bind):
    """A bind as the runtime reads it, src[:dst[:opts]]: (source, destination, options), the destination the source
    where none is given. The one reading of the grammar in Python; the module's Lua and Tcl and the library's bash
    have one each, held to this one by tests/test_render.py."""
    source, _, rest = bind.partition(':')
    destination, _, options = rest.partition(':')
    return source, destination or source, options


def bind_problem(value):
    """One bind as the runtime takes it: src[:dst[:opts]], the options comma-separated (BIND_OPTION)."""
    problem = one_line_problem(value)
    if problem:
        return problem
    source, destination, options = bind_fields(value)
    if re.search(r'\s', value) or ',' in source + destination:
        return "%r must not contain whitespace, nor commas but between options" % value
    # (an empty destination after a ':' is no destination to the runtime, not the source: bind_fields has the source)
    if ':' in options or not all(path.startswith('/') for path in value.split(':')[:2]):
        return "%r is not an absolute host path, or 'src:dst[:opts]' with absolute paths" % value
    for option in options.split(',') if value.count(':') == 2 else []:  # ('src:dst:' has one option, empty)
        if not BIND_OPTION.match(option):
            return ("%r has the bind option %r, which the container runtime does not know: ro, rw, image-src=<path "
                    "in the image> or id=<partition number>, comma-separated" % (value, option))
    return None


# The container runtime's names: a wrapper of one would come first on PATH and start itself, for ever
RUNTIME_COMMANDS = ('singularity', 'apptainer')


def wrapped_command_problem(value):
    """A command name that is not one of the module's own commands (a wrapper would replace it), nor the runtime's
    (a wrapper would start itself)."""
    problem = pattern_problem(COMMAND_NAME, 'a command name')(value)
    if problem is None and value in MODULE_COMMANDS:
        problem = "%r is a command of the module itself (%s): leave it out" % (value, ', '.join(MODULE_COMMANDS))
    if problem is None and value in RUNTIME_COMMANDS:
        problem = ("%r is the container runtime, which the wrappers start: a wrapper of it would start itself. Leave "
                   "it out (singularity exec $SIF ... runs a command in the container)" % value)
    return problem


# What SingularityCE and Apptainer refuse to take from SINGULARITYENV_* (with a warning at every container start):
# the home directory is set with --home, and these two are the runtime's own settings
RUNTIME_REFUSED_ENV = ('HOME', 'SINGULARITY_SHELL', 'SINGULARITY_APPNAME')


def container_env_name_problem(value):
    problem = pattern_problem(ENV_NAME, 'a valid environment variable name')(value)
    if problem is None and value in MODULE_CONTAINER_VARIABLES:
        problem = ("%r is set by the module itself (the virtual environment and /runscripts come first on PATH): "
                   "leave it out" % value)
    if problem is None and value in RUNTIME_REFUSED_ENV:
        problem = ("%r is refused by the container runtime in SINGULARITYENV_* (it warns at every start and leaves "
                   "it unset): leave it out%s" % (value, " (the home directory: the runtime's --home, "
                                                         "SINGULARITY_HOME)" if value == 'HOME' else ''))
    return problem


def gpu_vendor_problem(value):
    return None if value in GPU_DEVICE_VARIABLES else "%r is not one of %s" % (value, ', '.join(GPU_DEVICE_VARIABLES))


def runtime_kind_problem(value):
    return None if value in RUNTIME_KINDS else "%r is neither 'apptainer' nor 'singularity'" % value


def runtime_options_problem(value):
    """Options are split at blanks, as the user's RUNTIME_OPTIONS_VARIABLE: a quote or a $ would reach the runtime as
    it is written."""
    if re.search(r'[\'"$`\\]', value):
        return ("%r contains a quote, $, ` or \\: the options are split into words at blanks and reach the runtime as "
                "written, unquoted and unexpanded" % value)
    return one_line_problem(value)


def entry_problem(value):
    return None if value in CONTAINER_ENTRIES else "%r is neither 'exec' nor 'run'" % value


TYPE_NAMES = [(bool, 'a boolean'), (str, 'a string'), (int, 'an integer'), (float, 'a float'), (list, 'a list'),
              (tuple, 'a tuple'), (dict, 'a dict'), (type(None), 'None')]
# What a shape expects of a value, in Python's words (generate-ec has YAML's)
STRING, LIST_OF_STRINGS, DICT, BOOL = 'a string', 'a list of strings', 'a dict', 'True or False'


def type_name(value):
    return next((name for kind, name in TYPE_NAMES if isinstance(value, kind)), 'a %s' % type(value).__name__)


class Problem(namedtuple('Problem', 'path text value expected in_key')):
    """What a shape's walk finds wrong, and where: path () is the value itself, (2,) a list's entry, ('KEY',) a
    dict's entry (in_key: its key, not its value). text says what is wrong; None: the value is not what the shape
    expected there (STRING, LIST_OF_STRINGS, DICT or BOOL)."""

    @property
    def where(self):
        """The place as an easyconfig names it: '', '[2]', "['KEY']"."""
        return ''.join('[%r]' % step for step in self.path)

    def __str__(self):
        if self.text is not None:
            return self.text
        shown = '' if self.value is None else ' (%r)' % (self.value,)
        return 'must be %s, not %s%s' % (self.expected, type_name(self.value), shown)


Problem.__new__.__defaults__ = (None, None, False)  # value, expected, in_key


def text_problems(value, check, may_be_empty, path=(), in_key=False):
    """The walk of one text (a text parameter's value, or an entry, a key or a value of a list or dict): a string
    that check (what is wrong with it, or None) takes; not empty or blank, unless it may be."""
    if not isinstance(value, str):
        return [Problem(path, None, value, STRING, in_key)]
    problem = check(value) if may_be_empty or value.strip() else 'must not be empty'
    return [Problem(path, problem, value, None, in_key)] if problem else []


class Shape(object):
    """What a parameter's value may be: walk(value) returns what is wrong with it, a list of Problem."""

    @property
    def given(self):
        """The shape of a value that is given: a spec gives one or leaves the key out (the default applies)."""
        return self

    def walk(self, value):
        raise NotImplementedError


class Text(Shape):
    """A string that check takes; empty only if check takes ''."""

    def __init__(self, check=one_line_problem):
        self.check = check

    def walk(self, value):
        return text_problems(value, self.check, self.check('') is None)


class OptionalText(Text):
    """A Text, or None: not set."""

    @property
    def given(self):
        return Text(self.check)

    def walk(self, value):
        return [] if value is None else Text.walk(self, value)


class Bool(Shape):
    """True or False."""

    def walk(self, value):
        return [] if isinstance(value, bool) else [Problem((), None, value, BOOL)]


class ListOf(Shape):
    """A list (or tuple) of strings that check takes, none empty; unique: none twice."""

    def __init__(self, check=one_line_problem, unique=False):
        self.check = check
        self.unique = unique

    def walk(self, value):
        if not isinstance(value, (list, tuple)):
            return [Problem((), None, value, LIST_OF_STRINGS)]
        problems, first = [], {}
        for index, entry in enumerate(value):
            found = text_problems(entry, self.check, False, (index,))
            if not found and self.unique and entry in first:
                found = [Problem((index,), '%r is listed twice (also at index %d)' % (entry, first[entry]), entry)]
            if not found:
                first.setdefault(entry, index)
            problems += found
        return problems


class DictOf(Shape):
    """A dict of strings that key_check takes to strings that value_check takes (empty where the check takes it:
    a variable may be set to '')."""

    def __init__(self, key_check, value_check=one_line_problem):
        self.key_check = key_check
        self.value_check = value_check

    def walk(self, value):
        if not isinstance(value, dict):
            return [Problem((), None, value, DICT)]
        problems = []
        for key, entry in value.items():
            problems += text_problems(key, self.key_check, True, (key,), in_key=True)
            problems += text_problems(entry, self.value_check, True, (key,))
        return problems


# An easyconfig parameter of this easyblock: its name, default and help (extra_options), and its shape: what its value
# may be (checked by check_parameters before anything is copied, and by generate-ec in a spec); allowed: said in the
# easyblock's error message.
Parameter = namedtuple('Parameter', 'name default help shape allowed')


# The parameters, in the order an easyconfig gives them (generate-ec writes them in this order): where the image is
# and how it starts, the binds and the environment, the virtual environment, the commands, the checks.
PARAMETERS = OrderedDict((parameter.name, parameter) for parameter in [
    Parameter('central_sif_dir', None,
              "Directory with a central copy of the image. eb takes the image from there when it is there (nothing "
              "is downloaded or copied into the source path), and the module falls back to it when the image in the "
              "install dir is gone (default for the module: $LUMI_CONTAINER_REPOSITORY_ROOT/%s if that variable is "
              "set when the module loads, else %s)" % (LUMI_CENTRAL_SIF_SUBDIR, LUMI_CENTRAL_SIF_DEFAULT),
              OptionalText(absolute_path_problem), "an absolute path, or None"),
    Parameter('copy_image', True,
              "Copy the image into the install dir. False puts a symbolic link to it there instead, and the module "
              "uses the image where it is: for images that stay in a central place for good, such as the 20+ GB "
              "LUMI AI Factory images",
              Bool(), "True or False"),
    Parameter('container_entry', 'exec',
              "How commands start in the container: 'exec' runs them directly, 'run' through the image's runscript "
              "(singularity run), for images whose runscript sets things up and ends in exec \"$@\", such as the "
              "LUMI AI Factory images",
              Text(entry_problem), "'exec' or 'run'"),
    Parameter('container_runtime_options', {},
              "Options of the runtime's exec and run for every container the module's commands and the install start, "
              "by the kind of runtime ({'singularity': '--no-eval'}: 'apptainer' is Apptainer, also as 'singularity'; "
              "'singularity' is SingularityCE), split into words at blanks; %s in the environment (a site's module, or "
              "the user) adds its own after them" % RUNTIME_OPTIONS_VARIABLE,
              DictOf(runtime_kind_problem, runtime_options_problem),
              "a dict of 'apptainer' or 'singularity' to options split at blanks, without quotes, $, ` or \\"),
    Parameter('gpu_vendor', 'amd',
              "The GPUs the image drives: 'amd' (ROCm), 'intel' (Level Zero) or 'nvidia' (CUDA), or 'none'. The "
              "run scripts give each rank its device with the vendor's variable (%s) and count the devices of a "
              "node by it; for 'nvidia' the module sets SINGULARITY_NV=1 and APPTAINER_NV=1, so that the runtime "
              "binds NVIDIA's driver libraries (--nv) for the wrappers and a plain singularity exec" %
              ', '.join(variable for variable in GPU_DEVICE_VARIABLES.values() if variable),
              Text(gpu_vendor_problem), ' or '.join("'%s'" % vendor for vendor in GPU_DEVICE_VARIABLES)),
    Parameter('container_init', '',
              "Shell code run in the container before Python is used, e.g. 'source /opt/miniconda3/bin/activate "
              "pytorch' for images before 2025; empty for images that set up their environment themselves",
              Text(no_nul_problem), "shell code, as a string"),
    Parameter('container_bind', [],
              "Host paths bound in the container (SINGULARITY_BINDPATH), each 'path' or 'src:dst[:opts]': a site's "
              "file systems and the host libraries its images use (generate-ec's families give LUMI's and Dawn's); "
              "the module binds those whose source is a directory or a file on the node where it is loaded; a link "
              "bound at its own path (a library's soname) brings the files it links to, at their own paths",
              ListOf(bind_problem, unique=True),
              "a list of absolute host paths or 'src:dst[:opts]' with absolute paths, one bind per entry, each once"),
    Parameter('container_env', {},
              "Environment variables set in the container, as SINGULARITYENV_<KEY> (and APPTAINERENV_<KEY>): they "
              "win over the user's own values. The runtime expands $, ` and \\ in them: such values go in "
              "container_env_defaults",
              DictOf(container_env_name_problem, container_env_value_problem),
              "a dict of variable names (not %s) to one-line values without $, ` and \\" %
              ', '.join(MODULE_CONTAINER_VARIABLES)),
    Parameter('container_env_defaults', {},
              "Environment defaults for the container: set by the module as plain variables, which the runtime "
              "passes in as they are, only where the user has none, so that a user's own value wins, also one "
              "exported after the load",
              DictOf(pattern_problem(ENV_NAME, 'a valid environment variable name')),
              "a dict of variable names to one-line values"),
    Parameter('container_venv', None,
              "Name of the virtual environment in %s/venv; default: the software name in lower case" %
              CONTAINER_USER_SOFTWARE,
              OptionalText(pattern_problem(VENV_NAME, 'a valid virtual environment name')),
              "letters, digits and '._-', not starting with '.' or '-' (None: the software name in lower case)"),
    Parameter('pip_requirements', [],
              "Requirement lines installed with pip in the virtual environment at install time, in pip's "
              "requirements file format",
              ListOf(unique=True), "a list of requirement lines, one per entry, each once"),
    Parameter('pip_install_options', [],
              "Extra options for 'pip install', e.g. ['--no-index', '--find-links=/path/to/wheels'] for a site "
              "without network",
              ListOf(), "a list of options, one per entry"),
    Parameter('squash_user_software', True,
              "Pack user-software/ into user-software.squashfs after installing the pip requirements (without "
              "requirements, the empty virtual environment stays a directory, ready for pip install)",
              Bool(), "True or False"),
    Parameter('wrapped_commands', [],
              "Commands that get a wrapper in bin/ running them in the container, e.g. ['python', 'pip', "
              "'torchrun']",
              ListOf(wrapped_command_problem, unique=True),
              "a list of command names (letters, digits and '_.+-'), each once, none of the module's own nor the "
              "runtime's"),
    Parameter('container_cache_dirs', CACHE_DIRS,
              "Cache directories the module sets where the user has not set them ({'VARIABLE': 'subdirectory'}), "
              "so that PyTorch's and its tools' caches stay off $HOME (quota, Lustre) and apart per job and node: "
              "%s/<user>-caches-<job>-<node>/<subdirectory>, private to the user, created when the module loads" %
              CACHE_ROOT,
              DictOf(pattern_problem(ENV_NAME, 'a valid environment variable name'),
                     pattern_problem(COMMAND_NAME, 'a directory name (letters, digits and \'_.+-\')')),
              "a dict of variable names to subdirectory names"),
    Parameter('torch_runscripts', False,
              "Write the run scripts for torch.distributed jobs started by srun, mpiexec or mpirun: "
              "conda-python-distributed, torchrun-distributed, distributed-env, get-master and master-port",
              Bool(), "True or False"),
    Parameter('container_python_version', None,
              "Python version (e.g. '3.12') the sanity check expects in the container; not checked if None",
              OptionalText(pattern_problem(PYTHON_VERSION, 'a valid Python version (e.g. 3.12)')),
              "a version such as '3.12', or None"),
    Parameter('container_components', {},
              "Python distributions the image ships and their versions ({'name': 'version'}), checked in the "
              "sanity check; '2.9.1' also matches '2.9.1+rocm6.4.4'",
              DictOf(pattern_problem(DISTRIBUTION_NAME, 'a valid component name'),
                     pattern_problem(VERSION, 'a valid version')),
              "a dict of distribution names to versions such as '2.9.1'"),
    Parameter('container_conflicts', [],
              "Modules that must not be loaded together with this one, as their binds would collide with its binds, "
              "such as LUMI's singularity-AI-bindings (other modules of this easyblock are swapped out anyway: Lmod "
              "family %s)" % MODULE_FAMILY,
              ListOf(pattern_problem(MODULE_NAME, 'a module name')), "a list of module names"),
])


def venv_name(software_name, container_venv):
    """The virtual environment's name: container_venv, by default the software name in lower case (generate-ec
    names it in the module's description too)."""
    return container_venv or software_name.lower()


def kernel_name(full_mod_name):
    """The default name of the module's Jupyter kernel: its full name as Jupyter allows kernel names to be."""
    return re.sub(r'[^a-z0-9._-]', '-', full_mod_name.lower())


def container_venv_path(name):
    """The virtual environment called name, as the container sees it."""
    return '%s/venv/%s' % (CONTAINER_USER_SOFTWARE, name)


# A rule between parameters: problem(*values of names) says what is wrong between their values (each valid on its
# own), or None; said of the first of names. check_parameters and generate-ec check the rules after the shapes.
ParameterRule = namedtuple('ParameterRule', 'names problem')
# None so far. squash_user_software without pip_requirements is no mistake, nor is its default: there is nothing to
# pack, and the empty virtual environment stays a directory (install_step).
PARAMETER_RULES = []


def parameter_problems(name, value):
    """What is wrong with the value of easyconfig parameter name: a list of (where, problem), where being '' or
    the entry ('[1]', "['KEY']")."""
    return [(problem.where, str(problem)) for problem in PARAMETERS[name].shape.walk(value)]


def rule_problems(values):
    """What the rules between parameters find wrong in values ({name: value} of every parameter): a list of (name,
    problem). A rule over a value that is wrong on its own leaves it to its own problem."""
    found = []
    for rule in PARAMETER_RULES:
        if not any(PARAMETERS[name].shape.walk(values[name]) for name in rule.names):
            problem = rule.problem(*[values[name] for name in rule.names])
            if problem:
                found.append((rule.names[0], problem))
    return found


def easyconfig_problems(values):
    """What is wrong with values ({name: value} of every parameter of this easyblock), a line for each problem:
    those of each parameter (in the order of the names), then those between them."""
    problems = ["%s%s: %s (allowed: %s)" % (name, where, problem, parameter.allowed)
                for name, parameter in sorted(PARAMETERS.items())
                for where, problem in parameter_problems(name, values[name])]
    return problems + ['%s: %s' % found for found in rule_problems(values)]
