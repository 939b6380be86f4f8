"""Tests for generate-ec releases: the LUMI AI Factory images a spec does not have yet, listed (--check) and added
(--add), with checksums published beside the images or computed.

The fake central directory holds two releases of small LAIF-like SIF images (built as the inspect tests build them,
generator_support.make_image): OLD with a .md beside each image that lists its SHA256 in a Files part, NEW without;
and the symlinks naming the latest release of each digest and overall.
"""

import hashlib
import json
import os
import shutil

import pytest

from generator.checksums import published_sums
from generator.spec import load_spec
from generator_support import FULL_SBOM, check_easyconfig, generate_ec, make_image, read_bytes
from support import generate_ec_command
from testkit.install import run
from testkit.specs import RELEASES_SPEC

OLD = ('u24r64f21m43t29', '20260225_144743')  # a .md with the checksums beside each image
NEW = ('u24r70f21m50t210', '20260415_130625')  # no .md
APT_NEW = [{'name': 'python3.12', 'version': '3.12.3-1ubuntu0.8'},
           {'name': 'rocm-core', 'version': '7.0.2.70002-56~24.04'}]
SBOMS = {
    (OLD, 'torch'): {'apt': FULL_SBOM['apt'], 'pip': FULL_SBOM['pip'][:2]},
    (OLD, 'full'): FULL_SBOM,
    (NEW, 'torch'): {'apt': APT_NEW, 'pip': [{'name': 'torch', 'version': '2.10.0+rocm7.0.2'}]},
    (NEW, 'full'): {'apt': APT_NEW, 'pip': [{'name': 'torch', 'version': '2.10.0+rocm7.0.2'},
                                            {'name': 'vllm', 'version': '0.19.0'},
                                            {'name': 'deepspeed', 'version': '0.18.8'}]},
    (NEW, 'plus'): {'apt': APT_NEW, 'pip': [{'name': 'torch', 'version': '2.10.0+rocm7.0.2'},
                                            {'name': 'transformer_engine', 'version': '2.4.0'}]},
}
OTHER_SUM = 'f' * 64  # a checksum that is no image's

SPEC = RELEASES_SPEC  # the torch and full images of 20260124 (not in the directory) and OLD's torch image
HEAD, TAIL = SPEC.split('\n# the settings', 1)
TAIL = '\n# the settings' + TAIL


def release_name(release):
    return 'lumi-multitorch-%s-%s' % release


def image_name(release, variant):
    return 'lumi-multitorch-%s-%s-%s.sif' % ((variant,) + release)


def checksum_md(stem, sif_sum):
    """A per-image .md as laifs-container-recipes' post.sh writes it: title, podman's Id and Created, the
    description, and a Files part of sha256sum output."""
    return '\n'.join([
        '# Container Image %s' % stem, '',
        'Id: %s' % ('0123abcd' * 8),  # 64 hex digits, but no file name: not a checksum
        'Created: 2026-02-25T14:47:43.123456789Z', '',
        '## Description', '', '**Overview**', 'This image builds on top of its base image.', '',
        '## Files', '',
        '%s  %s.Containerfile' % ('1' * 64, stem),
        '%s  %s.json' % ('2' * 64, stem),
        '%s  %s.log' % ('3' * 64, stem),
        '%s  %s.sif' % (sif_sum, stem), ''])


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    """The fake central directory, built once: copied for each test (the images are a few kB)."""
    scratch = tmp_path_factory.mktemp('images')
    central = tmp_path_factory.mktemp('central') / 'containers'
    for (release, variant), sbom in SBOMS.items():
        directory = central / release_name(release)
        directory.mkdir(parents=True, exist_ok=True)
        sif = directory / image_name(release, variant)
        os.replace(make_image(scratch, sif.name, sbom), str(sif))
        sif.with_suffix('.json').write_text(json.dumps(sbom))
        if release == OLD:
            sif.with_suffix('.md').write_text(checksum_md(sif.stem, sha256(sif)))
    old, new = central / release_name(OLD), central / release_name(NEW)
    (old / image_name(OLD, 'rocm')).write_text('an image of a variant the spec does not want: never read\n')
    (old / (release_name(OLD) + '.md')).write_text('# The release README\n')
    (old / (release_name(OLD) + '.yaml')).write_text('name: the recipe\n')
    (new / 'lumi-multitorch-latest.sif').symlink_to(image_name(NEW, 'full'))
    for link, target in (('lumi-multitorch-' + OLD[0], old.name), ('lumi-multitorch-' + NEW[0], new.name),
                         ('lumi-multitorch', new.name)):
        (central / link).symlink_to(target)
    (central / 'README.txt').write_text('not a release\n')
    return central


