#!/usr/bin/env bash
# Installs a built ltier tree into a temporary prefix and builds an outside
# program (main.c, main.cc here) against that prefix only: through the CMake
# package (ltier::ltier and ltier::ltier_static), through pkg-config, and
# through pkg-config --static; runs each build. Needs no cluster.
#
#   tests/install/install_test.sh BUILD_DIR [OUTSIDE_PROJECT_DIR]
#
# BUILD_DIR must be fully built. Environment: CC and CXX (default cc, c++);
# LTIER_INSTALL_TEST_FLAGS, added to every compile and link (the sanitizer
# flags of a sanitizer tree, whose libraries need their runtime).
set -euo pipefail

die() {
  echo "install_test: $*" >&2
  exit 1
}
step() { printf '== %s\n' "$*"; }

if (($# < 1 || $# > 2)); then
  echo "usage: $0 BUILD_DIR [OUTSIDE_PROJECT_DIR]" >&2
  exit 2
fi
[[ -f $1/CMakeCache.txt ]] || die "$1 is not a configured CMake build tree"
build=$(cd "$1" && pwd)
src=$(cd "${2:-$(dirname "$0")}" && pwd)
[[ -f $src/CMakeLists.txt && -f $src/main.c && -f $src/main.cc ]] ||
  die "$src does not hold the outside project (CMakeLists.txt, main.c, main.cc)"
root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
[[ -n $root ]] || die "no CMAKE_HOME_DIRECTORY in $build/CMakeCache.txt"
for tool in cmake pkg-config readelf; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
CC=${CC:-cc}
CXX=${CXX:-c++}
extra=()
read -r -a extra <<<"${LTIER_INSTALL_TEST_FLAGS:-}"

# The programs read LTIER_* variables (LTIER_CONFIG above all): start from none.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^LTIER_' || true)

work=$(mktemp -d "${TMPDIR:-/tmp}/ltier-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
not_yaml=$work/not-yaml.yaml
printf 'engine: [unclosed\n' >"$not_yaml"

# run LOG CMD...: runs CMD with its output in LOG, shown if it fails.
run() {
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    die "failed: $*"
  fi
}

# check EXE shared|static: runs the outside program EXE, which must (shared)
# or must not (static) load libltier.so, and shows its last line.
check() {
  local exe=$1 kind=$2 dyn needed=no
  dyn=$(readelf -d "$exe") || die "readelf -d $exe failed"
  if [[ $dyn == *"[libltier.so"* ]]; then needed=yes; fi
  if [[ $kind == shared && $needed == no ]]; then
    die "$(basename "$exe") does not load libltier.so"
  elif [[ $kind == static && $needed == yes ]]; then
    die "$(basename "$exe") loads libltier.so: it should hold libltier.a's code"
  fi
  run "$exe.log" "$exe" "$not_yaml"
  echo "   $(tail -n1 "$exe.log")"
}

step "cmake --install $build --prefix <tmp>"
run "$work/install.log" cmake --install "$build" --prefix "$prefix"
for f in include/ltier/lt.h include/ltier/ltier.hpp include/ltier/manager.h \
  bin/ltier-manager bin/ltier-node bin/ltier-perf bin/ltier-info bin/ltier-run; do
  [[ -e $prefix/$f ]] || die "not installed: $f"
done
pc=$(find "$prefix" -path '*/pkgconfig/ltier.pc' | head -n1)
[[ -n $pc ]] || die "not installed: ltier.pc"
libdir=$(dirname "$(dirname "$pc")")
for f in libltier.so libltier.a cmake/ltier/ltierConfig.cmake \
  cmake/ltier/ltierConfigVersion.cmake cmake/ltier/ltierTargets.cmake \
  cmake/ltier/ltierStaticTargets.cmake; do
  [[ -e $libdir/$f ]] || die "not installed: ${libdir#"$prefix"/}/$f"
done
if grep -rlF -e "$root" -e "$build" "$libdir/cmake/ltier" "$pc"; then
  die "the files above name the source or build tree"
fi
# The tools find libltier.so through their RPATH.
run "$work/info.log" "$prefix/bin/ltier-info" --config

step "CMake package: find_package(ltier) with CMAKE_PREFIX_PATH=<tmp>"
run "$work/configure.log" cmake -S "$src" -B "$work/cmake" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_FLAGS="${extra[*]}" \
  -DCMAKE_CXX_FLAGS="${extra[*]}" -DCMAKE_EXE_LINKER_FLAGS="${extra[*]}"
found=$(sed -n 's/^ltier_DIR:PATH=//p' "$work/cmake/CMakeCache.txt")
[[ $found == "$prefix"/* ]] || die "find_package(ltier) found '$found', not the temporary prefix"
run "$work/build.log" cmake --build "$work/cmake" -j 2
for kind in shared static; do
  check "$work/cmake/c_$kind" "$kind"
  check "$work/cmake/cxx_$kind" "$kind"
done

export PKG_CONFIG_PATH=$libdir/pkgconfig
pkg-config --print-errors --exists ltier || die "pkg-config cannot use $pc"
cflags=() libs=() static_libs=()
read -r -a cflags <<<"$(pkg-config --cflags ltier)"

step "pkg-config: $CC main.c \$(pkg-config --cflags --libs ltier)"
read -r -a libs <<<"$(pkg-config --libs ltier)"
run "$work/pc_shared.log" "$CC" "${extra[@]}" "${cflags[@]}" "$src/main.c" -o "$work/pc_shared" \
  "${libs[@]}"
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} check "$work/pc_shared" shared

step "pkg-config --static: $CC main.c \$(pkg-config --static --cflags --libs ltier)"
read -r -a static_libs <<<"$(pkg-config --static --libs ltier)"
# Where libltier.so and libltier.a lie side by side, -lltier takes the .so:
# name the archive.
for i in "${!static_libs[@]}"; do
  if [[ ${static_libs[i]} == -lltier ]]; then static_libs[i]=-l:libltier.a; fi
done
run "$work/pc_static.log" "$CC" "${extra[@]}" "${cflags[@]}" "$src/main.c" -o "$work/pc_static" \
  "${static_libs[@]}"
check "$work/pc_static" static

step "install test passed"
