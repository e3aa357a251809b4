# pentatron — build, test, run, bench.
#
#   make              build the library, every chapter program and the tests (CPU; + CUDA when nvcc exists)
#   make test         install missing packages, build, run all tests (suites "chNN npK" on K ranks; CH=01: one chapter)
#   make run          the main job on its embedded default
#   make bench        benchmarks that print figures (GEMM, attention, training throughput)
#   make clean
# Options: CUDA=auto|0|1   ARCH="80 90" (SM versions)   MPI=1|0 (0: single-rank build without MPI)
#          NP=8 (ranks for `make run`)   DEBUG=1 (-O0 -g, sanitizers off)

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
  NVFLAGS   = -std=c++17 -O3 $(GENCODE) -lineinfo -Xcompiler -Wall $(CPPFLAGS)
endif

# the shared library every chapter links
LIB_SRC := $(wildcard common/*.cpp)
CU_SRC  := $(if $(filter 1,$(CUDA)),$(wildcard common/cuda/*.cu),)
LIB_OBJ := $(LIB_SRC:%.cpp=$(OBJ)/%.o) $(CU_SRC:%.cu=$(OBJ)/%.o)
LIB     := $(OBJ)/libpenta.a

# chapter programs: NN_name/train.cpp -> build/bin/NN_name ; chapter concept files (*.cpp beside it) link in
CHAPTERS := $(patsubst %/train.cpp,%,$(wildcard [0-9][0-9]_*/train.cpp))
CH_BINS  := $(CHAPTERS:%=$(BIN)/%)
CH_OBJ   := $(patsubst %.cpp,$(OBJ)/%.o,$(filter-out %/train.cpp,$(wildcard [0-9][0-9]_*/*.cpp)))
TEST_OBJ := $(patsubst %.cpp,$(OBJ)/%.o,$(wildcard tests/*.cpp tests/*/*.cpp))
BENCH_BINS := $(patsubst bench/%.cpp,$(BIN)/bench_%,$(wildcard bench/*.cpp))

.PHONY: all deps test run bench clean help
# keep the chapter objects make would otherwise delete as intermediates after linking
.SECONDARY:
all: $(CH_BINS) $(BIN)/tests $(BENCH_BINS)

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

$(OBJ)/%.o: %.cu | $(BUILD)/.deps-ok
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(OBJ)/%/train.o $(CH_OBJ) $(LIB) $(BUILD)/variant.$(VARIANT)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(LDLIBS)

$(BIN)/tests: $(TEST_OBJ) $(CH_OBJ) $(LIB) $(BUILD)/variant.$(VARIANT)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(LDLIBS)

$(BIN)/bench_%: $(OBJ)/bench/%.o $(CH_OBJ) $(LIB) $(BUILD)/variant.$(VARIANT)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(filter %.o %.a,$^) -o $@ $(LDLIBS)

# mpirun as root needs --allow-run-as-root, more ranks than cores --oversubscribe; one BLAS thread per rank
MPIRUN := mpirun $(if $(filter 0,$(shell id -u)),--allow-run-as-root,) --oversubscribe --bind-to none \
          -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1
export MPIRUN

test: all
	@MPI=$(MPI) bash scripts/run_tests.sh $(BIN)/tests $(CH)

run: all
	$(MPIRUN) -np 1 $(BIN)/01_single_gpu --model small

bench: all
	@BIN=$(BIN) bash scripts/run_bench.sh

clean:
	rm -rf $(BUILD)

help:
	@sed -n '2,10p' Makefile

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
