"""One definition of each parameter rule: the easyblock checks its parameters before anything is copied, and
generate-ec applies the same rules to the spec values that become those parameters."""
import os
import re

import pytest
import yaml

from generator.spec import load_spec
from singularitycontainer_src import parameters
from singularitycontainer_src.parameters import PARAMETERS, ParameterRule, easyconfig_problems, parameter_problems
from support import REPO, tool
from testkit.install import Installation, demo_easyconfig

# (easyconfig parameter, also the spec's key for it, value, accepted)
CASES = [
    ('container_venv', 'pytorch', True),
    ('container_venv', 'my-venv_2.0', True),
    ('container_venv', 'a$(id)b', False),
    ('container_venv', 'my venv', False),
    ('container_venv', '../../etc', False),
    ('container_venv', '.hidden', False),
    ('container_venv', ['pytorch'], False),
    ('container_bind', ['/pfs', '/scratch:/data:ro'], True),
    ('container_bind', ['pfs'], False),
    ('container_bind', ['/pfs:data'], False),
    ('container_bind', ['/a\n/b'], False),
    ('container_bind', ['/a,/b'], False),
    ('container_bind', ['/a b'], False),
    ('container_bind', ['/pfs', '/pfs'], False),
    ('container_bind', '/tmp', False),
    ('container_bind', ['/tmp:/mnt:rw', '/a:/b:id=2', '/x.sqfs:/data:image-src=/', '/y.sqfs:/y:image-src=/sub,ro'],
     True),
    ('container_bind', ['/tmp:/mnt:bogus'], False),
    ('container_bind', ['/tmp:/mnt:ro,bogus'], False),
    ('container_bind', ['/tmp:/mnt:'], False),
    ('container_bind', ['/tmp:'], False),
    ('container_bind', ['/tmp::ro'], False),
    ('container_bind', ['/tmp:/mnt:ro:x'], False),
    ('container_bind', ['/tmp:/mnt:ro,/other'], False),
    ('container_bind', ['/a:/b:id=x'], False),
    ('container_bind', ['/a:/b:image-src=sub'], False),
    ('container_bind', ['/tmp:/mnt,ro'], False),
    ('container_env', {'NCCL_SOCKET_IFNAME': 'hsn0,hsn1', 'X': 'a b "d" it\'s'}, True),
    ('container_env', {'X': 'pa$$word'}, False),
    ('container_env', {'PREPEND_PATH': '/x'}, False),
    ('container_env', {'VIRTUAL_ENV': '/x'}, False),
    # refused by SingularityCE and Apptainer in SINGULARITYENV_* (a warning at every start, left unset)
    ('container_env', {'HOME': '/scratch/home'}, False),
    ('container_env', {'SINGULARITY_SHELL': '/bin/zsh'}, False),
    ('container_env', {'SINGULARITY_APPNAME': 'x'}, False),
    ('container_env', {'X': '`id`'}, False),
    ('container_env', {'X': 'back\\slash'}, False),
    ('container_env', {'X': 'line\nrm -rf ~'}, False),
    ('container_env', {'X': 'nul\0'}, False),
    ('container_env', {'1BAD': 'x'}, False),
    ('container_env', 'X=1', False),
    ('container_env_defaults', {'FI_MR_CACHE_MONITOR': 'userfaultfd'}, True),
    ('container_env_defaults', {'X': 'pa$$word $(id) `id` back\\slash'}, True),
    ('container_env_defaults', {'X': 'two\nlines'}, False),
    ('container_env_defaults', {'BAD-NAME': 'x'}, False),
    ('pip_requirements', ['torchmetrics', 'lightning>=2 ; python_version >= "3.10"'], True),
    ('pip_requirements', 'torchmetrics', False),
    ('pip_requirements', ['a\nb'], False),
    ('pip_requirements', ['a', 'a'], False),
    ('pip_install_options', ['--no-index'], True),
    ('pip_install_options', '--no-index', False),
    ('wrapped_commands', ['python', 'pip3.12', 'huggingface-cli'], True),
    ('wrapped_commands', 'python', False),
    ('wrapped_commands', ['/usr/bin/env'], False),
    ('wrapped_commands', ['python', 'venv-pip'], False),
    ('wrapped_commands', ['start-shell'], False),
    ('wrapped_commands', ['python', 'python'], False),
    ('wrapped_commands', ['singularity'], False),
    ('wrapped_commands', ['python', 'apptainer'], False),
    ('container_entry', 'run', True),
    ('container_entry', 'shell', False),
    ('gpu_vendor', 'intel', True),
    ('gpu_vendor', 'none', True),
    ('gpu_vendor', 'AMD', False),
    ('gpu_vendor', 'Intel', False),
    ('gpu_vendor', ['nvidia'], False),
    ('central_sif_dir', '/appl/local/laifs/containers', True),
    ('central_sif_dir', 'images', False),
    ('central_sif_dir', '/appl\n/x', False),
    ('container_python_version', '3.12', True),
    ('container_python_version', '3.12.1', False),
    ('container_python_version', '3', False),
    ('container_components', {'torch': '2.9.1', 'xformers': '0.0.32+09d42ac5.d20250822'}, True),
    ('container_components', {'torch': 'latest'}, False),
    ('container_components', {'bad name': '1.0'}, False),
    ('container_components', ['torch'], False),
    ('copy_image', False, True),
    ('copy_image', 'no', False),
    ('squash_user_software', 1, False),
    ('container_init', 'source /opt/miniconda3/bin/activate pytorch\necho "`date`" \\', True),
    ('container_init', 'nul\0', False),
]


