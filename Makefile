# pentatron — build, test, run, bench.
#
#   make              build the library, every chapter program and test binary (CPU; + CUDA when nvcc exists)
#   make test         install missing packages, build everything, run every test (suites "chNN npK" on K ranks)
#   make test CH=NN   build and test only what chapter NN rests on: common/'s tests (ch00) and chapter NN's
#   make mutants [CH=NN]  the mutation harness: every known-wrong variant in tests/mutants/ must fail the tests
#   make exercises [CH=NN] [DIR=exercises]  a student copy: every exercise region (tests/exercises/) a stub
#   make grade CH=NN [DIR=exercises] [JSON=1]  build and grade chapter NN's exercises in the copy
#   make grade-all        every exercise blanked alone must score 0, the rest full marks (CI; docs/INSTRUCTORS.md)
#   make run          the 5D trainer on NP=8 CPU ranks (dp 2 x tp 2 x pp 2, 1F1B) learning the addition task
#   make run-cluster  the same on 2 fake nodes x 4 ranks (network namespaces, root; LINK_RATE=1gbit slows the link)
#   make bench        benchmarks that print figures (GEMM, attention, training throughput)
#   make learning-check [LC="--chapters 01 --seeds 1"]  each chapter's default run leaves the plateau? (hours)
#   make figures [CH=NN]  the playbook's pictures from formulas, the planner and short runs -> docs/figures/
#   make clean
# Options: CUDA=auto|0|1   ARCH="80 90" (SM versions)   MPI=1|0 (0: single-rank build without MPI)
#          NVFLAGS_EXTRA="-Xptxas -v" (more nvcc flags: here ptxas's registers and spills of every kernel)
#          NP=8 (ranks for `make run`)   DEBUG=1 (-O0 -g, sanitizers off)   BUILD=build (output folder)
#          CH=NN (two digits: 00 = common/, 01 ... the chapters)   PENTA_TEST_TIMEOUT=900 (s per test run)

CUDA   ?= auto
MPI    ?= 1
ARCH   ?= 80 90
DEBUG  ?= 0
NP     ?= 8
CH     ?=

CUDA_HOME ?= /usr/local/cuda
NVCC_FOUND := $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(CUDA),auto)
  override CUDA := $(if $(NVCC_FOUND),1,0)
endif
NVCC := $(if $(NVCC_FOUND),$(NVCC_FOUND),nvcc)

VARIANT := $(if $(filter 1,$(CUDA)),cuda,cpu)-$(if $(filter 1,$(MPI)),mpi,nompi)$(if $(filter 1,$(DEBUG)),-debug,)
BUILD ?= build
OBJ := $(BUILD)/obj/$(VARIANT)
BIN := $(BUILD)/bin

CXX      := g++
OPT      := $(if $(filter 1,$(DEBUG)),-O0 -g,-O3 -march=native -g1)
CPPFLAGS  = -MMD -MP -DPENTA_SOURCE_DIR=\"$(CURDIR)\" -I/usr/include/x86_64-linux-gnu/openblas-pthread
CXXFLAGS := -std=c++17 $(OPT) -Wall -Wextra -Wno-unused-parameter -Wno-format-zero-length -pthread
LDLIBS    = -lopenblas -lpthread
ifeq ($(MPI),1)
  # recursive (=) so mpicxx is asked only when a recipe runs, i.e. after `deps` has installed it
  MPI_CFLAGS = $(shell mpicxx --showme:compile 2>/dev/null)
  MPI_LIBS   = $(shell mpicxx --showme:link 2>/dev/null)
  CPPFLAGS += -DPENTA_MPI -DOMPI_SKIP_MPICXX $(MPI_CFLAGS)
  LDLIBS   += $(MPI_LIBS)
endif
ifeq ($(CUDA),1)
  CPPFLAGS += -DPENTA_CUDA -DPENTA_NCCL -I$(CUDA_HOME)/include
  LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart
  GENCODE  := $(foreach a,$(ARCH),-gencode arch=compute_$(a),code=sm_$(a))
  NVFLAGS   = -std=c++17 -O3 $(GENCODE) -lineinfo -Xcompiler -Wall $(CPPFLAGS) $(NVFLAGS_EXTRA)
