#!/usr/bin/env bash
# The real app under Xvfb on the embedded model: two backends run, then the window is saved as a PNG.
set -u
app=$1 out=$2
[ -f "${KVSCOPE_MODEL:-}" ] || { echo "embedded model not found: skipped"; exit 77; }
command -v xvfb-run >/dev/null || { echo "xvfb-run missing (packaging/setup.sh installs xvfb)"; exit 1; }
rm -f "$out"
unset QT_QPA_PLATFORM  # a real X window, not offscreen
timeout 600 xvfb-run -a -s "-screen 0 1600x1000x24" "$app" --model "$KVSCOPE_MODEL" \
  --autorun fp8:overflow=saturate --autorun quanto:nbits=4 --screenshot "$out"
rc=$?
[ $rc -eq 0 ] || { echo "kvscope exited with $rc"; exit 1; }
size=$(stat -c %s "$out" 2>/dev/null || echo 0)
[ "$size" -gt 20000 ] || { echo "screenshot missing or empty ($size bytes)"; exit 1; }
echo "screenshot: $out ($size bytes)"
