#!/usr/bin/env bash
# bench/real-nccl.sh on a machine without a GPU: it says why and exits 0, whether PyTorch is
# missing or present without CUDA (a stand-in torch module); and its comparison step prints both
# busbw columns with their ratio and fails on a wrong result.
#   real_nccl_script_test.sh <python3> <bench dir>
set -euo pipefail
py=$1 bench=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
expect() {  # expect <name> <want rc> <want text> <output> <rc>
  if [[ $5 -ne $2 ]] || ! grep -qF "$3" <<<"$4"; then
    echo "FAIL: $1: rc $5 (want $2), output:" >&2
    echo "$4" >&2
    status=1
  else
    echo "ok: $1: $(head -1 <<<"$4")"
  fi
}

rc=0; out=$(PYTHON=$dir/no-such-python "$bench/real-nccl.sh" 2>&1) || rc=$?
expect "no python" 0 "real NCCL was not run" "$out" $rc

mkdir -p "$dir/empty"
rc=0; out=$(PYTHONPATH=$dir/empty PYTHONNOUSERSITE=1 PYTHON=$py "$bench/real-nccl.sh" 2>&1) || rc=$?
if "$py" -c "import torch" 2>/dev/null; then
  echo "note: this machine has PyTorch; the no-PyTorch case is not checked"
else
  expect "no PyTorch" 0 "no PyTorch" "$out" $rc
fi

mkdir -p "$dir/fake/torch/distributed"
cat >"$dir/fake/torch/__init__.py" <<'PY'
__version__ = "0.0-test"
class cuda:
    @staticmethod
    def is_available():
        return False
PY
echo "def is_available(): return True" >"$dir/fake/torch/distributed/__init__.py"
rc=0; out=$(PYTHONPATH=$dir/fake PYTHON=$py "$bench/real-nccl.sh" /no/such/plugin.so 2>&1) || rc=$?
expect "PyTorch without a GPU" 0 "no GPU: torch.cuda.is_available() is False" "$out" $rc

for net in C4 Socket; do
  : >"$dir/$net.jsonl"
  for op in all_reduce sendrecv; do
    bw=$([[ $net == C4 ]] && echo 1.5 || echo 1.0)
    echo "{\"net\":\"$net\",\"op\":\"$op\",\"size\":1024,\"timeUs\":10,\"algbwGBs\":$bw,\"busbwGBs\":$bw,\"ok\":true}" >>"$dir/$net.jsonl"
  done
done
rc=0; out=$("$py" "$bench/real_nccl.py" compare "$dir/C4.jsonl" "$dir/Socket.jsonl") || rc=$?
expect "compare" 0 "| all_reduce | 1024 | 1.500 | 1.000 | 1.50 |" "$out" $rc
sed -i 's/"ok":true}$/"ok":false}/' "$dir/C4.jsonl"
rc=0; out=$("$py" "$bench/real_nccl.py" compare "$dir/C4.jsonl" "$dir/Socket.jsonl") || rc=$?
expect "compare with a wrong result" 1 "WRONG" "$out" $rc
exit $status
