#!/bin/bash
# The suite, as make test runs it: everything with the runtime $2 (a user namespace: Apptainer without setuid, as on
# Dawn and most Apptainer sites); where a setuid runtime $3 is given (as LUMI runs SingularityCE), in three pytest
# sessions at once, which keep both cores busy while one of them waits for a container, a job or a kill:
#   userns      the tests that start a container (marked runtime) in the files of SPLIT, with the runtime $2
#   userns-rest the tests that start a container in all other files, with the runtime $2
#   setuid      every test that starts a container again, with the setuid runtime, and the tests that start none
# Each session has users of its own (testkit/users.py: lumi-*, lumiu-*, lumis-*), its own pytest directory and its
# own Slurm cluster, so that they do not meet. The sessions' output follows in that order; the last line counts all.
#
#   tools/run-tests.sh PYTHON RUNTIME [SETUID-RUNTIME] [-- PYTEST-ARGS...]
set -uo pipefail

# The files whose runtime tests the first session takes: the multi-node jobs and the kills at every step, about half
# of the user-namespace runtime's time (the sessions' summaries show their times)
SPLIT=(tests/test_distributed.py tests/test_site_dawn.py tests/test_venv_pip_faults.py tests/test_bench.py
    tests/test_venv_pip_reference.py tests/test_hostile_dirs.py tests/test_workdir.py tests/test_jupyter_kernel.py)

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

run() {  # NAME RUNTIME USERS [PYTEST-ARGS...]: one pytest session, its results also in $base/NAME.xml
    local name=$1 runtime=$2 users=$3
    shift 3
    LUMI_CT_SINGULARITY=$runtime LUMI_CT_USERS=$users "$python" -m pytest -ra --durations=20 -p no:cacheprovider \
        --basetemp="$base/$name" --junitxml="$base/$name.xml" "$@"
}

if [ -z "$setuid" ]; then
    run userns "$runtime" lumi "$@" tests
    exit
fi
ignore=()
for file in "${SPLIT[@]}"; do
    ignore+=("--ignore=$file")
done
run userns-rest "$runtime" lumiu -m runtime "$@" "${ignore[@]}" tests >"$base/userns-rest.log" 2>&1 &
others=("$!")
run setuid "$setuid" lumis "$@" tests >"$base/setuid.log" 2>&1 &
others+=("$!")
status=0
run userns "$runtime" lumi -m runtime "$@" "${SPLIT[@]}" || status=$?
for pid in "${others[@]}"; do
    session_status=0
    wait "$pid" || session_status=$?
    [ "$status" -ne 0 ] || status=$session_status
done
echo
echo "=== The other files' tests that start a container, with the same runtime $runtime ==="
cat "$base/userns-rest.log"
echo
echo "=== The tests that start a container, again with the setuid runtime $setuid (as LUMI runs it) ==="
cat "$base/setuid.log"
# All sessions' counts, as the last line
"$python" - "$base"/userns.xml "$base"/userns-rest.xml "$base"/setuid.xml <<'PYTHON'
import sys
import xml.etree.ElementTree as ET

total = dict(tests=0, failures=0, errors=0, skipped=0)
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        total['errors'] += 1
        continue
    for suite in ([root] if root.tag == 'testsuite' else root.iter('testsuite')):
        for key in total:
            total[key] += int(suite.get(key, 0))
failed = total['failures'] + total['errors']
print('all: %d passed, %d failed, %d skipped' % (
    total['tests'] - failed - total['skipped'], failed, total['skipped']))
PYTHON
[ -z "${LUMI_CT_KEEP_RESULTS:-}" ] || cp "$base"/*.xml "$LUMI_CT_KEEP_RESULTS"/
exit "$status"