@pytest.fixture
def central(built, tmp_path, monkeypatch):
    """A copy of the fake central directory, and spec.yaml in the current directory (tmp_path)."""
    copy = tmp_path / 'containers'
    shutil.copytree(str(built), str(copy), symlinks=True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'spec.yaml').write_text(SPEC)
    return copy


def sha256(path):
    return hashlib.sha256(read_bytes(str(path))).hexdigest()


def image(central, release, variant):
    return central / release_name(release) / image_name(release, variant)


def listed(central, variant_releases, source):
    """The lines releases prints for images: '<path>: checksum <source>'."""
    lines = []
    for release, variant in variant_releases:
        sif = image(central, release, variant)
        if source(release) == 'published':
            lines.append('%s: checksum published in %s' % (sif, sif.with_suffix('.md').name))
        else:
            lines.append('%s: checksum computed from the image (no %s beside it)' % (sif, sif.with_suffix('.md').name))
    return ''.join(line + '\n' for line in lines)


MISSING = [(OLD, 'full'), (NEW, 'torch'), (NEW, 'full')]


def by_release(release):
    return 'published' if release == OLD else 'computed'


def spec_text():
    with open('spec.yaml') as handle:
        return handle.read()


def test_lists_the_images_the_spec_lacks(central, tmp_path, capsys):
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml'], capsys)
    assert code == 0, err
    assert out == listed(central, MISSING, by_release)
    assert err == 'generate-ec: spec.yaml lacks 3 of the torch, full images of 2 release(s); --add adds them\n'
    assert spec_text() == SPEC
    assert sorted(os.listdir(str(tmp_path))) == ['containers', 'spec.yaml']


def test_check_exits_1_while_images_are_missing(central, capsys):
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--check'], capsys)
    assert code == 1
    assert out == listed(central, MISSING, by_release)
    assert err == 'generate-ec: spec.yaml lacks 3 of the torch, full images of 2 release(s)\n'
    assert spec_text() == SPEC


def inspect_entry(sif, capsys):
    """What generate-ec inspect prints for the image: the entry releases --add appends."""
    code, out, err = generate_ec(['inspect', str(sif)], capsys)
    assert (code, err) == (0, '')
    return out


def test_add_appends_inspects_entries_with_their_checksums(central, capsys):
    expected = HEAD + ''.join(inspect_entry(image(central, *missing), capsys) for missing in MISSING) + TAIL
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--add'], capsys)
    assert code == 0, err
    assert out == listed(central, MISSING, by_release)
    files = ['PyTorch-2.9.1-rocm-6.4.4-python-3.12-singularity-laif-full-20260225.eb',
             'PyTorch-2.10.0-rocm-7.0.2-python-3.12-singularity-laif-torch-20260415.eb',
             'PyTorch-2.10.0-rocm-7.0.2-python-3.12-singularity-laif-full-20260415.eb']
    assert err == ''.join('generate-ec: appended to spec.yaml as containers[%d] (%s)\n' % (index, name)
                          for index, name in enumerate(files, 3))
    assert spec_text() == expected  # a text insertion: comments and layout kept

    # the easyconfigs carry the checksums, so EasyBuild verifies the images it installs
    code, _, err = generate_ec(['spec.yaml', '-o', 'out'], capsys)
    assert code == 0, err
    for name, missing in zip(files, MISSING):
        values = check_easyconfig(os.path.join('out', name))
        assert values['sources'] == [image(central, *missing).name]
        assert values['checksums'] == [sha256(image(central, *missing))]

    added = spec_text()
    for mode in ('--check', '--add'):
        code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', mode], capsys)
        assert (code, out) == (0, '')
        assert err == 'generate-ec: spec.yaml has the torch, full images of 2 release(s)\n'
        assert spec_text() == added


def publish(central, release, variant, sif_sum):
    sif = image(central, release, variant)
    sif.with_suffix('.md').write_text(checksum_md(sif.stem, sif_sum))


