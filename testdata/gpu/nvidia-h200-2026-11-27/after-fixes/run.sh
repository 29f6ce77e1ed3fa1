#!/usr/bin/env bash
# The final device check of this session: the merged tree's conformance
# suite on cuda (graph pools included), the graph-pool group through a
# backend process, and cuda's TestGPU* (AllocSync's ladder, the pool trim,
# memory info during a capture).
D=$(cd "$(dirname "$0")" && pwd)
rc=0
c=0; (cd conformance && "$D/conformance.test" -backend=cuda -test.count=1 -test.v -test.timeout=90s >"$OUT/conformance.txt" 2>&1) || { c=$?; rc=1; }
echo "conformance cuda rc=$c"; grep -E "^(--- FAIL|FAIL|ok|PASS)" "$OUT/conformance.txt" | head; grep -cE "^\s*--- PASS" "$OUT/conformance.txt"
grep -E "^\s*--- (PASS|FAIL|SKIP): TestConformance/cuda/GraphPool" "$OUT/conformance.txt" | head -20
(cd conformance && "$D/conformance.test" -backend=plugin:cuda -test.run 'TestConformance/plugin:cuda/GraphPool' -test.count=1 -test.v -test.timeout=60s >"$OUT/plugin.txt" 2>&1) || rc=1
grep -E "^\s*--- (PASS|FAIL|SKIP): TestConformance/plugin:cuda/GraphPool " "$OUT/plugin.txt"; grep -E "^(FAIL|ok|PASS)" "$OUT/plugin.txt" | head -3
(cd cuda && "$D/cuda.test" -test.run '^TestGPU' -test.count=1 -test.v -test.timeout=60s >"$OUT/cuda.txt" 2>&1) || rc=1
grep -E "^(--- |=== RUN|    \S+_gpu_test.go)" "$OUT/cuda.txt" | grep -v "=== RUN" | head -30
exit $rc
