#!/usr/bin/env bash
# The whole test suite, stage by stage. `scripts/test.sh unit functional` runs
# only the named stages; with no argument every stage runs, in this order.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

all_stages=(build lint sanity unit functional molecule)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=("${all_stages[@]}")

banner() { printf '\n=== %s ===\n' "$*"; }

stage_build() {
    # The collection builds, installs into an empty path, and ansible-doc reads every
    # module, inventory plugin and role's argument spec from the installed copy.
    local out="$KUBEGPU_ROOT/.cache/build" kind names
    rm -rf "$out"; mkdir -p "$out"
    ansible-galaxy collection build --force --output-path "$out" . >/dev/null
    ansible-galaxy collection install --force --no-deps -p "$out/installed" "$out"/kubegpu-nvidia-*.tar.gz >/dev/null
    # one ansible-doc call per plugin type with every name of that type (each call costs a start of
    # Ansible, about a second of CPU); every name must come back with its documentation
    for kind in module inventory role; do
        case "$kind" in
            module) names=$(ls plugins/modules/*.py 2>/dev/null || true) ;;
            inventory) names=$(ls plugins/inventory/*.py 2>/dev/null || true) ;;
            role) names=$(ls -d roles/*/ 2>/dev/null || true) ;;
        esac
        [ -n "$names" ] || continue
        # shellcheck disable=SC2046  # one argument per name
        ANSIBLE_COLLECTIONS_PATH="$out/installed" ansible-doc -t "$kind" --json \
            $(for name in $names; do echo "kubegpu.nvidia.$(basename "$name" .py)"; done) \
            | python -c '
import json, sys
doc = json.load(sys.stdin)
kind, names = sys.argv[1], sys.argv[2:]
missing = [name for name in names if not doc.get(name)]
for name in names:
    if name not in missing:
        print("ansible-doc -t %s %s: ok" % (kind, name))
for name in missing:
    print("ansible-doc cannot read %s %s from the built collection" % (kind, name), file=sys.stderr)
sys.exit(1 if missing else 0)' "$kind" $(for name in $names; do echo "kubegpu.nvidia.$(basename "$name" .py)"; done) \
            || return 1
    done
    # Galaxy's own importer accepts the tarball (role READMEs, docs, plugin loading; ansible-test and
    # ansible-lint are off here: the sanity and lint stages run them, scripts/galaxy-importer.cfg)
    local log="$out/galaxy-importer.log"
    if ! (cd "$out" && GALAXY_IMPORTER_CONFIG="$KUBEGPU_ROOT/scripts/galaxy-importer.cfg" \
            "$KUBEGPU_ROOT/.cache/galaxy-importer-venv/bin/python" -m galaxy_importer.main kubegpu-nvidia-*.tar.gz \
            >"$log" 2>&1) || grep -q '^ERROR' "$log"; then
        grep -v '^Loading ' "$log" >&2
        echo "Galaxy's importer refuses the built collection (log: $log)" >&2
        return 1
    fi
    grep -v '^Loading ' "$log"
    # ansible-builder makes the execution environment's build context from meta/execution-environment.yml,
    # and the context installs what the definition and the collection's requirements say (docs/awx.md)
    python scripts/ee_context.py "$out/ee"
}

stage_lint() {
    antsibull-changelog lint
    # ansible-lint must not install this collection anywhere (.ansible-lint: offline): a copy under
    # ~/.ansible/collections would shadow the checkout for Ansible and pytest run without scripts/env.sh
    local stamp copies
    stamp=$(mktemp)
    ansible-lint --profile production --strict
    copies=$(find "${ANSIBLE_HOME:-$HOME/.ansible}" "$KUBEGPU_ROOT/.ansible" "$VIRTUAL_ENV/.ansible" \
        -path '*/ansible_collections/kubegpu*' -newer "$stamp" -print 2>/dev/null | head -3 || true)
    rm -f "$stamp"
    if [ -n "$copies" ]; then
        echo "ansible-lint installed the collection (.ansible-lint must keep offline: true):" >&2
        echo "$copies" >&2
        return 1
    fi
}

stage_sanity() {
    scripts/sanity.sh
}

# pytest-xdist: one worker per CPU, each test file whole in one worker (--dist loadfile), so a file's
# module- and session-scoped fixtures (a playbook run whose tasks the file's tests read) run once.
# Every Kubernetes test has its own API test server and every container a name of its own.
PYTEST_PARALLEL=(-n auto --dist loadfile)