def test_add_takes_the_published_checksum_without_reading_the_image_for_it(central, capsys):
    publish(central, OLD, 'full', OTHER_SUM)  # not the image's: shows where the spec's checksum comes from
    code, _, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--add'], capsys)
    assert code == 0, err
    spec, issues = load_spec('spec.yaml')
    assert not issues
    checksums = {(c.tag, c.image_variant): c.checksum for c in spec.containers}
    assert checksums[(OLD[1], 'full')] == OTHER_SUM
    assert checksums[(NEW[1], 'torch')] == sha256(image(central, NEW, 'torch'))


def test_verify_compares_the_published_checksum(central, tmp_path, capsys):
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--verify'], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == listed(central, MISSING[:1], by_release).rstrip('\n') + ', verified'

    publish(central, OLD, 'full', OTHER_SUM)
    sif = image(central, OLD, 'full')
    for mode in ([], ['--add'], ['--check']):
        code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--verify'] + mode, capsys)
        assert (code, out) == (2, '')
        assert err.splitlines()[0] == (
            '%s: its SHA256 is %s, but %s publishes %s for it: the image or its checksum file changed after the '
            'release, or the image is not complete. Do not add it; ask the LUMI AI Factory which is right'
            % (sif, sha256(sif), sif.with_suffix('.md'), OTHER_SUM))
        assert err.splitlines()[1:] == (['generate-ec: nothing was added to spec.yaml'] if mode == ['--add'] else [])
        assert spec_text() == SPEC
        assert sorted(os.listdir(str(tmp_path))) == ['containers', 'spec.yaml']


def test_release_directories_and_symlinks_as_arguments(central, capsys):
    # a release directory, the symlink to the latest release, and the central directory again: each image once
    dirs = [central / release_name(OLD), central / 'lumi-multitorch', central]
    code, out, err = generate_ec(['releases'] + [str(d) for d in dirs] + ['--spec', 'spec.yaml'], capsys)
    assert code == 0, err
    assert out == listed(central, MISSING, by_release).replace(
        str(central / release_name(NEW)), os.path.realpath(str(central / release_name(NEW))))

    code, out, err = generate_ec(['releases', str(central / release_name(NEW)), '--spec', 'spec.yaml'], capsys)
    assert code == 0, err
    assert out == listed(central, MISSING[1:], by_release)
    assert err == 'generate-ec: spec.yaml lacks 2 of the torch, full images of 1 release(s); --add adds them\n'


def test_variants_and_since(central, capsys):
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--variants', 'plus,torch'],
                                 capsys)
    assert code == 0, err
    assert out == listed(central, [(NEW, 'torch'), (NEW, 'plus')], by_release)  # OLD has no plus image
    assert err == 'generate-ec: spec.yaml lacks 2 of the torch, plus images of 2 release(s); --add adds them\n'

    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--since', '20260301_000000'],
                                 capsys)
    assert code == 0, err
    assert out == listed(central, MISSING[1:], by_release)


@pytest.mark.parametrize('argv, message', [
    (['--variants', 'torch,gpu'], "argument --variants: 'torch,gpu': give LAIF image variants out of torch, full, "
                                  "plus, rocm, libfabric, mpich, separated by commas"),
    (['--since', '2026-04-15'], "argument --since: '2026-04-15' is not a LAIF release tag (YYYYMMDD_HHMMSS, e.g. "
                                "20260225_144743)"),
    (['--add', '--check'], 'argument --check: not allowed with argument --add'),
])
def test_usage_errors(argv, message, central, capsys):
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml'] + argv, capsys)
    assert (code, out) == (2, '')
    assert err.splitlines()[-1] == 'generate-ec releases: error: ' + message


def test_the_spec_must_load_and_name_the_variants(central, capsys):
    with open('spec.yaml', 'w') as handle:
        handle.write(SPEC.replace('"6.4.4"', '"6.2.4"', 1))
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--add'], capsys)
    assert (code, out) == (2, '')
    assert err.splitlines() == [
        'spec.yaml has errors; fix them first:',
        "spec.yaml:12: containers[0].rocm: '6.2.4' does not match the digest u24r64f21m43t29 (r64: ROCm 6.4.x)",
        'generate-ec: nothing was added to spec.yaml']

    amd = '  - {version: "2.7.1", rocm: "6.2.4", date: "20250827", dockerhash: 0d479e852886}\n'
    with open('spec.yaml', 'w') as handle:
        handle.write(SPEC.split('  # the first releases')[0] + amd)
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml'], capsys)
    assert (code, out) == (2, '')
    assert err == ('spec.yaml has no LAIF containers (family: laif), so no image variants to look for; name them '
                   'with --variants, e.g. --variants torch,full\n')
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--variants', 'full'], capsys)
    assert code == 0, err
    assert out == listed(central, [(OLD, 'full'), (NEW, 'full')], by_release)


