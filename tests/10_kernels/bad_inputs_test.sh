#!/usr/bin/env bash
# bad_inputs_test.sh — chapter 10's rows of the bad-input table: the lab's flags (parts, lists, sizes the
# kernels' tiles cannot cut, head dims without a kernel, rungs of the wrong kind, an unknown model). Each row
# runs build/bin/10_kernels (one process, no mpirun: the lab is single-device) and must exit non-zero, not by
# a signal, within 10 s, naming the flag and the rule (tests/expect_fail.sh). `make test CH=10`.
#   bash tests/10_kernels/bad_inputs_test.sh     (BIN: the programs' folder)
set -uo pipefail
source "$(dirname "$0")/../expect_fail.sh"

EXPECT_JOBS=2 expect_table 10 "$BIN/10_kernels" <<'EOF2'
--part gemm                           | --part 'gemm' is none of all|cpu-gemm|gpu-gemm|fused|attention|bounds
--reps 0                              | --reps 0 must be in 1..1000
--sizes 1024,,512                     | --sizes '1024,,512': an empty item in the comma-separated list
--sizes 0                             | --sizes '0': '0' must be a whole number in 1..16384
--sizes 12x                           | '12x' must be a whole number
--gpu-sizes 1001                      | --gpu-sizes 1001: K must be a multiple of 8 (the GPU rungs load rows in 16-byte pieces)
--tokens -1                           | --tokens -1 must be in 1..1048576
--head-dims 32                        | --head-dims '32': '32' must be a whole number in 64..128
--head-dims 64,96                     | --head-dims 96: the flash kernels are built for 64 and 128
--attn-seq 1000                       | --attn-seq 1000 must be a multiple of 128
--attn-batch 0                        | --attn-batch 0 must be in 1..256
--fused-tokens 0                      | --fused-tokens 0 must be in 1..1048576
--part cpu-gemm --rungs avx1024       | --rungs avx1024: not a CPU rung (valid: naive,blocked,packed,avx2,avx512)
--model llama9                        | unknown model preset 'llama9'
--steps 5                             | unknown flag --steps
EOF2
expect_summary
