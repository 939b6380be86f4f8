"""How the install starts a container: the twin of the installed library's in_container (scripts/lib/container.sh),
which the tests hold to the same command line."""
import os
import re

# Options for every container start of the module's commands and of the install, after the entry (exec or run):
# set by a site's module or the user, as singularity-hpc's SINGULARITY_OPTS
RUNTIME_OPTIONS_VARIABLE = 'SINGULARITYCONTAINER_RUNTIME_OPTIONS'
# The kinds of runtime that container_runtime_options names
RUNTIME_KINDS = ('apptainer', 'singularity')


def runtime_kind(runtime):
    """'apptainer' for Apptainer (also as 'singularity', a link to it), else 'singularity' (SingularityCE)."""
    real = runtime if os.path.basename(runtime) == 'apptainer' else os.path.realpath(runtime)
    return 'apptainer' if os.path.basename(real) == 'apptainer' else 'singularity'


def option_words(text):
    """Options as bash's read splits them: words at spaces, tabs and newlines, nothing else taken apart or expanded."""
    return [word for word in re.split('[ \t\n]+', text) if word]


def container_command(runtime, entry, image, command, own_options, environ):
    """The command line that starts command in the container of image: the runtime, the entry, the install's own
    options for this kind of runtime (own_options: container_runtime_options), the options of
    RUNTIME_OPTIONS_VARIABLE in environ, the image, the command."""
    options = own_options.get(runtime_kind(runtime), '') + ' ' + environ.get(RUNTIME_OPTIONS_VARIABLE, '')
    return [runtime, entry] + option_words(options) + [image] + list(command)