def test_not_a_release_directory(central, tmp_path, capsys):
    for directory, problem in ((tmp_path / 'nowhere', 'no such directory'),
                               (tmp_path, 'neither a release directory (lumi-multitorch-<digest>-<tag>) nor a '
                                          'directory with release directories in it')):
        code, out, err = generate_ec(['releases', str(directory), '--spec', 'spec.yaml'], capsys)
        assert (code, out) == (2, '')
        assert err.startswith('%s: %s' % (directory, problem))


def test_an_unreadable_checksum_file_means_computing(central, capsys):
    md = image(central, OLD, 'full').with_suffix('.md')
    md.unlink()
    md.mkdir()  # root reads any file; a directory is what cannot be read as one
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml'], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == '%s: checksum computed from the image (%s is not readable: Is a directory)' % (
        image(central, OLD, 'full'), md.name)


BAD_CHECKSUM_FILES = {
    'another format': (b'{"sif": "sha256:%s"}\n' % (b'a' * 64),
                       'no line of its Files part pairs a SHA256 (64 hex digits) with a file name'),
    'not text': (b'\xff\xfe# Files\n', 'not UTF-8 text'),
    'image missing': (None, 'it lists no SHA256 for {sif} (it lists {stem}.Containerfile, {stem}.json, '
                            '{stem}.log)'),
    'two checksums': ('two', 'it lists 2 different SHA256 for {sif} ({sums})'),
}


@pytest.mark.parametrize('mode', [[], ['--add']])
@pytest.mark.parametrize('case', sorted(BAD_CHECKSUM_FILES))
def test_a_checksum_file_that_cannot_be_read_is_an_error(case, mode, central, tmp_path, capsys):
    sif = image(central, OLD, 'full')
    md = sif.with_suffix('.md')
    content, problem = BAD_CHECKSUM_FILES[case]
    good = md.read_text()
    if content is None:
        content = good.replace('%s  %s\n' % (sha256(sif), sif.name), '').encode()
    elif content == 'two':
        content = (good + '%s  %s\n' % (OTHER_SUM, sif.name)).encode()
    md.write_bytes(content)
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml'] + mode, capsys)
    assert (code, out) == (2, '')
    problem = problem.format(sif=sif.name, stem=sif.stem, sums=', '.join(sorted([sha256(sif), OTHER_SUM])))
    assert err.splitlines() == [
        '%s: %s, so no checksum can be taken from it. Check the file (has its format changed?); generate-ec inspect '
        'IMAGE.sif --spec FILE adds an image with its checksum computed' % (md, problem)
    ] + (['generate-ec: nothing was added to spec.yaml'] if mode else [])
    assert spec_text() == SPEC
    assert sorted(os.listdir(str(tmp_path))) == ['containers', 'spec.yaml']


def test_add_is_all_or_nothing(central, tmp_path, capsys):
    broken = image(central, NEW, 'full')  # the last of the three: the first two were read already
    broken.write_text('<html>Not found</html>\n' * 10)
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--add'], capsys)
    assert code == 2
    assert out == listed(central, MISSING, by_release)
    assert err.startswith('%s is not a SIF image: ' % broken)
    assert err.endswith('\ngenerate-ec: nothing was added to spec.yaml\n')
    assert spec_text() == SPEC
    assert sorted(os.listdir(str(tmp_path))) == ['containers', 'spec.yaml']


SIF = 'lumi-multitorch-full-u24r64f21m43t29-20260225_144743.sif'
SUM = '0123456789abcdef' * 4


@pytest.mark.parametrize('text', [
    '%s  %s\n' % (SUM, SIF),  # sha256sum
    '%s *%s\n' % (SUM.upper(), SIF),  # sha256sum -b, upper-case hex
    '%s  /appl/local/laifs/containers/x/%s\n' % (SUM, SIF),  # with its directory
    '| File | SHA256 |\n|---|---|\n| `%s` | `%s` |\n' % (SIF, SUM),  # a table
    '- **%s**: sha256:%s\n' % (SIF, SUM),  # a list
    '# Image\n\nFiles\n%s  %s\n\n### Files:\n\n```\n%s  %s\n```\n\n## Tests\n\n%s  %s\n' % (
        OTHER_SUM, SIF, SUM, SIF, OTHER_SUM, SIF),  # only the (last) Files part counts
])
def test_checksum_file_formats(text, tmp_path):
    md = tmp_path / 'image.md'
    md.write_text(text)
    assert published_sums(str(md))[SIF] == {SUM}