def spec_problems(tmp_path, key, value):
    """The problems generate-ec finds in a spec whose one container sets key to value."""
    container = {'version': '2.7.1', 'date': '20250827', 'dockerhash': '0d479e852886',
                 'container_python_version': '3.12', 'rocm': '6.2.4', key: value}
    path = tmp_path / 'spec.yaml'
    path.write_text(yaml.safe_dump({'name': 'PyTorch', 'homepage': 'https://pytorch.org/', 'description': 'Test',
                                    'containers': [container]}))
    return load_spec(str(path))[1]


@pytest.mark.parametrize('parameter,value,accepted', CASES,
                         ids=['%s=%r' % (case[0], case[1])[:60] for case in CASES])
def test_easyblock_and_generate_ec_apply_the_same_rules(tmp_path, parameter, value, accepted):
    easyblock_problems = parameter_problems(parameter, value)
    generator_problems = spec_problems(tmp_path, parameter, value)
    assert (not easyblock_problems) == accepted, easyblock_problems
    assert (not generator_problems) == accepted, [str(issue) for issue in generator_problems]


# (parameter, value, where each tool finds it wrong): each entry that is wrong, and only those, for both tools
PLACES = [
    ('container_bind', ['/pfs', '/pfs', 'pfs'], ['[1]', '[2]']),
    ('pip_install_options', ['--no-index', ''], ['[1]']),
    ('pip_requirements', ['torchmetrics', '  '], ['[1]']),
    ('wrapped_commands', ['python', 3, 'python'], ['[1]', '[2]']),
    ('container_env', {'OK': '1', '1BAD': 'x', 'X': 'a$b'}, ["['1BAD']", "['X']"]),
    ('container_components', {'torch': 2.9}, ["['torch']"]),
    ('container_venv', '', ['']),
    ('copy_image', 'no', ['']),
]


def generator_where(issue, parameter):
    """Where generate-ec's issue is in the parameter's value, as the easyblock says it: '', '[2]', "['KEY']"."""
    rest = issue.path.split('.' + parameter, 1)[1]
    return re.sub(r'\.([^.\[]+)', lambda match: '[%r]' % match.group(1), rest)


@pytest.mark.parametrize('parameter,value,places', PLACES, ids=['%s=%r' % (case[0], case[1])[:60] for case in PLACES])
def test_easyblock_and_generate_ec_find_the_same_places(tmp_path, parameter, value, places):
    """Both tools find what is wrong by one walk over the value (the parameter's shape): the same entries, each
    wrong entry (also an empty one, or one listed twice beside a wrong one), and nothing else."""
    assert sorted(where for where, _ in parameter_problems(parameter, value)) == places
    assert sorted(generator_where(issue, parameter) for issue in spec_problems(tmp_path, parameter, value)) == places


def test_a_spec_gives_a_value_or_leaves_the_key_out(tmp_path):
    """An easyconfig's None leaves an optional text unset; a spec leaves the key out instead, and null there is
    refused as the value that it is not (a YAML key without a value is a slip)."""
    assert parameter_problems('central_sif_dir', None) == []
    assert [(issue.path, issue.message) for issue in spec_problems(tmp_path, 'central_sif_dir', None)] == [
        ('containers[0].central_sif_dir', 'must be a string, got null (an empty value)')]


def pip_options_without_requirements(options, requirements):
    return 'gives pip options but no requirements for them' if options and not requirements else None


