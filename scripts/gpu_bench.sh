#!/usr/bin/env bash
# gpu_bench.sh [OUTDIR] — pentatron against PyTorch on one GPU; prints figures, asserts nothing (it fails only
# when something cannot run). scripts/gpu_check.sh runs it last; BIN names the built programs (build-gpu/bin).
#   1. ops: our GEMM (cuBLAS through ops.hpp) in fp32 and TF32 beside torch.matmul fp32 / TF32 / bf16;
#      our attention (f32 thread-per-row, bf16 tensor cores) beside scaled_dot_product_attention (bf16),
#      forward and backward at ~1B / ~8B Llama shapes (bench_ops --device cuda, tools/torch_gpu_bench.py ops);
#   2. training: the same Llama (MODEL, default llama3.2-1b: 1.2B parameters) with the same batch (BATCH x
#      SEQ tokens, default 4 x 1024) in f32 with TF32 matmuls (chapter 11's bf16 training has not landed):
#      pentatron's 01_single_gpu --tf32, PyTorch eager, and torch.compile when it compiles within its time;
#      tokens/s, MFU, peak memory, and the top kernels by GPU time (ours through tools/kernel_times.cpp, a
#      CUPTI injection library; PyTorch's through torch.profiler).
# Knobs: MODEL, BATCH, SEQ, STEPS (timed steps, default 6), COMPILE_TIMEOUT (s, default 150). Its environment
# is scripts/gpu_env.sh's, as gpu_check.sh's (the carried runtime's libraries, NCCL and cuBLAS, the MPI the
# programs were built with), so it also runs alone after gpu_check.sh has built build-gpu.
set -uo pipefail
out=${1:-$(mktemp -d)}
mkdir -p "$out"
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
bin=${BIN:-build-gpu/bin}
penta_env_cuda && penta_env_runtime && penta_env_gpu_libs "$PWD/build-gpu/links" ||
    { echo "gpu_bench: $penta_env_error" >&2; exit 1; }
penta_env_mpi >/dev/null 2>&1 || true  # a build with MPI loads libmpi even alone
cuda_home=$penta_cuda_home
model=${MODEL:-llama3.2-1b} batch=${BATCH:-4} seq=${SEQ:-1024} steps=${STEPS:-6}
py=python3
status=0
echo "bench: gpu_bench on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), model $model, batch $batch x $seq"
if [ ! -x "$bin/bench_ops" ] || [ ! -x "$bin/01_single_gpu" ]; then
    echo "gpu_bench: $bin/bench_ops or $bin/01_single_gpu is not built (make BUILD=build-gpu CUDA=1 all)" >&2
    exit 1
fi
if ! "$py" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    echo "gpu_bench: python3 has no torch that sees the GPU: the PyTorch columns are missing" >&2
    py=""
    status=1
fi

echo "bench: == 1. ops"
"$bin/bench_ops" --device cuda --reps 10 | tee "$out/bench_ops.txt" || status=1
[ -n "$py" ] && { "$py" tools/torch_gpu_bench.py ops | tee "$out/torch_ops.txt" || status=1; }

echo "bench: == 2. training $model, $batch x $seq tokens per step, f32 with TF32 matmuls"
# our top kernels: the CUPTI injection library, when it builds here (cupti.h and libcupti of the toolkit)
kt=$(dirname "$bin")/libkernel_times.so
inject=()
cupti_inc=$cuda_home/include cupti_lib=$cuda_home/lib64
[ -f "$cupti_inc/cupti.h" ] || { cupti_inc=$cuda_home/extras/CUPTI/include cupti_lib=$cuda_home/extras/CUPTI/lib64; }
if g++ -shared -fPIC -O2 tools/kernel_times.cpp -I"$cupti_inc" -L"$cupti_lib" -Wl,-rpath,"$cupti_lib" -lcupti -o "$kt" 2>"$out/kernel_times_build.log"; then
    inject=(env CUDA_INJECTION64_PATH="$(cd "$(dirname "$kt")" && pwd)/$(basename "$kt")" PENTA_KERNEL_TIMES="$out/ours_kernels.txt")