endif

# the shared library every chapter links
LIB_SRC := $(wildcard common/*.cpp)
CU_SRC  := $(if $(filter 1,$(CUDA)),$(wildcard common/cuda/*.cu),)
LIB_OBJ := $(LIB_SRC:%.cpp=$(OBJ)/%.o) $(CU_SRC:%.cu=$(OBJ)/%.o)
LIB     := $(OBJ)/libpenta.a

# Chapters are layered: chapter NN builds on common/ and chapters < NN, never on a later one, so that a
# broken later chapter (a workshop blank, a half-done exercise) cannot break an earlier chapter's build or
# grading. scripts/check_layering.sh checks the includes; here the links follow the same rule:
#   build/bin/NN_name   the chapter's program + the concept files (every other .cpp, and with CUDA every .cu, of
#                       the folder and its subfolders) of chapters <= NN + libpenta. The program is
#                       NN_name/train.cpp, or NN_name/lab.cpp in a chapter that trains nothing (10_kernels: the
#                       kernels lab's driver).
#   build/bin/tests_NN  chapter NN's tests: tests/test_main.cpp (the MPI-aware doctest main) + the test_*.cpp
#                       in tests/NN_name/ + the test helpers and concept files of chapters <= NN + libpenta.
#                       tests_00 holds common/'s tests (tests/00_common/) and links no chapter.
# Test folders: in tests/NN_name/, files named test_*.cpp hold the TEST_CASEs (suites "chNN npK") and any
# other .cpp is a helper (equivalence.cpp, tp_testing.cpp) that this chapter's and every later chapter's test
# binary links; *_test.sh scripts there run with the chapter's tests. tests/README.md says more.
CHAPTERS := $(sort $(patsubst %/,%,$(dir $(wildcard [0-9][0-9]_*/train.cpp [0-9][0-9]_*/lab.cpp))))
num       = $(firstword $(subst _, ,$1))# 04_tensor_parallel -> 04
program   = $(firstword $(wildcard $1/train.cpp $1/lab.cpp))# the program's source in chapter folder $1
NUMS     := 00 $(foreach c,$(CHAPTERS),$(call num,$c))
LAST     := $(lastword $(NUMS))
# the numbers 00 ... $1 of NUMS (two digits each, so comparing them as strings compares them as numbers)
upto      = $(foreach n,$(NUMS),$(if $(filter $n,$(firstword $(sort $n $1))),$n))
objs      = $(patsubst %.cu,$(OBJ)/%.o,$(patsubst %.cpp,$(OBJ)/%.o,$1))
# chapter $1's concept objects (00: none, common/ is libpenta), its test cases, its test helpers. A chapter's
# concept files are every source in its folder and in its subfolders (07_pipeline_parallel/tools/: the checker,
# player, clock, trace and report beside the schedules), less the program and a subfolder's main.cpp, which is
# a program of its own (09_5d/plan/main.cpp: the layout planner's command line)
chsrc     = $(wildcard $1_*/*.$2 $1_*/*/*.$2)
concepts  = $(call objs,$(filter-out %/train.cpp %/lab.cpp %/main.cpp,$(call chsrc,$1,cpp)) \
                        $(if $(filter 1,$(CUDA)),$(call chsrc,$1,cu),))
testcases = $(call objs,$(wildcard tests/$1_*/test_*.cpp))
helpers   = $(call objs,$(filter-out $(wildcard tests/$1_*/test_*.cpp),$(wildcard tests/$1_*/*.cpp)))
# the same, for chapters 00 ... $1
concepts_upto = $(foreach n,$(call upto,$1),$(call concepts,$n))
helpers_upto  = $(foreach n,$(call upto,$1),$(call helpers,$n))

CH_BINS    := $(CHAPTERS:%=$(BIN)/%)
TEST_BINS  := $(NUMS:%=$(BIN)/tests_%)
BENCH_BINS := $(patsubst bench/%.cpp,$(BIN)/bench_%,$(wildcard bench/*.cpp))

# CH=NN must name one chapter that exists, exactly (two digits)
ifneq ($(CH),)
  ifneq ($(words $(CH)) $(filter $(NUMS),$(CH)),1 $(CH))
    $(error CH=$(CH): CH must be the two-digit number of one chapter that exists: $(NUMS) (00 = the tests of common/))
  endif
endif

.PHONY: all deps test mutants exercises grade grade-all run run-cluster bench learning-check figures clean help
# keep the objects that only a pattern rule names (the benchmarks') from being deleted as intermediates after
# linking. Not .SECONDARY: with no names, which makes every object one that make need not rebuild when it is
# missing: a new tests/NN_*/test_*.cpp older than its binary was silently left out of the link.
.PRECIOUS: $(OBJ)/%.o
all: $(CH_BINS) $(TEST_BINS) $(BENCH_BINS)

# installs missing Debian packages once (idempotent; says what it does)
deps: $(BUILD)/.deps-ok
$(BUILD)/.deps-ok: scripts/install_deps.sh
	@bash scripts/install_deps.sh
	@mkdir -p $(BUILD) && touch $@

# relink everything when the variant (CUDA/MPI/DEBUG) changes
$(BUILD)/variant.$(VARIANT):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/variant.* && touch $@

$(OBJ)/%.o: %.cpp | $(BUILD)/.deps-ok
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# RoPE's llama3 table must be transformers' f32 arithmetic operation by operation: -march=native lets GCC fuse
# a multiply and an add into one FMA (one rounding instead of two), 1 ulp off on Llama-3.2-1B (common/rope.cpp)
$(OBJ)/common/rope.o: CXXFLAGS += -ffp-contract=off

$(OBJ)/%.o: %.cu | $(BUILD)/.deps-ok
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# A file named *_sm90a.cu holds Hopper-only instructions (wgmma, setmaxnreg): it is compiled for sm_90a alone,
# whatever ARCH says; its host code checks the device before launching (10_kernels/gemm_wgmma_sm90a.cu).
$(OBJ)/%_sm90a.o: GENCODE := -gencode arch=compute_90a,code=sm_90a
# the kernels lab's kernels are tuned by hand: a register spill is a regression, so ptxas says so in every build
$(OBJ)/10_kernels/%.o: NVFLAGS += -Xptxas -warn-spills
# The wgmma rung's setmaxnreg (40 for the producer warpgroup, 232 for each of the two consumers) balances only
# when the kernel enters with 168 registers a thread: 384 threads x 168 = 128 x (40 + 232 + 232); with fewer,
# the consumers' setmaxnreg.inc waits for registers that never free (a hang on the GPU). ptxas's count (-v) is
# checked in every CUDA build; its report is shown with NVFLAGS_EXTRA="-Xptxas -v" (scripts/gpu_lab.sh).
$(OBJ)/10_kernels/gemm_wgmma_sm90a.o: 10_kernels/gemm_wgmma_sm90a.cu | $(BUILD)/.deps-ok
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -Xptxas -v -c $< -o $@ 2>$@.ptxas || { cat $@.ptxas >&2; exit 1; }
	@$(if $(findstring -v,$(NVFLAGS_EXTRA)),cat $@.ptxas,grep -vE '^ptxas info|^ +[0-9]+ bytes' $@.ptxas) >&2 || true
	@n=$$(grep -A3 'gemm_wgmma_kernel' $@.ptxas | grep -oE 'Used [0-9]+ registers' | grep -oE '[0-9]+' | head -n 1); \
	 [ "$$n" = 168 ] || { echo "$<: gemm_wgmma_kernel uses $${n:-an unknown number of} registers a thread, not 168:" \
	   "setmaxnreg's 40 + 2 x 232 balances only at 168 (384 threads, one block per SM)" >&2; rm -f $@; exit 1; }

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# objects first, the library after them: a static library only supplies what the objects before it need
define LINK
@mkdir -p $(@D)
$(CXX) $(CXXFLAGS) $(filter %.o,$^) $(filter %.a,$^) -o $@ $(LDLIBS)
endef

# chapter $1's program ($2 = its folder) and test binary, linking nothing of a later chapter
define chapter_rules
$(BIN)/$2: $(call objs,$(call program,$2)) $(call concepts_upto,$1) $(LIB) $(BUILD)/variant.$(VARIANT)
	$$(LINK)
$(BIN)/tests_$1: $(OBJ)/tests/test_main.o $(call testcases,$1) $(call helpers_upto,$1) $(call concepts_upto,$1) \
                 $(LIB) $(BUILD)/variant.$(VARIANT)
	$$(LINK)
endef
$(foreach c,$(CHAPTERS),$(eval $(call chapter_rules,$(call num,$c),$c)))

$(BIN)/tests_00: $(OBJ)/tests/test_main.o $(call testcases,00) $(call helpers,00) $(LIB) $(BUILD)/variant.$(VARIANT)
	$(LINK)

# benchmarks may use any chapter
$(BIN)/bench_%: $(OBJ)/bench/%.o $(call concepts_upto,$(LAST)) $(LIB) $(BUILD)/variant.$(VARIANT)
	$(LINK)

# chapter 09's layout planner (09_5d/PLANNER.md): its command line + the concept objects of chapters <= 09;
# built by `all`, and by `make test` when chapter 09 is tested (its bad-flags script runs it)
PLAN_BIN := $(if $(wildcard 09_5d/plan/main.cpp 09_5d/train.cpp),$(BIN)/09_5d_plan,)
ifneq ($(PLAN_BIN),)
all: $(PLAN_BIN)
$(PLAN_BIN): $(OBJ)/09_5d/plan/main.o $(call concepts_upto,09) $(LIB) $(BUILD)/variant.$(VARIANT)
	$(LINK)
ifeq ($(filter-out 09,$(CH)),)
test: $(PLAN_BIN)
endif
endif

# mpirun as root needs --allow-run-as-root, more ranks than cores --oversubscribe; one BLAS thread per rank
MPIRUN := mpirun $(if $(filter 0,$(shell id -u)),--allow-run-as-root,) --oversubscribe --bind-to none \
          -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1
export MPIRUN

# What `make test` runs (scripts/run_tests.sh runs each under a time limit and adds up one total):
# the layering check, every chapter's test binary and *_test.sh scripts (chapter 02: abort_test.sh),
# then tests/tooling/: the runner's and the layering check's own tests and the broken-later-chapter test.
# CH=NN builds only libpenta, the programs of chapters <= NN, tests_00 and tests_NN, and runs the layering
# check, ch00 (the common/ tests every chapter rests on) and chapter NN.
TEST_NUMS := $(if $(CH),$(sort 00 $(CH)),$(NUMS))
TEST_RUNS := scripts/check_layering.sh \
             $(foreach n,$(TEST_NUMS),$(BIN)/tests_$n $(wildcard tests/$(n)_*/*_test.sh)) \
             $(if $(CH),,$(wildcard tests/tooling/*_test.sh))
TEST_DEPS := $(if $(CH),$(LIB) $(filter $(foreach n,$(call upto,$(CH)),$(BIN)/$(n)_%),$(CH_BINS)) \
                 $(TEST_NUMS:%=$(BIN)/tests_%),all)
test: $(TEST_DEPS)
	@BIN=$(BIN) MPI=$(MPI) BUILD=$(BUILD) CUDA=$(CUDA) DEBUG=$(DEBUG) ARCH="$(ARCH)" \
	 bash scripts/run_tests.sh $(TEST_RUNS)

# The mutation harness (tests/mutants/README.md): each known-wrong variant of the concept code in
# tests/mutants/NN_*.txt, one at a time in a scratch copy, must fail `make test CH=NN` (PyTorch hidden).
# CH=NN: chapter NN's catalogue only; MUTANTS=id,id: only those variants.
mutants: $(TEST_DEPS)
	@BIN=$(BIN) MPI=$(MPI) BUILD=$(BUILD) CUDA=$(CUDA) DEBUG=$(DEBUG) ARCH="$(ARCH)" \
	 bash tests/mutants/run_mutants.sh $(CH)

# Workshop exercises (tools/exercises.py, docs/INSTRUCTORS.md): `exercises` writes DIR (default exercises/,
# git-ignored) with chapter CH's (default: every chapter's) solution regions replaced by stubs that fail with
# "exercise NN.k not done"; `grade` builds chapter CH's test binaries in DIR (never a later chapter's) and
# prints the score table, exit 0 only for full marks (JSON=1: machine-readable; TIMEOUT=s per test run,
# default 300). `grade-all` blanks each exercise alone in a scratch copy of this tree and its build folder
# and checks the scores (what CI runs after `make test`).
DIR ?= exercises
exercises:
	@python3 tools/exercises.py make $(if $(CH),--ch $(CH),) --dir $(DIR)
# grade's own status is 0 (full marks), 1 (not full marks) or 2 (could not grade); make itself exits 2 for
# both failures, so the last line says which. Inside a student copy DIR defaults to the copy itself (a
# self-check); DIR=. in the instructor's tree grades the reference solution.
grade: | $(BUILD)/.deps-ok
	@$(if $(CH),,echo "make grade: CH=NN (two digits) names the chapter to grade" >&2; exit 2;) \
	 BUILD=$(BUILD) MPI=$(MPI) CUDA=$(CUDA) DEBUG=$(DEBUG) ARCH="$(ARCH)" \
	 python3 tools/exercises.py grade --ch $(CH) $(if $(filter command line environment,$(origin DIR)),--dir $(DIR),) \
	   $(if $(filter 1,$(JSON)),--json,) $(if $(TIMEOUT),--timeout $(TIMEOUT),); rc=$$?; \
	 case $$rc in 0) ;; 1) echo "make grade: not full marks (tools/exercises.py grade exited 1)" >&2 ;; \
	   *) echo "make grade: could not grade (tools/exercises.py grade exited $$rc)" >&2 ;; esac; exit $$rc
grade-all: $(TEST_DEPS)
	@BUILD=$(BUILD) MPI=$(MPI) CUDA=$(CUDA) DEBUG=$(DEBUG) ARCH="$(ARCH)" \
	 python3 tools/exercises.py sweep $(if $(CH),--ch $(CH),) $(if $(TIMEOUT),--timeout $(TIMEOUT),)

# the 5D trainer (chapter 09) on NP = 8 CPU ranks: dp 2 x tp 2 x pp 2, 1F1B, learning the addition task in 750
# steps (minutes on 2 cores): 4 x 4 micro-batches x dp 2 = 32 sequences a step, LR 2e-3 after 20 warm-up steps, cosine
# down to 1e-4, no weight decay. A flat 1e-3 left the per-batch accuracy swinging by 30 points at the end; a cosine
# from 1e-3 left one run of six half-learned (AVX2, seed 1: 45 %); from 2e-3 all six (2 kernels x 3 seeds) end
# above 90 % (make learning-check LC="--chapters run"). Waiting ranks yield the core (8 ranks share 2 cores).
# RUN_FLAGS="..." overrides.
RUN_5D := --dp 2 --tp 2 --pp 2 --pp-schedule 1f1b --micro-batch 4 --grad-accum 4 --lr 2e-3 --min-lr 1e-4 \
          --warmup 20 --weight-decay 0 --steps 750 --log-every 25
run: $(BIN)/09_5d
	$(MPIRUN) --mca mpi_yield_when_idle 1 -np $(NP) $(BIN)/09_5d $(RUN_5D) $(RUN_FLAGS)

# the same run on a fake cluster of 2 nodes x 4 ranks (scripts/fake_cluster.sh: network + UTS namespaces, needs
# root): mpirun inside node0 starts node1's ranks through the cluster's agent instead of ssh, placement reads the
# real host names (node0, node1), pp crosses the nodes over TCP, tp and dp stay in a node (shared memory).
# LINK_RATE=1gbit limits the inter-node link (tc tbf); the cluster is taken down afterwards, also on failure.
# Over TCP on 2 idle cores a step took 0.22-0.29 s (09_5d/README.md, 2.4-3.4 s under a load of 15).
run-cluster: $(BIN)/09_5d
	@trap 'bash scripts/fake_cluster.sh down' EXIT; trap 'exit 130' INT TERM; \
	bash scripts/fake_cluster.sh up 2 --slots 4 $(if $(LINK_RATE),--link-rate $(LINK_RATE),) && \
	. /run/penta-cluster/env && \
	bash scripts/fake_cluster.sh exec node0 $(MPIRUN) $$PENTA_CLUSTER_MPI_OPTS --mca mpi_yield_when_idle 1 -np 8 \
	    $(BIN)/09_5d $(RUN_5D) $(RUN_FLAGS)

bench: all
	@BIN=$(BIN) bash scripts/run_bench.sh

# Issue 32: every chapter's default command (and make run's) under OpenBLAS's AVX2 and AVX-512 kernels and seeds
# 1-3: where it left the addition task's plateau and its final accuracy (scripts/learning_check.py; 54 runs of 3000
# steps, make run's of 750: about 4-5 hours on 2 cores, the two kernels as two processes side by side). CI runs chapter 01's six, two at a time (.ci/run: LC="--chapters 01 --jobs 2"; one-rank
# runs leave a core free). LC="--chapters 02,run --seeds 1" narrows it;
# LC="--chapters 01 --seeds 1,2,3,4,5,6 --until 0.9" screens a candidate (each run stops at its first 90 %).
learning-check: all
	python3 scripts/learning_check.py --bin $(BIN) $(LC)

# The playbook's pictures (tools/figures/, docs/figures/): each figure from a formula of common/formulas.hpp or the
# planner (through build/bin/formula_dump, which calls the C++: no formula is retyped in Python) or from a short
# run of its chapter's program on CPU ranks; PNG + the JSON of the numbers drawn. CH=NN: that chapter's figures
# (04 and 05 share one module: CH=04). matplotlib is Debian's python3-matplotlib (install_deps.sh with
# PENTA_FIGURES=1), for /usr/bin/python3 where the python3 on PATH lacks it.
FIG_BIN := $(if $(PLAN_BIN),$(BIN)/formula_dump,)
ifneq ($(FIG_BIN),)
all: $(FIG_BIN)
$(FIG_BIN): $(OBJ)/tools/figures/formula_dump.o $(call concepts_upto,09) $(LIB) $(BUILD)/variant.$(VARIANT)
	$(LINK)
endif
FIG_PY = $(shell for p in python3 /usr/bin/python3; do $$p -c 'import matplotlib' 2>/dev/null && { echo $$p; break; }; done)
# The programs are built first, in parallel on every core unless this make already runs under -j (a fresh clone on
# 2 cores: the build, then the figures' short runs, in under 10 minutes; tests/tooling/figures_test.sh checks them).
figures: | $(BUILD)/.deps-ok
	@$(MAKE) --no-print-directory $(if $(findstring jobserver,$(MAKEFLAGS)),,-j$(shell nproc)) $(FIG_BIN) $(PLAN_BIN) $(CH_BINS)
	@PENTA_FIGURES=1 bash scripts/install_deps.sh >/dev/null || exit 1; \
	 py="$(FIG_PY)"; [ -n "$$py" ] || { echo "make figures: no python3 with matplotlib (apt-get install python3-matplotlib)" >&2; exit 1; }; \
	 $$py tools/figures/make_figures.py --bin $(BIN) $(if $(CH),--ch $(CH),)

clean:
	rm -rf $(BUILD)

help:
	@sed -n '2,19p' Makefile

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
