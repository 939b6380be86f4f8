#!/bin/bash
# The suite, as make test runs it: everything with the runtime $2 (a user namespace: Apptainer without setuid, as on
# Dawn and most Apptainer sites); where a setuid runtime $3 is given (as LUMI runs SingularityCE), every test that
# starts a container (marked runtime) again with that one, at the same time on the other core, and the others are
# shared out so that the two runs take about as long (tests/conftest.py's left_to_the_other_run: the unit tier in the
# first run, the other tests not marked runtime in the second). Each run has users of its own
# (testkit/users.py: lumi-* and lumis-*), its own pytest directory and its own Slurm cluster, so the two do not meet.
# The setuid run's output follows the other's; the last line counts both.
#
#   tools/run-tests.sh PYTHON RUNTIME [SETUID-RUNTIME] [-- PYTEST-ARGS...]
set -uo pipefail

python=$1 runtime=$2 setuid=
shift 2
if [ $# -gt 0 ] && [ "$1" != -- ]; then
    setuid=$1
    shift
fi
[ "${1:-}" != -- ] || shift
# pytest's temporary files in a directory of this run's own, removed afterwards: in pytest's shared
# /tmp/pytest-of-<user>, which every new pytest session makes 0700 again, another run on the machine would shut the
# test users out of this one's files for a moment
base=$(mktemp -d /tmp/lumi-ct-tests-XXXXXX) || exit 1
chmod 755 "$base"
trap 'rm -rf "$base"' EXIT

run() {  # NAME RUNTIME USERS [PYTEST-ARGS...]: one pytest session, its results also in $base/NAME.xml, its tiers' counts
    # and times in $base/NAME.tiers, its wall time in $base/NAME.wall
    local name=$1 runtime=$2 users=$3 start=$SECONDS status=0
    shift 3
    LUMI_CT_SINGULARITY=$runtime LUMI_CT_USERS=$users LUMI_CT_PAIRED=$setuid LUMI_CT_TIER_REPORT="$base/$name.tiers" \
        "$python" -m pytest -ra --durations=20 -p no:cacheprovider --basetemp="$base/$name" --junitxml="$base/$name.xml" \
        "$@" || status=$?
    echo $(( SECONDS - start )) >"$base/$name.wall"
    return "$status"
}

if [ -n "$setuid" ]; then
    run setuid "$setuid" lumis "$@" tests >"$base/setuid.log" 2>&1 &
    setuid_pid=$!
fi
status=0
run userns "$runtime" lumi "$@" tests || status=$?
if [ -n "$setuid" ]; then
    setuid_status=0
    wait "$setuid_pid" || setuid_status=$?
    echo
    echo "=== The tests that start a container, again with the setuid runtime $setuid (as LUMI runs it) ==="
    cat "$base/setuid.log"
    [ "$status" -ne 0 ] || status=$setuid_status
    # Each run's wall time and tiers, then both runs' counts, as the last line
    "$python" - "$base" <<'PYTHON'
import json
import os
import sys
import xml.etree.ElementTree as ET

base = sys.argv[1]
for name in ('userns', 'setuid'):
    try:
        with open(os.path.join(base, name + '.wall')) as wall, open(os.path.join(base, name + '.tiers')) as tiers:
            seconds, tiers = int(wall.read()), json.load(tiers)
    except (OSError, ValueError):
        continue
    print('%s run: %d s; ' % (name, seconds) + ', '.join('%s tier %d tests (%.0f s)' % (tier, count, time)
                                                      for tier, (count, time) in tiers.items()))
total = dict(tests=0, failures=0, errors=0, skipped=0)
for path in (os.path.join(base, 'userns.xml'), os.path.join(base, 'setuid.xml')):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        total['errors'] += 1
        continue
    for suite in ([root] if root.tag == 'testsuite' else root.iter('testsuite')):
        for key in total:
            total[key] += int(suite.get(key, 0))
failed = total['failures'] + total['errors']
print('both: %d passed, %d failed, %d skipped' % (
    total['tests'] - failed - total['skipped'], failed, total['skipped']))
PYTHON
fi
# The suite leaves no process behind: no orphan of a run's test users runs any more (each test's are ended after it:
# tests/conftest.py, testkit/processes.py)
for users in lumi ${setuid:+lumis}; do
    if ! left=$(cd "$(dirname "$0")/.." && LUMI_CT_USERS=$users "$python" -m testkit.processes); then
        echo "left running as the test users $users-*, after the suite (pid and name): ${left//$'\n'/, }" >&2
        status=1
    fi
done
exit "$status"
