"""The module's plan (SingularityContainer.module_plan): what a module does at load, as a list of steps, plain data.
Each step is one call of a primitive of module/primitives.lua and primitives.tcl (LUA_MODULE_PRIMITIVES and
TCL_MODULE_PRIMITIVES), where each rule is written once per language; the two emitters here only write those calls.
A step's field `into` names the variable its result goes to, which a later step's Var reads."""
from collections import namedtuple

from .sources import source
from .text import lua_str, tcl_str


# ---------------------------------------------------------------------------------------------------------------
# The module's primitives in Lua and Tcl, which the calls written from the module's plan use (emit_module_logic).
# Every variable the module changes gets back exactly the value it had before the load (pushenv), and Lmod's memory
# of that value is dropped when this module unloads (see restorable_env).
# ---------------------------------------------------------------------------------------------------------------

LUA_MODULE_PRIMITIVES = source('module/primitives.lua')

TCL_MODULE_PRIMITIVES = source('module/primitives.tcl')

Var = namedtuple('Var', 'name')  # the value of an earlier step (its into)
Family = namedtuple('Family', 'name')  # one module of this family at a time
Conflict = namedtuple('Conflict', 'name')
# The image (path), else the central copy of name; stops: a load without either stops with an error
Image = namedtuple('Image', 'into path name central_dir central_subdir central_default module stops')
SetRestorable = namedtuple('SetRestorable', 'name value')  # given back on unload (restorable_env)
# The venv's form in installdir (layers, file, directory or missing), as the packed venv's record says (else its files)
VenvForm = namedtuple('VenvForm', 'into installdir record squashfs changes directory')
# SINGULARITY_BINDPATH and APPTAINER_BINDPATH: the user's binds, then those sources that exist on the node, always,
# and the user software of installdir for its form (squashfs, or directory)
Binds = namedtuple('Binds', 'sources always installdir form squashfs directory module')
# The user's personal layer (README "Your own packages on a shared install") where the venv's form is layers and the
# user's personal dir (PERSONAL_LAYERS_VAR, else XDG_DATA_HOME's subdir, then module) has the link packed: the overlay
# entries that check (sh) prints (the install's layers it was made on, then it), which also says on stderr why it is
# left out; else nothing, and no process
PersonalLayer = namedtuple('PersonalLayer', 'into form var subdir module packed check')
# SINGULARITY_OVERLAY and APPTAINER_OVERLAY: the user's overlays, then the layers of the packed venv for its form, or
# the personal layer's entries (nothing: none)
Overlays = namedtuple('Overlays', 'installdir form squashfs changes personal')
PrependPath = namedtuple('PrependPath', 'value')  # SINGULARITYENV_/APPTAINERENV_PREPEND_PATH, before the user's
ContainerEnv = namedtuple('ContainerEnv', 'name value')  # SINGULARITYENV_<name> and APPTAINERENV_<name>
CacheRoot = namedtuple('CacheRoot', 'into script')  # the cache root that script (sh) prints at load
# Defaults where the user has none (items and the caches (name, subdir) in cache_root), remembered in record
Defaults = namedtuple('Defaults', 'record items cache_root caches')

# The emitters: by step, the call it becomes in each language, with its fields as words of that language
MODULE_STEPS = {
    Family: ('family({name})', 'family {name}'),
    Conflict: ('conflict({name})', 'conflict {name}'),
    Image: ('local {into} = find_image({path}, {name}, {central_dir}, {central_subdir}, {central_default}, {module}, '
            '{stops})',
            'set {into} [find_image {path} {name} {central_dir} {central_subdir} {central_default} {module} {stops}]'),
    SetRestorable: ('restorable_env({name}, {value})', 'restorable_env {name} {value}'),
    VenvForm: ('local {into} = venv_form({installdir}, {record}, {squashfs}, {changes}, {directory})',
               'set {into} [venv_form {installdir} {record} {squashfs} {changes} {directory}]'),
    Binds: ('set_binds(keep_binds({sources}), {always}, user_software_bind({installdir}, {form}, {squashfs}, '
            '{directory}, {module}))',
            'set_binds [keep_binds {sources}] {always} [user_software_bind {installdir} {form} {squashfs} '
            '{directory} {module}]'),
    PersonalLayer: ('local {into} = personal_layer({form}, {var}, {subdir}, {module}, {packed}, {check})',
                    'set {into} [personal_layer {form} {var} {subdir} {module} {packed} {check}]'),
    Overlays: ('set_overlays({installdir}, {form}, {squashfs}, {changes}, {personal})',
               'set_overlays {installdir} {form} {squashfs} {changes} {personal}'),
    PrependPath: ('container_prepend_path({value})', 'container_prepend_path {value}'),
    ContainerEnv: ('container_env({name}, {value})', 'container_env {name} {value}'),
    CacheRoot: ('local {into} = cache_root({script})', 'set {into} [cache_root {script}]'),
    Defaults: ('set_defaults({record}, {items}, {cache_root}, {caches})',
               'set_defaults {record} {items} {cache_root} {caches}'),
}


def lua_word(value):
    """A field of a step as a Lua expression: a string, a Var, a bool, a list (of strings or pairs) as a table."""
    if isinstance(value, Var):
        return value.name
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (list, tuple)):
        return '{%s}' % ', '.join(lua_word(item) for item in value)
    return lua_str(value)


def tcl_word(value):
    """A field of a step as a Tcl word: a string, a Var, a bool, a list (pairs flattened: key value ...)."""
    if isinstance(value, Var):
        return '$' + value.name
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, (list, tuple)):
        items = [word for item in value for word in (item if type(item) is tuple else [item])]
        return '[list%s]' % ''.join(' ' + tcl_word(item) for item in items)
    return tcl_str(value)


def emit_module_logic(plan, syntax):
    """The module's load-time logic in syntax ('Lua' or 'Tcl'): its primitives, then the plan's steps as calls."""
    lua = syntax == 'Lua'
    word, comment = (lua_word, '--') if lua else (tcl_word, '#')
    primitives = LUA_MODULE_PRIMITIVES if lua else TCL_MODULE_PRIMITIVES
    calls = []
    for step in plan:
        words = {field: value.name if field == 'into' else word(value) for field, value in step._asdict().items()}
        calls.append(MODULE_STEPS[type(step)][0 if lua else 1].format(**words))
    return '\n%s\n%s SingularityContainer: the image, the bind list and the environment in the container\n%s\n' % (
        primitives.strip('\n'), comment, '\n'.join(calls))
