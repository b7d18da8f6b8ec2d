#!/usr/bin/env bash
# Validates every manifest of deploy/kubernetes against the Kubernetes JSON schemas, offline
# (kubernetes-validate bundles them; pinned in requirements.txt), strictly: an unknown field is
# an error. Usage: validate.sh [VENV_DIR]  (default /tmp/cordon-k8s-venv)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-/tmp/cordon-k8s-venv}"
# The Kubernetes release whose schemas the manifests must satisfy (the package bundles several).
k8s_version=1.33.0
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# Every run: a venv left with another version is brought to the pin (nothing is fetched when it
# already matches).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
validate() { "$venv/bin/kubernetes-validate" --strict --kubernetes-version "$k8s_version" "$@"; }
# kustomization.yaml is kustomize's, not a Kubernetes resource (no schema): its resources must exist.
mapfile -t files < <(find "$here" -name '*.yaml' ! -name kustomization.yaml | sort)
sed -n '/^resources:/,/^[a-z]/s/^  - //p' "$here/kustomization.yaml" | while read -r r; do
  [ -f "$here/$r" ] || { echo "kustomization.yaml names $r, which does not exist" >&2; exit 1; }
done
echo "validating ${#files[@]} manifests against Kubernetes $k8s_version schemas (strict)"
validate "${files[@]}"
# The validator must be able to fail: a DaemonSet with a misspelt field is refused.
broken="$(mktemp --suffix=.yaml)"
trap 'rm -f "$broken"' EXIT
sed 's/^      hostPID: true$/      hostPid: true/' "$here/daemonset.yaml" >"$broken"
if validate "$broken" >/dev/null 2>&1; then
  echo "kubernetes-validate accepted a DaemonSet with the unknown field hostPid: it checks nothing" >&2
  exit 1
fi
echo "ok: a misspelt field is refused"