stage_unit() {
    pytest -q -p no:cacheprovider --durations=30 "${PYTEST_PARALLEL[@]}" tests/unit
}

stage_functional() {
    scripts/build-fakenvml.sh >/dev/null
    pytest -q -p no:cacheprovider --durations=30 "${PYTEST_PARALLEL[@]}" tests/functional
}

# Molecule scenarios, longest first (docs/testing.md, where the suite's time goes), so that the lanes
# end together; a scenario not named here runs after these.
MOLECULE_LONGEST=(driver cluster dra mig container_runtime toolkit site_check)

stage_molecule() {
    # Every scenario under extensions/molecule, once, from the collection root: there
    # Molecule finds the scenarios and the shared base config extensions/molecule/config.yml
    # (no Galaxy: prerun off, dependency step = scripts/lab.sh build).
    # Scenarios share nothing but the node image (own containers, API test server on a free port,
    # state in their own ephemeral folder), so they run side by side, one per CPU
    # (KUBEGPU_MOLECULE_JOBS to change it); each one's log is printed whole when it ends.
    scripts/lab.sh build >/dev/null
    local jobs=${KUBEGPU_MOLECULE_JOBS:-$(nproc)} logs="$KUBEGPU_ROOT/.cache/molecule-logs"
    local queue=() file scenario failed=()
    local -A lane=() lane_start=()
    for scenario in "${MOLECULE_LONGEST[@]}"; do
        if [ -f "extensions/molecule/$scenario/molecule.yml" ]; then queue+=("$scenario"); fi
    done
    for file in extensions/molecule/*/molecule.yml; do
        [ -f "$file" ] || continue
        scenario=$(basename "$(dirname "$file")")
        [[ " ${queue[*]} " == *" $scenario "* ]] || queue+=("$scenario")
    done
    rm -rf "$logs"; mkdir -p "$logs"
    # Waits until a running scenario has ended (bash keeps each background job's exit status
    # for `wait PID`), then prints its log and time.
    molecule_end() {
        local pid ended rc
        while :; do
            for pid in "${!lane[@]}"; do
                ! kill -0 "$pid" 2>/dev/null || continue
                rc=0; wait "$pid" || rc=$?
                ended=${lane[$pid]}
                unset "lane[$pid]"
                banner "molecule $ended"
                cat "$logs/$ended.log"
                echo "molecule $ended: $((SECONDS - lane_start[$ended])) s$([ "$rc" = 0 ] || echo ", failed (exit $rc)")"
                [ "$rc" = 0 ] || failed+=("$ended")
                return 0
            done
            sleep 2
        done
    }
    for scenario in "${queue[@]}"; do
        while [ ${#lane[@]} -ge "$jobs" ]; do molecule_end; done
        molecule test -s "$scenario" >"$logs/$scenario.log" 2>&1 &
        lane[$!]=$scenario lane_start[$scenario]=$SECONDS
    done
    while [ ${#lane[@]} -gt 0 ]; do molecule_end; done
    if [ ${#failed[@]} -gt 0 ]; then
        echo "molecule scenarios failed: ${failed[*]}" >&2
        return 1
    fi
}

# Each stage's elapsed seconds at its end, and a table of all of them when the run ends (passed or
# not): CI logs then show where the suite's time goes (docs/testing.md). The stage runs as before
# (not inside `if`, which would turn set -e off in it); the EXIT trap adds the one that failed.
timings=() current='' stage_start=0
report() {
    local rc=$? row stage seconds note
    [ -z "$current" ] || timings+=("$current $((SECONDS - stage_start)) failed")
    [ ${#timings[@]} -gt 0 ] || return "$rc"
    banner "time per stage"
    printf '%-12s %8s\n' stage seconds
    for row in "${timings[@]}"; do
        read -r stage seconds note <<<"$row"
        printf '%-12s %8s %s\n' "$stage" "$seconds" "${note:-}"
    done
    printf '%-12s %8s\n' total "$SECONDS"
    return "$rc"
}
trap report EXIT

for stage in "${stages[@]}"; do
    banner "$stage"
    current=$stage stage_start=$SECONDS
    "stage_$stage"
    current=''
    timings+=("$stage $((SECONDS - stage_start))")
    echo "stage $stage: $((SECONDS - stage_start)) s"
done
banner "all stages passed: ${stages[*]}"
