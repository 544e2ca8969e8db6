#!/usr/bin/env bash
# The offline install a user without network access does: cmake --install
# of a built tree into a temporary prefix, then pip install
# --no-build-isolation of bindings/python against it (into --target), then
# an import that reaches libltier (a join to a port nobody listens on must
# raise PeerDownError).
#
#   tests/python/pip_install_test.sh BUILD_DIR PYTHON
set -euo pipefail
build=$(cd "$1" && pwd)
python=$2
root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
work=$(mktemp -d "${TMPDIR:-/tmp}/ltier-pip-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^LTIER_' || true)

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
# pip builds in the source directory: give it a copy, not the repository.
cp -r "$root/bindings/python" "$work/src"
rm -rf "$work/src/build" "$work/src"/*.egg-info
if ! LTIER_PREFIX=$work/prefix PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q \
    --no-build-isolation --no-deps --no-index --target "$work/site" "$work/src" >"$work/pip.log" 2>&1; then
  cat "$work/pip.log"
  echo "pip install failed" >&2
  exit 1
fi
cd "$work"
PYTHONPATH=$work/site "$python" - <<'PY'
import ltier
assert ltier.__file__.startswith(__import__("os").getcwd()), ltier.__file__
try:
    ltier.join(manager="127.0.0.1:1", secret="x")
except ltier.PeerDownError as e:
    print("installed module works:", e)
else:
    raise SystemExit("join to a closed port did not fail")
PY