else
    echo "bench: (our top kernels not available: tools/kernel_times.cpp did not build, see kernel_times_build.log)"
fi
total=$((steps + 2))
ours=("$bin/01_single_gpu" --model "$model" --device cuda --tf32 --micro-batch "$batch" --seq "$seq" --steps "$total"
      --warmup 1 --log-every 1 --eval-every 0 --log-jsonl "$out/ours_train.jsonl")
if ! "${inject[@]}" "${ours[@]}" >"$out/ours_train.log" 2>&1; then
    if [ ${#inject[@]} -gt 0 ]; then  # the profiler's fault? once more without it
        echo "bench: (the run under kernel_times failed: $(tail -n 1 "$out/ours_train.log"); again without it)"
        rm -f "$out/ours_kernels.txt"
        "${ours[@]}" >"$out/ours_train.log" 2>&1 ||
            { echo "gpu_bench: pentatron's training run failed:"; tail -n 5 "$out/ours_train.log"; status=1; }
    else
        echo "gpu_bench: pentatron's training run failed:"; tail -n 5 "$out/ours_train.log"; status=1
    fi
fi
if [ -s "$out/ours_train.jsonl" ]; then
    python3 - "$out/ours_train.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]  # two warm-up steps, as PyTorch's
ms = statistics.median(r["seconds"] for r in rows) * 1e3
tok = rows[0]["tokens"]
mfu = statistics.median((r["mfu"] or 0) for r in rows)
print(f"bench: pentatron --tf32: step median {ms:.1f} ms = {tok / ms * 1e3:.0f} tok/s, MFU {100 * mfu:.1f}% "
      f"(of the TF32 datasheet peak), loss {rows[-1]['loss']:.3f}")
PY
    grep -E "the device pool holds|^memory on cuda|  total" "$out/ours_train.log" | sed 's/^/bench: /'
    [ -s "$out/ours_kernels.txt" ] && head -n 14 "$out/ours_kernels.txt" | sed 's/^/bench:   /'
fi
if [ -n "$py" ]; then
    # the same architecture as the preset (common/model_config.cpp); peak: the H100/H200 TF32 datasheet figure
    case $model in
        llama3.2-1b) arch=(--hidden 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --tied) ;;
        smollm-360m) arch=(--hidden 960 --layers 32 --heads 15 --kv-heads 5 --ffn 2560 --vocab 49152 --tied) ;;
        *) arch=() ; echo "gpu_bench: no PyTorch twin for --model $model (llama3.2-1b, smollm-360m)"; status=1 ;;
    esac
    if [ ${#arch[@]} -gt 0 ]; then
        peak=$(grep -oE 'peak [0-9.]+ TFLOP/s|[0-9.]+ TFLOP/s tf32' "$out/ours_train.log" | grep -oE '[0-9.]+' | head -n 1)
        common=("${arch[@]}" --batch "$batch" --seq "$seq" --steps "$steps" --tf32 --peak-tflops "${peak:-0}")
        "$py" tools/torch_gpu_bench.py train "${common[@]}" --profile 2>&1 | tee "$out/torch_eager.txt" | sed 's/^/bench: /' || status=1
        timeout -k 10 "${COMPILE_TIMEOUT:-150}" "$py" tools/torch_gpu_bench.py train "${common[@]}" --compile \
            >"$out/torch_compile.txt" 2>&1
        rc=$?
        if [ "$rc" = 0 ]; then sed 's/^/bench: /' "$out/torch_compile.txt"
        elif [ "$rc" = 124 ]; then echo "bench: torch.compile: not done within ${COMPILE_TIMEOUT:-150} s (left out)"
        else echo "bench: torch.compile failed (left out): $(tail -n 2 "$out/torch_compile.txt" | tr '\n' ' ')"; fi
    fi
fi
exit $status
