#!/usr/bin/env bash
# kvscope-cli on bad input and when things fail: one clear line and exit 2 for anything the user gave (empty or huge
# prompts, truncated or lying model files, unwritable outputs), and results files that are always whole: written
# atomically, a sweep's finished runs kept when a later run dies. Model cases skip (the rest still runs) when the
# embedded model is missing.
set -u
cli=$1
model=${KVSCOPE_MODEL:-}
py=${KVSCOPE_PYTHON:-python3}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name, expected text (grep -F), command...: exit 2 and exactly one line, naming the problem.
bad() {
  local name=$1 text=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$text" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ]; then echo "ok   $name"
  else echo "FAIL $name: rc $rc (want 2, one line with '$text'): $out"; fail=1; fi
}
no_temp_left() {  # dir
  if ls "$1" | grep -q '\.tmp[0-9]'; then echo "FAIL temporary file left in $1: $(ls "$1")"; fail=1; fi
}

# ---- outputs: atomic, and an unwritable path is a clear error ----
bad export-unwritable 'cannot write `/nonexistent/dir/c.json`' "$cli" export --cache fp8 -o /nonexistent/dir/c.json
mkdir "$tmp/adir"
bad export-onto-dir "cannot write \`$tmp/adir\`" "$cli" export --cache fp8 -o "$tmp/adir"
echo "old contents" > "$tmp/c.json"
"$cli" export --cache quanto:nbits=2 --format kvscope -o "$tmp/c.json" 2>/dev/null
if grep -q '"nbits": 2' "$tmp/c.json" && ! grep -q 'old contents' "$tmp/c.json"; then echo "ok   export replaces the file"
else echo "FAIL export replace: $(cat "$tmp/c.json")"; fail=1; fi
no_temp_left "$tmp"
if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere: the read-only directory case only means something for users
  mkdir "$tmp/ro" && chmod 555 "$tmp/ro"
  bad export-readonly-dir 'Permission denied' "$cli" export --cache fp8 -o "$tmp/ro/c.json"
fi

if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "embedded model not found ($model): model cases skipped"
  exit $fail
fi

# ---- sweep --out ----
# Unwritable: refused before the model loads.
bad sweep-unwritable 'cannot write `/nonexistent/dir/s.jsonl`' "$cli" sweep --model "$model" --prompt hi \
  --grid 'quanto:nbits=2' --out /nonexistent/dir/s.jsonl
# Appends to what the file holds, one whole JSON line per finished config.
echo '{"earlier": true}' > "$tmp/s.jsonl"
"$cli" sweep --model "$model" --prompt "The capital of France is" --max-new 2 --grid 'quanto:nbits=2,4' \
  --json --out "$tmp/s.jsonl" > /dev/null 2>"$tmp/err" || { echo "FAIL sweep rc=$?"; cat "$tmp/err"; fail=1; }
"$py" - "$tmp/s.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[0] == {"earlier": True} and len(rows) == 3, rows
assert [r["config"] for r in rows[1:]] == ["quanto:nbits=2", "quanto:nbits=4"], rows
print("ok   sweep --out appends whole lines")
PY
no_temp_left "$tmp"
# A sweep killed (SIGKILL) after its first finished config: what was written is whole and kept.
"$cli" sweep --model "$model" --prompt "The capital of France is" --max-new 48 \
  --grid 'quanto:nbits=2,4;q_group_size=32,64;residual_length=0,16' --json --out "$tmp/k.jsonl" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 3000); do  # up to 5 minutes for the first config on a loaded machine
  [ -s "$tmp/k.jsonl" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
"$py" - "$tmp/k.jsonl" <<'PY' || fail=1
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), "last line cut: %r" % text[-80:]
rows = [json.loads(l) for l in text.splitlines()]
assert 1 <= len(rows) < 8, len(rows)
assert all("config" in r and "mean_kl" in r for r in rows), rows
print("ok   sweep killed after %d of 8 configs: %d whole lines kept" % (len(rows), len(rows)))
PY

# ---- prompts ----
bad empty-prompt 'empty prompt' "$cli" generate --model "$model" --prompt ""
# Options core checks (generate.cpp) are the user's too: exit 2, not an internal error.
bad temperature-0 'generate: temperature must be > 0, got 0' "$cli" generate --model "$model" --prompt hi --sample \
  --temperature 0 --max-new 1
bad top-p-above-1 'generate: top_p must be in (0, 1], got 1.5' "$cli" generate --model "$model" --prompt hi --sample \
  --top-p 1.5 --max-new 1
bad beams-nothing-new 'beam search: max new tokens must be >= 1' "$cli" generate --model "$model" --prompt hi --beams 2 \
  --max-new 0
: > "$tmp/empty.txt"
bad empty-prompt-file "prompt file \`$tmp/empty.txt\` is empty" "$cli" generate --model "$model" --prompt-file "$tmp/empty.txt"
bad missing-prompt-file "cannot read prompt file \`$tmp/none.txt\`" "$cli" generate --model "$model" --prompt-file "$tmp/none.txt"
# Longer than the model's context (8192 for SmolLM2): refused before any forward pass, in every command.
"$py" -c "import sys; sys.stdout.write('the cat sat on the mat. ' * 3000)" > "$tmp/huge.txt"
bad huge-prompt-generate "exceed the model's context of 8192" "$cli" generate --model "$model" --prompt-file "$tmp/huge.txt" --max-new 4
bad huge-prompt-compare "exceed the model's context of 8192" "$cli" compare --model "$model" --prompt-file "$tmp/huge.txt" --max-new 4 --cache fp8
bad huge-prompt-sweep "exceed the model's context of 8192" "$cli" sweep --model "$model" --prompt-file "$tmp/huge.txt" --max-new 4 --grid 'quanto:nbits=2'

# ---- model files ----
head -c 1000000 "$model" > "$tmp/cut.gguf"
bad truncated-gguf "$tmp/cut.gguf: truncated while reading" "$cli" generate --model "$tmp/cut.gguf" --prompt hi
head -c 20 "$model" > "$tmp/tiny.gguf"
bad tiny-gguf "$tmp/tiny.gguf: 20 bytes is too short for a GGUF file" "$cli" generate --model "$tmp/tiny.gguf" --prompt hi
mkdir "$tmp/hf"
cat > "$tmp/hf/tokenizer.json" <<'JSON'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
 "decoder": {"type": "ByteLevel"}}
JSON
echo '{"model_type": "llama", "hidden_size": "64", "num_hidden_layers": 1}' > "$tmp/hf/config.json"
bad hf-config-type "$tmp/hf/config.json: \`hidden_size\` must be a number, found string" \
  "$cli" generate --model "$tmp/hf" --prompt ab
echo '{"model_type": "gpt_neox", "hidden_size": 64}' > "$tmp/hf/config.json"
bad hf-config-arch "\`model_type\` \`gpt_neox\` is not supported" "$cli" generate --model "$tmp/hf" --prompt ab
exit $fail
