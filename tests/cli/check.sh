# Sourced by the CLI tests: check NAME RC TEXT COMMAND... runs the command and wants its exit status and, in its
# combined output, the text (grep -F); a miss prints the output and sets fail=1.
fail=0
check() {
  local name=$1 rc=$2 text=$3; shift 3
  out=$("$@" 2>&1); got=$?
  if [ "$got" -ne "$rc" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL $name: rc $got (want $rc), output:"; echo "$out"; fail=1
  else
    echo "ok   $name"
  fi
}
