#!/usr/bin/env bash
# kvscope-cli probe on the embedded model: the tasks listed, clear errors, the unquantized model answering the short
# retrieval probes right, every answer token of a quantizing config reading quantized states, and two shards merged
# into what one run gives. Exit 77 (skipped) without the model.
set -u
source "$(dirname "$0")/model_test_setup.sh"
"$cli" probe --help > "$tmp/help" || { echo "FAIL probe --help"; fail=1; }
for t in passkey niah_single_1 niah_multikey_2 niah_multikey_3 vt cwe fwe json_tool; do
  grep -q "^  $t " "$tmp/help" || { echo "FAIL --help lacks task $t"; fail=1; }
done
expect_error() {  # $1: what the message must say; the rest: probe's arguments
  local want=$1; shift
  "$cli" probe --model "$model" "$@" > /dev/null 2> "$tmp/err"; local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/err" || { echo "FAIL probe $* (rc $rc): want '$want'"; cat "$tmp/err"; fail=1; }
}
expect_error "--tasks: no probe task \`needle\`" --cache fp8 --tasks needle
expect_error "--depths: \`120\` is not a depth in percent" --cache fp8 --depths 50,120
expect_error "--lengths: \`4q\` is not a token count" --cache fp8 --lengths 4q
expect_error "past the model's trained context of 8192; add --beyond-context" --cache fp8 --lengths 16k
expect_error "unknown cache backend" --cache nope --lengths 1k

# The short retrieval probes: a passkey and a needle among noise lines at 1k tokens, two depths. The embedded model
# (135M parameters) answers them right unquantized; RULER's harder tasks (multi-key needles, variable tracking,
# aggregation) and the JSON call are beyond it at any length (it repeats a distractor or the list's format), which the
# suite's own tests check are answerable from the text (ProbeSuite.*) rather than by this model.
args=(--model "$model" --threads 2 --lengths 1k --depths 10,90 --tasks passkey,niah_single_1
      --cache llamacpp --cache "quanto:nbits=2")
"$cli" probe "${args[@]}" --json > "$tmp/p.jsonl" 2> "$tmp/err" || { echo "FAIL probe"; cat "$tmp/err"; fail=1; }
grep -q "^probe 4/4 niah_single_1/1024/d90/s0" "$tmp/err" || { echo "FAIL progress"; cat "$tmp/err"; fail=1; }
"$py" - "$tmp/p.jsonl" <<'PY' || fail=1
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
run, recs = lines[0]["run"], lines[1:]
assert run["tasks"] == ["passkey", "niah_single_1"] and run["lengths"] == [1024] and run["depths"] == [10, 90], run
assert [r["probe"] for r in recs] == ["passkey/1024/d10/s0", "passkey/1024/d90/s0", "niah_single_1/1024/d10/s0",
                                      "niah_single_1/1024/d90/s0"], [r["probe"] for r in recs]
for r in recs:
    assert 900 < r["prompt_tokens"] <= 1024 - 24, r["prompt_tokens"]
    ref, q8, q2 = r["results"]
    assert ref["reference"] and ref["config"] == "dynamic (reference)"
    assert ref["score"] == 1.0 and r["answers"][0] in ref["text"], (r["probe"], ref["text"], r["answers"])
    for a in (q8, q2):
        # Every answer token read quantized states (the prompt is longer than a prefill chunk of 512).
        assert a["quantized_reads"] == a["answer_tokens"] > 0, a
        assert len(a["kl"]) >= 1 and all(k is None or k >= 0 for k in a["kl"]), a
        assert a["same_answer"] == (a["first_divergence"] == -1), a
        if a["same_answer"]:
            assert a["text"] == ref["text"] and len(a["kl"]) == ref["answer_tokens"], a
# 2-bit quanto moves the answer distribution more than q8_0 does.
kl = lambda i: sum(sum(k for k in r["results"][i]["kl"] if k is not None) / len(r["results"][i]["kl"]) for r in recs)
assert kl(2) > kl(1) > 0, (kl(1), kl(2))
PY

# Two shards merged: the same records as the unsharded run (less the timings), and the same table.
"$cli" probe "${args[@]}" --shard 1/2 --out "$tmp/s1" 2> /dev/null || { echo "FAIL shard 1"; fail=1; }
"$cli" probe "${args[@]}" --shard 2/2 --out "$tmp/s2" 2> /dev/null || { echo "FAIL shard 2"; fail=1; }
"$cli" merge "$tmp/s2" "$tmp/s1" --json > "$tmp/m.jsonl" 2> /dev/null || { echo "FAIL merge"; fail=1; }
"$py" - "$tmp/p.jsonl" "$tmp/m.jsonl" <<'PY' || fail=1
import json, sys
def recs(p):
    out = []
    for line in list(open(p))[1:]:
        r = json.loads(line)
        for a in r["results"]:
            a.pop("seconds")
        out.append(r)
    return out
a, b = recs(sys.argv[1]), recs(sys.argv[2])
assert a == b, "merged shards differ from the unsharded run"
PY
"$cli" merge "$tmp/s1" "$tmp/s2" > "$tmp/table" 2> /dev/null || { echo "FAIL merge table"; fail=1; }
grep -q "agreement of quanto:nbits=2 by depth" "$tmp/table" && grep -q "right|ref ok" "$tmp/table" \
  || { echo "FAIL merged table"; cat "$tmp/table"; fail=1; }
exit $fail
