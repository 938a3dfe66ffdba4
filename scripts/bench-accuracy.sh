#!/usr/bin/env bash
# The trainer issue's ResNet34 accuracy check (a benchmark, not CI: it trains for real):
# the recipe's ResNet34 with a 1x28x28 input, recipe settings, N epochs (default 1) on
# Fashion-MNIST, onnx-train beside PyTorch (benchmarks/torch_fmnist_epoch.py) for each seed.
# One epoch at lr 0.1 with momentum ends wherever the last steps left the weights and the
# BatchNorm statistics, so a single run's test accuracy varies by several points from seed
# to seed in either framework: compare the means over several seeds.
#   SEEDS="0 1 2 3" JOBS=2 scripts/bench-accuracy.sh [EPOCHS] [THREADS]
# Runs JOBS trainings at a time (each with THREADS threads, default 1) and prints a table
# and each framework's mean. Results already in build/bench-accuracy are reused (FRESH=1 reruns).
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-1}
threads=${2:-1}
seeds=${SEEDS:-0 1 2 3}
jobs=${JOBS:-2}
BUILD=${BUILD_DIR:-build}
cmake --build "$BUILD" -j 2 --target onnx-train >/dev/null
work="$BUILD/bench-accuracy"
mkdir -p "$work"
runs=()
for s in $seeds; do runs+=("ours $s" "torch $s"); done
run_one() {  # FRAMEWORK SEED -> writes $work/FRAMEWORK-SEED.json
  local fw=$1 s=$2 out="$work/$1-$2"
  if [ -s "$out.json" ] && [ -z "${FRESH:-}" ]; then return; fi  # kept from an earlier run
  if [ "$fw" = ours ]; then
    "$BUILD/tools/onnx-train" make-model resnet34 --input 1x28x28 -o "$out.onnx" --seed "$s" >/dev/null
    "$BUILD/tools/onnx-train" "$out.onnx" --recipe resnet34 --data fashion-mnist --epochs "$epochs" \
      --seed "$s" --threads "$threads" --checkpoint-dir "$out.ckpt" --metrics "$out.jsonl" --quiet >"$out.log" 2>&1
    /usr/bin/python3 - "$out.jsonl" >"$out.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ep = [r for r in rows if r["type"] == "epoch"][-1]
steps = sum(1 for r in rows if r["type"] == "step")
print(json.dumps({"test_accuracy": ep["test_acc"],
                  "s_per_step": round(sum(r.get("step_ms", 0) for r in rows if r["type"] == "step") / 1000 / max(steps, 1), 3)}))
PY
  else
    /usr/bin/python3 benchmarks/torch_fmnist_epoch.py --epochs "$epochs" --threads "$threads" --seed "$s" \
      | tail -1 >"$out.json"
  fi
}
i=0
for r in "${runs[@]}"; do
  run_one $r &
  i=$((i + 1))
  if [ $((i % jobs)) -eq 0 ]; then wait; fi
done
wait
/usr/bin/python3 - "$work" $seeds <<'PY'
import json, os, statistics, sys
work, seeds = sys.argv[1], sys.argv[2:]
acc = {"ours": [], "torch": []}
print(f"{'seed':>4} {'onnx-train':>11} {'PyTorch':>8}")
for s in seeds:
    row = []
    for fw in ("ours", "torch"):
        a = 100 * json.load(open(os.path.join(work, f"{fw}-{s}.json")))["test_accuracy"]
        acc[fw].append(a)
        row.append(a)
    print(f"{s:>4} {row[0]:>10.2f}% {row[1]:>7.2f}%")
mo, mt = statistics.mean(acc["ours"]), statistics.mean(acc["torch"])
sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
print(f"mean {mo:>10.2f}% {mt:>7.2f}%   (sd {sd(acc['ours']):.2f} / {sd(acc['torch']):.2f}); "
      f"onnx-train - PyTorch = {mo - mt:+.2f} points")
PY
