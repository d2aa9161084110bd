#!/bin/bash
# One lent-GPU session in one call (docs/lab/09-16.md#h100-first-lease): the sync check, the step times on a
# quiet GPU, then the host zoo's cells as parallel processes until a deadline. Run from the repository root on
# the GPU machine, with the wheels of .whl (vector-quantize-pytorch 1.32.0 and its needs, POT) and the image packs
# of .gpudata (benchmarks/device_pack.py) carried beside the working tree:
#
# The wheels, here (Python 3.12 on the GPU machine): for each of vector-quantize-pytorch==1.32.0 einx==0.4.3
# torch-einops-utils==0.2.0 loguru==0.7.3 frozendict==2.5.1 POT==0.9.5 (POT 0.9.5's wheel is 0.9 MB, 0.9.7's 33 MB):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl NAME
# and the packs: .venv/bin/python benchmarks/device_pack.py --dataset mnist --out .gpudata/mnist.pt (cifar10 alike).
#
#   OUT=/tmp/out bash benchmarks/device_run.sh               # results in $OUT
#   DEVICE=cpu STEPS=20 EVAL=10 DEADLINE=120 P=2 OUT=/tmp/out bash benchmarks/device_run.sh   # a dry run here
#   PARTS=compile OUT=/tmp/out bash benchmarks/device_run.sh  # eager against torch.compile step times only (docs/lab/30-39.md#gpu-launch-bound)
#
# PARTS picks the parts, in this order: sync (the sync check), step (eager step times), compile (eager against
# torch.compile, CUDA graphs and a larger batch), fused (compile_update: kernels and step times), graph (graph_update:
# the sync check, kernels and step times; docs/lab/40-47.md#gpu-cuda-graph), zoo (the host zoo); default "sync step zoo".
set -u
export PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-3000} EVAL=${EVAL:-500} DEADLINE=${DEADLINE:-330} P=${P:-12}
PY=${PY:-python3}
export PYTHONPATH=$PWD/src  # the machine's own torch; the peers' wheels, when carried, beside it
if [ -d .whl ] && [ "$DEVICE" = cuda ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
} | tee "$OUT/env.txt"

ZOO_ONLY=${ZOO_ONLY:-}  # set (a grep pattern over the cells' arguments): skip 1 and 2, run those cells only
PARTS=${PARTS:-sync step zoo}
[ -n "$ZOO_ONLY" ] && PARTS=zoo
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
# 1. no host synchronisation in any quantizer's training step, eager and with compile_update (its compilation takes
# most of the time limit, SYNC_TIMEOUT seconds)
if [ "$DEVICE" = cuda ] && has sync; then
  timeout "${SYNC_TIMEOUT:-240}" $PY -m pytest -q -p no:cacheprovider tests/test_cuda_sync.py 2>&1 | tee "$OUT/sync.log" | tail -12
fi
# 2. step time, VQ-VAE against VQ-WAE's solvers and SQ-VAE, interleaved, on the paper's network (quiet device)
has step && timeout 60 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,sinkhorn,dual,sqvae \
  --rounds 15 --json "$OUT/step_time_k512.json" 2>&1 | tail -8
has step && timeout 45 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete --num-codes 8192 \
  --rounds 15 --json "$OUT/step_time_k8192.json" 2>&1 | tail -4

# 2b. the launch overhead (docs/lab/30-39.md#gpu-launch-bound): eager against torch.compile (inductor), then CUDA graphs (reduce-overhead),
# then a batch of 256 eager; each comparison interleaved in one process, each under its own time limit
if has compile; then
  CT=${COMPILE_TIMEOUT:-200}
  timeout "$CT" $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,vqvae+compile,semidiscrete+compile \
    --rounds 15 --json "$OUT/step_time_compile_k512.json" 2>"$OUT/compile_k512.log" | tail -6
  timeout "$CT" $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,vqvae+compile,semidiscrete+compile \
    --rounds 15 --compile-mode reduce-overhead --json "$OUT/step_time_cudagraphs_k512.json" 2>"$OUT/cudagraphs_k512.log" | tail -6
  timeout 60 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete --batch-size 256 \
    --rounds 15 --json "$OUT/step_time_b256_k512.json" 2>&1 | tail -4
  timeout "$CT" $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,vqvae+compile,semidiscrete+compile \
    --num-codes 8192 --rounds 15 --json "$OUT/step_time_compile_k8192.json" 2>"$OUT/compile_k8192.log" | tail -6
