# shellcheck shell=bash
# Environment shared by the lab, the test suite and the benchmarks.
# Source it from the repository root: . scripts/env.sh
KUBEGPU_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export KUBEGPU_ROOT
export VIRTUAL_ENV="$KUBEGPU_ROOT/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$KUBEGPU_ROOT/.cache/collections"
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=true
export ANSIBLE_HOST_KEY_CHECKING=false
export ANSIBLE_RETRY_FILES_ENABLED=false
export ANSIBLE_NOCOLOR="${ANSIBLE_NOCOLOR:-${CI:+1}}"
export ANSIBLE_FORCE_COLOR=false
export ANSIBLE_PIPELINING=true
# facts only under ansible_facts (the roles read nothing else): no copy of every fact as a top-level
# variable, which Ansible otherwise rebuilds for every task on every host
export ANSIBLE_INJECT_FACT_VARS=false
export ANSIBLE_LOCAL_TEMP="$KUBEGPU_ROOT/.cache/ansible-tmp"
# Python writes the bytecode of the collection's plugins on first import, as for an installed collection
# (docs/development.md): Ansible imports them afresh in every worker process
unset PYTHONDONTWRITEBYTECODE
export MOLECULE_NO_LOG=false
