#!/usr/bin/env bash
# The installed tree, as the .deb lays it out: `cmake --install` into a scratch prefix, then the installed binaries
# run with no venv on their library path (LibTorch comes from <prefix>/lib/kvscope), the .desktop file and icon are
# in place, and the GUI, started with no model anywhere, refuses cleanly in batch mode.
#   test_install.sh BUILD_DIR
set -euo pipefail
build=$1
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Everything but the model (component `model`: the package ships it when present; copying it is not what is tested).
cmake --install "$build" --prefix "$stage" --component Unspecified >/dev/null

cli=$stage/bin/kvscope-cli
[ -x "$cli" ] || fail "kvscope-cli not installed"
ls "$stage"/lib/kvscope/libtorch_cpu.so "$stage"/lib/kvscope/libc10.so >/dev/null || fail "LibTorch not bundled"
# Every library resolves, and LibTorch from the bundle, not from the venv the build used.
deps=$(env -u LD_LIBRARY_PATH ldd "$cli")
! grep -q "not found" <<<"$deps" || fail "unresolved libraries: $(grep 'not found' <<<"$deps")"
grep -q "libtorch_cpu.so => $stage/bin/../lib/kvscope/libtorch_cpu.so" <<<"$deps" \
  || fail "libtorch_cpu does not come from the bundle: $(grep libtorch_cpu <<<"$deps")"
! grep -q "/venv/" <<<"$deps" || fail "the installed CLI still reaches into the venv"
out=$(env -u LD_LIBRARY_PATH "$cli" backends)
grep -q "fp8" <<<"$out" || fail "kvscope-cli backends printed: $out"

gui=$stage/bin/kvscope
if [ -x "$gui" ]; then
  gdeps=$(env -u LD_LIBRARY_PATH ldd "$gui")
  ! grep -q "not found" <<<"$gdeps" || fail "GUI: unresolved libraries"
  ! grep -q "/venv/" <<<"$gdeps" || fail "the installed GUI still reaches into the venv"
  ver=$(QT_QPA_PLATFORM=offscreen env -u LD_LIBRARY_PATH "$gui" --version)
  grep -q "kvscope" <<<"$ver" || fail "kvscope --version printed: $ver"
  # No model anywhere (empty HOME, no KVSCOPE_MODEL, none shipped in this prefix): batch mode says so, exit 2.
  set +e
  msg=$(HOME=$stage/home QT_QPA_PLATFORM=offscreen env -u KVSCOPE_MODEL -u LD_LIBRARY_PATH "$gui" --quit 2>&1)
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "kvscope --quit without a model exited $rc: $msg"
  grep -q "no model found" <<<"$msg" || fail "kvscope without a model said: $msg"
  desktop=$stage/share/applications/kvscope.desktop
  [ -f "$desktop" ] || fail ".desktop file not installed"
  grep -q "^Exec=kvscope" "$desktop" || fail ".desktop has no Exec=kvscope"
  if command -v desktop-file-validate >/dev/null; then desktop-file-validate "$desktop" || fail "desktop-file-validate"; fi
  [ -f "$stage/share/icons/hicolor/scalable/apps/kvscope.svg" ] || fail "icon not installed"
fi
# The CLI looks for a model where the GUI does (runtime::defaultModelPath): with none anywhere it says where it looked
# and exits 2; with one in <prefix>/share/kvscope/models (as the package ships it) it runs on it, HOME empty.
set +e
msg=$(HOME=$stage/home env -u KVSCOPE_MODEL -u KVSCOPE_CACHE -u LD_LIBRARY_PATH "$cli" generate --prompt hi --max-new 1 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] || fail "kvscope-cli generate without a model exited $rc: $msg"
grep -q "no model found (looked in .*share/kvscope/models" <<<"$msg" || fail "kvscope-cli without a model said: $msg"
if [ -f "${KVSCOPE_MODEL:-}" ]; then
  mkdir -p "$stage/share/kvscope/models"
  ln -s "$(realpath "$KVSCOPE_MODEL")" "$stage/share/kvscope/models/$(basename "$KVSCOPE_MODEL")"
  out=$(HOME=$stage/home env -u KVSCOPE_MODEL -u KVSCOPE_CACHE -u LD_LIBRARY_PATH "$cli" generate --prompt hi \
        --max-new 2 --cache dynamic 2>&1) || fail "kvscope-cli generate on the shipped model: $out"
  grep -q "KV stored" <<<"$out" || fail "kvscope-cli generate on the shipped model printed: $out"
fi
echo "installed tree OK: $(du -sh "$stage" | cut -f1) in $stage"