fi
# 2c. compile_update (docs/lab/30-39.md#gpu-launch-bound): the quantizer's kernels per step and the step time with its update fused
if has fused; then
  $PY benchmarks/profile_quantizer.py --device "$DEVICE" --rows 0 \
    --solvers vqvae,semidiscrete-shared,semidiscrete-shared-compiled-update 2>"$OUT/profile.err" | tee "$OUT/profile.txt"
  timeout 90 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,semidiscrete-compiled-update \
    --rounds 15 --json "$OUT/step_time_fused_k512.json" 2>"$OUT/fused_k512.err" | tail -4
  timeout 60 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,semidiscrete-compiled-update \
    --arch conv64 --hidden 256 --batch-size 128 --rounds 12 --json "$OUT/step_time_fused_conv64.json" \
    2>"$OUT/fused_conv64.err" | tail -4
fi
# 2d. graph_update (docs/lab/40-47.md#gpu-cuda-graph): the sync check (every mode), the replayed update against the launched one, the
# launches per step, and the step times with the update replayed (the default) or launched op by op
if has graph; then
  G="$OUT/graph"; mkdir -p "$G"  # one archive comes back (at most 8 files do)
  timeout "${SYNC_TIMEOUT:-240}" $PY -m pytest -q -p no:cacheprovider tests/test_cuda_sync.py 2>&1 | tee "$G/sync.log" | tail -8
  timeout 90 $PY benchmarks/profile_quantizer.py --device "$DEVICE" --rows 0 \
    --solvers vqvae,semidiscrete-shared,semidiscrete-shared-eager-update,semidiscrete,vqvae-masked,semidiscrete-shared-masked \
    2>"$G/profile.err" | tee "$G/profile.txt"
  timeout 90 $PY benchmarks/profile_quantizer.py --device "$DEVICE" --rows 0 --num-codes 8192 \
    --solvers semidiscrete-shared,semidiscrete-shared-pull,semidiscrete-shared-masked,semidiscrete-shared-masked-pull \
    2>>"$G/profile.err" | tee "$G/profile_pull_k8192.txt"
  for run in 1 2; do
    timeout 60 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,semidiscrete-eager-update \
      --rounds 15 --json "$G/step_time_graph_k512_run$run.json" 2>>"$G/step.err" | tail -4
  done
  timeout 90 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,semidiscrete-compiled-update \
    --rounds 15 --json "$G/step_time_graph_vs_compiled_k512.json" 2>>"$G/step.err" | tail -4
  timeout 60 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,semidiscrete-eager-update \
    --num-codes 8192 --rounds 15 --json "$G/step_time_graph_k8192.json" 2>>"$G/step.err" | tail -4
  timeout 60 $PY benchmarks/step_time.py --device "$DEVICE" --models vqvae,semidiscrete,semidiscrete-eager-update \
    --arch conv64 --hidden 256 --batch-size 128 --rounds 12 --json "$G/step_time_graph_conv64.json" 2>>"$G/step.err" | tail -4
  tar czf "$OUT/graph.tgz" -C "$OUT" graph && rm -r "$G"
fi
has zoo || exit 0
# 3. the host zoo (issue #34), both seeds, most wanted cells first; each process rewrites its result file at
# every evaluation, so the cells cut by the deadline keep the curves they reached
jobs=()
for ds in cifar10 mnist; do
  for host in paper default-init groupnorm sequence residual; do for seed in 0 1; do
    jobs+=("--host $host --dataset $ds --num-codes 512 --seed $seed"); done; done
  for host in default-init paper; do for seed in 0 1; do
    jobs+=("--host $host --dataset $ds --num-codes 8192 --seed $seed"); done; done
done
printf '%s\n' "${jobs[@]}" | grep -e "${ZOO_ONLY:-.}" | timeout "$DEADLINE" xargs -P "$P" -I{} sh -c \
  "$PY benchmarks/hosts.py {} --steps $STEPS --eval-every $EVAL --device $DEVICE --tag gpu \
   --pack .gpudata/\$(echo '{}' | sed 's/.*--dataset \([a-z0-9]*\).*/\1/').pt > /dev/null 2>>'$OUT/zoo_errors.log'"
# Everything comes back in this one archive: the run tool returns at most 8 files from $OUT (copy nothing else
# there), and the next call resets the machine's tree to the committed files (docs/lab/30-39.md#h100-compile-update)
tar czf "$OUT/zoo.tgz" benchmarks/results/host_*_gpu.json benchmarks/results/host_*_gpu.png 2>/dev/null
ls benchmarks/results/host_*_gpu.json | wc -l
