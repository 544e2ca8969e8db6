#!/usr/bin/env bash
# Fails when a layer includes a layer above it (docs/STYLE.md section 1: api -> proto ->
# qos -> transport -> common), or when a user of the public API reaches past api/include.
set -u
root=${1:-.}
cd "$root" || exit 2
bad=0
check() {  # dir, regex of forbidden include prefixes
  local hits
  hits=$(grep -rnE "#include [\"<]($2)/" "$1" --include='*.h' --include='*.cc' 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layering violation: $1 must not include $2:" >&2
    echo "$hits" >&2
    bad=1
  fi
}
check common 'transport|qos|proto|api'
check transport 'qos|proto|api'
check qos 'proto|api'
check proto 'api'
for d in examples tools bindings; do
  [ -d "$d" ] && check "$d" 'common|transport|qos|proto|api/[a-z_]+\.h'
done
exit $bad