def test_a_rule_between_parameters_reaches_both(tmp_path, monkeypatch):
    """A rule added to the easyblock's list of rules between parameters is checked by the easyblock and by
    generate-ec (with the easyblock's defaults for what a spec leaves out), said of its first parameter, and only
    between values that are valid on their own."""
    rule = ParameterRule(('pip_install_options', 'pip_requirements'), pip_options_without_requirements)
    monkeypatch.setattr(parameters, 'PARAMETER_RULES', [rule])
    values = {name: parameter.default for name, parameter in PARAMETERS.items()}
    message = 'gives pip options but no requirements for them'
    assert easyconfig_problems(dict(values, pip_install_options=['--no-index'])) == [
        'pip_install_options: ' + message]
    assert easyconfig_problems(dict(values, pip_install_options=['--no-index'], pip_requirements=['x'])) \
        == []
    assert easyconfig_problems(dict(values, pip_install_options='--no-index')) == [
        "pip_install_options: must be a list of strings, not a string ('--no-index') (allowed: a list of options, "
        "one per entry)"]
    issues = spec_problems(tmp_path, 'pip_install_options', ['--no-index'])
    assert [(issue.path, issue.message) for issue in issues] == [('containers[0].pip_install_options', message)]
    assert spec_problems(tmp_path, 'pip_requirements', ['x']) == []
    assert [issue.message for issue in spec_problems(tmp_path, 'pip_install_options', '--no-index')] == [
        'must be a list of strings, got a string']


def test_every_parameter_has_a_rule():
    """Every parameter of the easyblock's own is checked, and the generator can emit only checked ones."""
    from easybuild.framework.easyblock import EasyBlock
    from singularitycontainer_src.easyblock import SingularityContainer
    own = set(SingularityContainer.extra_options()) - set(EasyBlock.extra_options())
    assert own == set(PARAMETERS)


def test_every_parameter_is_a_spec_key_of_its_name():
    """A spec sets each parameter under the parameter's own name, with its rule (nothing to add in the generator
    for a new parameter)."""
    from generator import spec
    assert set(PARAMETERS) <= set(spec.SHARED_KEYS)


def test_the_readme_has_the_parameter_table():
    """The README's table of parameters is the easyblock's table, in its order (made by parameter_table(), which
    writes it into docs/reference.md too)."""
    parameter_table = tool('write-reference').parameter_table
    readme = (REPO / 'README.md').read_text()
    assert parameter_table() in readme, 'README.md: replace the table of parameters with:\n' + parameter_table()


@pytest.mark.eb
@pytest.mark.parametrize('eb_version', ['5', '4.9'])
def test_bad_parameters_stop_eb_before_the_copy(tmp_path, demo_sif, eb_version):
    """Each bad value is named with what is allowed, all at once, before the image is copied; '$(id)' never
    runs."""
    inst = Installation(tmp_path, eb_version=eb_version)
    inst.add_source(demo_sif, 'demo.sif')
    marker = tmp_path / 'id-ran'
    ec = inst.write_easyconfig('Demo-1.0.eb', demo_easyconfig(
        container_venv='a$(touch %s)b' % marker, container_bind=['/tmp:/mnt:bogus'], pip_requirements='lumi-base',
        wrapped_commands='python', container_env={'X': 'one\ntouch %s' % marker},
        container_env_defaults={'Y': 'nul\0'}, container_entry='shell', gpu_vendor='cuda'))
    proc = inst.eb(ec, check=False)
    out = ' '.join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    for expected in [
            "container_venv: 'a$(touch %s)b' is not a valid virtual environment name (allowed: letters, digits "
            "and '._-', not starting with '.' or '-'" % marker,
            "container_bind[0]: '/tmp:/mnt:bogus' has the bind option 'bogus', which the container runtime does "
            "not know: ro, rw, image-src=<path in the image> or id=<partition number>, comma-separated",
            "pip_requirements: must be a list of strings, not a string ('lumi-base')",
            "wrapped_commands: must be a list of strings, not a string ('python')",
            "container_env['X']: 'one\\ntouch %s' must not contain a newline or other control characters" % marker,
            "container_env_defaults['Y']: 'nul\\x00' must not contain a newline or other control characters",
            "container_entry: 'shell' is neither 'exec' nor 'run' (allowed: 'exec' or 'run')",
            "gpu_vendor: 'cuda' is not one of amd, intel, nvidia, none (allowed: 'amd' or 'intel' or 'nvidia' or "
            "'none')"]:
        assert expected in out, out
    assert not os.path.exists(marker)
    idir = inst.installdir('Demo', '1.0')
    assert not (idir / 'demo.sif').exists()
