#!/usr/bin/env bash
# The driver scenario's dependency step: what every lab node needs (scripts/lab.sh build), the
# stand-in package mirror and the fake PCI views of the scenario's three machines.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
"$root/scripts/lab.sh" build
python3 "$root/extensions/molecule/driver/standin_repo.py" >/dev/null
python3 "$root/extensions/molecule/driver/pci_views.py" "$root/.cache/driver_pci"