@pytest.mark.parametrize('text', [
    '| File | SHA256 | Note |\n|---|---|---|\n| `%s` | %s | same build as torch.sif |\n' % (SIF, SUM),
    '%s  %s  (same build as torch.sif)\n' % (SUM, SIF),
    '- %s: %s, as torch.sif\n' % (SIF, SUM),
])
def test_a_checksum_is_only_its_file_names(text, tmp_path):
    """A row's SHA256 is the file's that the row is for (its file name column; else its first file name), not
    another image's that a note names."""
    md = tmp_path / 'image.md'
    md.write_text(text)
    assert published_sums(str(md)) == {SIF: {SUM}}


def test_a_note_naming_another_image_does_not_give_it_the_checksum(central, capsys):
    sif = image(central, OLD, 'full')
    md = sif.with_suffix('.md')
    md.write_text(md.read_text() + '| lumi-multitorch-plus.sif | %s | same build as %s |\n' % (OTHER_SUM, sif.name))
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml', '--add'], capsys)
    assert code == 0, err
    assert out == listed(central, MISSING, by_release)
    assert 'checksum: "%s"' % sha256(sif) in spec_text() or 'checksum: %s\n' % sha256(sif) in spec_text()
    assert OTHER_SUM not in spec_text()


@pytest.mark.parametrize('mode', [['--check'], ['--add']])
@pytest.mark.parametrize('kind', ['symlink', 'directory'])
def test_an_image_that_is_a_link_or_a_directory_is_an_error(kind, mode, central, capsys):
    """Never counted as the spec's, nor read: a release's images are regular files (the release's own
    lumi-multitorch-latest.sif link has no image's name, and the central directory's release links are skipped)."""
    sif = image(central, NEW, 'torch')
    sif.unlink()
    if kind == 'symlink':
        target = image(central, OLD, 'torch')
        sif.symlink_to(target)
        what = 'a symbolic link (to %s)' % target
    else:
        sif.mkdir()
        what = 'a directory'
    code, out, err = generate_ec(['releases', str(central), '--spec', 'spec.yaml'] + mode, capsys)
    assert code == 2
    assert err.splitlines()[0] == (
        "%s: not an image file but %s; a release's images are regular files: check the release, or leave it out by "
        'naming the other release directories' % (sif, what))
    assert spec_text() == SPEC


def releases_as_user(central, cwd, timeout=60):
    """generate-ec releases as the test user, in at most 1 GB of memory and `timeout` seconds."""
    return run(['bash', '-c', 'ulimit -v 1048576 && exec "$@"', 'generate-ec', generate_ec_command(), 'releases',
                str(central), '--spec', 'spec.yaml'], cwd=str(cwd), timeout=timeout, check=False)


@pytest.mark.parametrize('kind', ['link to /dev/zero', 'fifo'])
def test_a_checksum_file_that_is_not_a_regular_file_is_not_read(kind, central, tmp_path):
    """Not read (a FIFO would be waited for, /dev/zero read until memory runs out): the checksum is computed."""
    sif = image(central, OLD, 'full')
    md = sif.with_suffix('.md')
    md.unlink()
    if kind == 'fifo':
        os.mkfifo(str(md))
    else:
        md.symlink_to('/dev/zero')
    proc = releases_as_user(central, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == '%s: checksum computed from the image (%s is not readable: not a regular ' \
        'file)' % (sif, md.name)


def test_a_checksum_file_too_large_is_refused(central, tmp_path):
    """An image's .md is a few kB: one of 3 GB (sparse) is refused at once, not read."""
    sif = image(central, OLD, 'full')
    md = sif.with_suffix('.md')
    with open(str(md), 'r+b') as handle:
        handle.truncate(3 * 1024 ** 3)
    proc = releases_as_user(central, tmp_path, timeout=20)
    assert (proc.returncode, proc.stdout) == (2, '')
    assert proc.stderr == (
        '%s: it is larger than 1 MiB (an image\'s .md is a few kB), so no checksum can be taken from it. Check the '
        'file (has its format changed?); generate-ec inspect IMAGE.sif --spec FILE adds an image with its checksum '
        'computed\n' % md)
