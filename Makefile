# Tensor Parallelism from Scratch — build, run, test.
#
#   make run      install what is missing, build, run every lesson (each under mpirun), the whole
#                 tour in lessons/lessons.txt's order; ends with one summary line per lesson
#   make test     install what is missing, build, run every test and every lesson (and compare each
#                 lesson's output with its page); ends with each group's time (about 10 min on 2
#                 cores) and the line "N passed, M failed"
#   make check    the inner loop (about 3 min on 2 cores): layers and format, the serial tests, the
#                 MPI tests at np 2, every lesson and its page; the same last line
#   make          build everything into build/ (build/bin, build/lib)
#   make lessons  build the lessons only
#   make exercise N=03  grade exercise 03 (exercises/README.md): its lesson or test run with your
#                 exercises/03_*.cpp in place of the library's body; PASSED, or what differed and
#                 hints. REFERENCE=1: the library's own body. make exercises: all of them
#   make bench    GEMM, threads, collectives, overlap, training vs PyTorch: each ratio interleaved and
#                 repeated (3 runs, 5 for overlap and scaling), median, spread, ✓ ✗ ~ (build/bench/);
#                 ~4 min on a quiet 2-core machine; BENCH_QUICK=1: 3 runs everywhere
#   make docs     the textbook: Doxygen over the lesson pages and lib/ into docs/html (offline:
#                 MathJax formulas, each lesson = introduction, results, program; warnings fail)
#   make lesson-pages  run every lesson and write its output (and pictures) into its page's Results
#                 (a block that differs only in timings and rounding is kept; TIMINGS=1 rewrites it)
#   make lesson-check  every lesson and its page check only (the lessons' part of make test), e.g.
#                 under another BLAS kernel: OPENBLAS_CORETYPE=Sandybridge make lesson-check
#   make gpu-check  on a machine with a GPU: build, GPU tests, every lesson on the GPU, timings
#   make gpu-emu  the correctness half of gpu-check on the CUDA emulator (any machine)
#   make test SANITIZE=address,undefined
#                 the same tests built with those sanitizers (any -fsanitize= list) into build-san/,
#                 without the GPU backend and the CUDA emulator; a sanitizer report anywhere fails
#   make sanitize-quick  CI's short sanitizer run (ASan + UBSan) in build-san/: serial tests, MPI
#                 tests at np 2, three short tp_train runs (--sp, --save/--load, --dp); 4-7 min on 2 cores
#   make openmpi-quick  CI's short run under Open MPI (mpicxx.openmpi) in build-openmpi/: the same
#                 checks unsanitized, the MPI tests at np 1 2 3 4
#   make fuzz     libFuzzer on the safetensors reader, checkpoint metadata, option parser [FUZZ_SECONDS=60]
#   make format   clang-format every source file in place (.clang-format; make test checks it)
#   make compile_commands  build/compile_commands.json for editors (clangd finds it in build/)
#   make help     this list
#   make clean    remove build/ and docs/html (make clean SANITIZE=address: build-san/)
#
# Overridable: MPICXX (the MPI C++ compiler wrapper), MPIEXEC (the launcher), NP (the rank counts
# the MPI tests run under), BUILD (the output folder), CXXFLAGS_EXTRA / LDFLAGS_EXTRA, BLAS_LIBS
# (default -lopenblas; e.g. "-L$(brew --prefix openblas)/lib -lopenblas" with CXXFLAGS_EXTRA
# "-I$(brew --prefix openblas)/include" on macOS). NO_ONEDNN=1: build without the oneDNN bf16 GEMM.
#   make test MPICXX=mpicxx.openmpi MPIEXEC=mpirun.openmpi BUILD=build-openmpi NP="1 2"
#
# GPU backend (gpu_backend/): built whenever nvcc is found, with cuBLAS and NCCL; nothing needs a
# GPU at build time. NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), CUDA_HOME
# (default: the folder above nvcc's bin/), NCCL_HOME (when NCCL is not under CUDA_HOME or /usr),
# CUDA_ARCH (default: sm_80 and sm_90 code plus compute_90 PTX), NO_CUDA=1 (skip it). Without it
# the build links launcher/no_gpu.cpp, and --backend gpu says so. $(BUILD)/gpu-backend records
# which ("yes", or "no: <why>") for the scripts.
#   make NO_CUDA=1                  make CUDA_ARCH="-gencode arch=compute_90,code=sm_90"

MPICXX  ?= mpicxx
MPIEXEC ?= mpirun
NP      ?= 1 2 3 4

# ---- Sanitizers: make test SANITIZE=address,undefined --------------------------------------------
# SANITIZE is the list given to -fsanitize= (any that gcc takes: address, undefined, leak, ...).
# Everything that runs on the CPU is compiled with it, with frame pointers and line tables (-g1)
# for the reports, at -O1 (what the sanitizers' own documentation suggests; against -O2 -g it
# compiles in under half the time: make sanitize-quick took 409 s against 782 on a 2-core Xeon),
# and UBSan findings abort instead of printing and going on. It builds into build-san/ (unless BUILD
# is given), so sanitized objects never mix with build/'s. The GPU backend is left out (NO_CUDA=1:
# device code is not sanitized, and the CUDA runtime does not run under ASan), and so is the CUDA
# emulator (its fibers switch stacks behind ASan's back); scripts/run-tests.sh skips both and
# counts any sanitizer report in a log as a failure. scripts/common.sh sets the runtime options;
# tests/sanitizers/lsan.supp lists the only leaks suppressed (the MPI library's own, nothing of ours).
ifneq ($(strip $(SANITIZE)),)
  BUILD ?= build-san
  override NO_CUDA := 1
  SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -O1 -g1 -fno-sanitize-recover=undefined
endif
BUILD   ?= build

# OMPI/MPICH_SKIP_MPICXX: we use the C API; Open MPI's deprecated C++ bindings header warns.
CXXFLAGS := -std=c++17 -O2 -Wall -Wextra -MMD -MP \
            -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX $(SAN_FLAGS) $(CXXFLAGS_EXTRA)
# OpenMP only where it runs: the CPU backend's kernels, the launcher's thread count (launcher/node)
# and the tests that set it. lib/ has no `#pragma omp` and is compiled without it; the link takes
# -fopenmp since every program links the CPU backend (libgomp).
OPENMP   := -fopenmp
LDFLAGS  := $(OPENMP) $(SAN_FLAGS) $(LDFLAGS_EXTRA)
# The CPU backend's GEMM: CBLAS from OpenBLAS (scripts/install-deps.sh installs and reports it).
BLAS_LIBS ?= -lopenblas
# The CPU backend's bf16 GEMM through oneDNN (optional: cpu_backend/onednn_gemm.h): built when
# dnnl.hpp and libdnnl are found (Debian's libdnnl-dev, which scripts/install-deps.sh installs);
# NO_ONEDNN=1 skips it (bf16 GEMMs then run as cblas_sgemm on f32 stand-ins). Found after deps
# has run (so a first build on a fresh machine has it), $(BUILD)/onednn records the answer; only
# cpu_backend/onednn_gemm.cpp sees TP_HAVE_ONEDNN, and the link adds -ldnnl when it says yes.
ONEDNN_STAMP := $(BUILD)/onednn
ONEDNN_YES   = [ "$$(cat $(ONEDNN_STAMP) 2>/dev/null)" = yes ]
ONEDNN_LIBS  = $$($(ONEDNN_YES) && echo -ldnnl)
# lib/text's Unicode character classes: ICU's common library (scripts/install-deps.sh checks it).
ICU_LIBS ?= -licuuc

# ---- The layers, and what each may see ------------------------------------------------------------
# Each folder is compiled with the include paths of the layers below it and nothing else, so an
# include that crosses a layer the wrong way is a compile error (scripts/check-layers.py checks the
# same rule on the sources, and make docs draws docs/architecture.md's layer picture and table from it):
#
#   lib/          the math, the layers, the model        $(CXX)     -Ilib
#   cpu_backend/  CpuDevice (OpenMP, OpenBLAS)           $(CXX)     -Ilib -Icpu_backend
#   mpi/          MpiCommunicator, MPI helpers           $(MPICXX)  -Ilib
#   gpu_backend/  CudaDevice, NcclCommunicator           nvcc -Ilib -Igpu_backend (.cu), $(MPICXX) -Ilib -Impi
#                                                        (.cpp: NCCL bootstraps over MPI)
#   launcher/     run_program, --backend/--comm          $(MPICXX)  -Ilib -Icpu_backend -Igpu_backend -Impi
#   lessons/      lesson.h + the lessons                 $(CXX)     -Ilib -Ilauncher -Ilessons
#   exercises/    one library function's body each       $(CXX)     -Ilib
#   tools/        tp_train, tp_bench (bare MPI calls)    $(MPICXX)  -Ilib -Ilauncher -Impi -Icpu_backend
#                                                        (cpu_direct.h: tp_bench's direct sgemm)
#   tests/        everything (they test the backends)    $(MPICXX)
#
# lib/ gets the plain C++ compiler and no MPI include path: <mpi.h> there does not compile. A
# backend also sees its own folder, so its kernels/ files include its headers by the same names.
INC_LIB      := -Ilib
INC_CPU      := -Ilib -Icpu_backend
INC_MPI      := -Ilib
INC_GPU      := -Ilib -Impi
INC_LAUNCHER := -Ilib -Icpu_backend -Igpu_backend -Impi
INC_LESSON   := -Ilib -Ilauncher -Ilessons
INC_EXERCISE := -Ilib
INC_TOOL     := -Ilib -Ilauncher -Impi -Icpu_backend
INC_TEST     := -Ilib -Ilauncher -Impi -Icpu_backend -Igpu_backend -Itests

# ---- GPU backend: found or not -------------------------------------------------------------------
ifeq ($(origin NVCC),undefined)
  NVCC := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(realpath $(if $(NVCC),$(shell command -v $(NVCC) 2>/dev/null)))))
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
GPU_CU_SRC  := $(wildcard gpu_backend/*.cu gpu_backend/kernels/*.cu)
GPU_CPP_SRC := $(wildcard gpu_backend/*.cpp)
NCCL_INC := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) $(CUDA_HOME)/include/nccl.h \
                                    /usr/include/nccl.h /usr/local/include/nccl.h))
ifeq ($(NO_CUDA),1)
  GPU_BACKEND := no: NO_CUDA=1
else ifeq ($(NVCC),)
  GPU_BACKEND := no: nvcc not found
else ifeq ($(GPU_CU_SRC),)
  GPU_BACKEND := no: gpu_backend/ has no .cu sources
else ifeq ($(NCCL_INC),)
  GPU_BACKEND := no: nccl.h not found (set NCCL_HOME)
else
  GPU_BACKEND := yes
endif

export MPICXX MPIEXEC NP BUILD NO_CUDA NVCC BLAS_LIBS ICU_LIBS SANITIZE NO_ONEDNN

LIB_SRC     := $(wildcard lib/*/*.cpp)
LESSON_SRC  := $(wildcard lessons/*.cpp)
CPU_SRC     := $(wildcard cpu_backend/*.cpp cpu_backend/kernels/*.cpp)
MPI_SRC     := $(wildcard mpi/*.cpp)
# no_gpu.cpp is not in libtp_launcher.a: each program links either it or libtp_gpu.a (GPU_LINK below).
LAUNCHER_SRC := $(filter-out launcher/no_gpu.cpp,$(wildcard launcher/*.cpp))
LESSONS     := $(patsubst lessons/%/main.cpp,%,$(wildcard lessons/*/main.cpp))
# tests/<layer>/test_<concept>.cpp, the layer of lib/ (or the backend, mpi/, launcher/) it tests: one
# ending in _mpi.cpp runs under mpirun in test_mpi (tests/mpi_main.cpp), any other in test_serial
# (no MPI). tests/gpu_backend/test_gpu.cpp is its own MPI binary (GPU against CPU); it builds in every
# build and skips when --backend gpu has no device.
LAYER_TESTS := $(filter-out tests/cuda_emu/% tests/fuzz/%,$(wildcard tests/*/test_*.cpp))
GPU_TEST    := tests/gpu_backend/test_gpu.cpp
SERIAL_TEST := $(filter-out %_mpi.cpp $(GPU_TEST),$(LAYER_TESTS))
MPI_TEST    := $(filter %_mpi.cpp,$(LAYER_TESTS)) tests/mpi_main.cpp

obj = $(patsubst %.cpp,$(BUILD)/obj/%.o,$(1))

LIBTP     := $(BUILD)/lib/libtp.a
LIBTP_CPU := $(BUILD)/lib/libtp_cpu.a
LIBTP_MPI := $(BUILD)/lib/libtp_mpi.a
LIBTP_LAUNCHER := $(BUILD)/lib/libtp_launcher.a
# lessons/lesson.cpp sits above the launcher (it calls tp::run_program): its own archive, linked first.
LIBTP_LESSON := $(BUILD)/lib/libtp_lesson.a
LESSON_BINS := $(patsubst %,$(BUILD)/bin/lesson_%,$(LESSONS))
TOOL_BINS   := $(patsubst tools/%.cpp,$(BUILD)/bin/%,$(wildcard tools/tp_*.cpp)) $(BUILD)/bin/tp_bench
# tp_bench is a folder: its driver (main.cpp), what the suites share (bench.cpp) and one file per
# suite, each registering itself (tools/tp_bench/bench.h); all of them linked as objects, so that
# every suite's registration runs.
BENCH_OBJ   := $(patsubst tools/%.cpp,$(BUILD)/obj/tools/%.o,$(wildcard tools/tp_bench/*.cpp))
TEST_BINS   := $(BUILD)/bin/test_serial $(BUILD)/bin/test_mpi $(BUILD)/bin/fail_one_rank $(BUILD)/bin/test_gpu \
               $(BUILD)/bin/collective_mismatch \
               $(if $(SAN_FLAGS),,$(BUILD)/emu/bin/test_gpu $(BUILD)/emu/bin/lesson_01_block_matmul $(BUILD)/emu/bin/emu_selftest \
                 $(BUILD)/emu/bin/collective_mismatch)

# What every program links for `--backend gpu`: the GPU backend and the CUDA libraries, or the
# stub that says there is none. $(GPU_STAMP) changes (only) when that choice does, so switching
# NO_CUDA relinks everything.
LIBTP_GPU := $(BUILD)/lib/libtp_gpu.a
comma     := ,
GPU_STAMP := $(BUILD)/gpu-backend
ifeq ($(GPU_BACKEND),yes)
  CUDA_LIBDIRS := $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(if $(NCCL_HOME),$(NCCL_HOME)/lib))
  GPU_LINK   := $(LIBTP_GPU)
  GPU_LDLIBS := $(addprefix -L,$(CUDA_LIBDIRS)) -lcublas -lcudart -lnccl $(addprefix -Wl$(comma)-rpath$(comma),$(CUDA_LIBDIRS))
else
  GPU_LINK   := $(BUILD)/obj/launcher/no_gpu.o
  GPU_LDLIBS :=
endif
# The MPI that $(MPICXX) compiles against (where the wrapper leads, and what it runs): the objects
# it compiles depend on $(MPI_STAMP), which changes (only) when that does, so an existing build is
# rebuilt, not mixed, when the wrapper moves to another MPI (Debian's mpicxx moves to Open MPI when
# Open MPI is installed beside MPICH).
MPI_STAMP := $(BUILD)/mpi-impl
# The link line: objects and archives of the rule ($^ without the stamps), then the GPU libraries.
LINK = $(MPICXX) $(LDFLAGS) $(filter-out $(GPU_STAMP) $(MPI_STAMP),$^) $(BLAS_LIBS) $(ONEDNN_LIBS) $(ICU_LIBS) -o $@
# What every program links below its own objects, top layer first: the launcher, the CPU backend,
# the GPU backend (or its stub), MPI, lib.
BACKENDS = $(LIBTP_LAUNCHER) $(LIBTP_CPU) $(GPU_LINK) $(LIBTP_MPI) $(LIBTP) $(GPU_STAMP)

.PHONY: all lessons tests tools run test check docs bench clean deps gpu-check gpu-emu help format fuzz \
        lesson-pages lesson-check sanitize-quick openmpi-quick compile_commands exercise exercises \
        exercise-bins FORCE
# Keep the objects that only pattern rules mention (make would delete them as intermediates).
# Only these: a bare .SECONDARY would also stop a missing archive from being rebuilt.
.SECONDARY: $(patsubst %,$(BUILD)/obj/lessons/%/main.o,$(LESSONS)) \
            $(patsubst tools/%.cpp,$(BUILD)/obj/tools/%.o,$(wildcard tools/*.cpp)) \
            $(patsubst gpu_backend/%.cu,$(BUILD)/emu/src/%.cpp,$(GPU_CU_SRC)) $(BUILD)/emu/src/selftest.cpp
all: lessons tests tools $(GPU_STAMP)

lessons: $(LESSON_BINS)
tools: $(TOOL_BINS)
tests: $(TEST_BINS)

# Checks for MPI, OpenMP and GoogleTest (installing what is missing) before anything compiles.
deps:
	@DEPS_CACHE=$(BUILD)/.deps GPU_BACKEND="$(GPU_BACKEND)" scripts/install-deps.sh

# One rule per layer (see "The layers" above).
$(BUILD)/obj/lib/%.o: lib/%.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(INC_LIB) -c $< -o $@

# -ffp-contract=off: a·b + c stays two roundings in the kernels' AVX-512 clones too
# (cpu_backend/kernels/kernel_util.h, TP_CPU_CLONES), so every clone gives the same bits;
# -fno-math-errno: std::sqrt (AdamW's) vectorises, as no errno is set (nothing reads it).
CPU_KERNEL_FLAGS := -ffp-contract=off -fno-math-errno
$(BUILD)/obj/cpu_backend/%.o: cpu_backend/%.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OPENMP) $(CPU_KERNEL_FLAGS) $(INC_CPU) -c $< -o $@

$(BUILD)/obj/mpi/%.o: mpi/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) $(INC_MPI) -c $< -o $@

$(BUILD)/obj/launcher/%.o: launcher/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) $(OPENMP) $(INC_LAUNCHER) -c $< -o $@

$(BUILD)/obj/lessons/%.o: lessons/%.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(INC_LESSON) -c $< -o $@

$(BUILD)/obj/tools/%.o: tools/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) $(INC_TOOL) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) $(OPENMP) $(INC_TEST) -c $< -o $@

$(GPU_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo "$(GPU_BACKEND)" | cmp -s - $@ || echo "$(GPU_BACKEND)" > $@

$(MPI_STAMP): FORCE
	@mkdir -p $(dir $@)
	@m="$$(readlink -f "$$(command -v $(MPICXX))" 2>/dev/null): $$($(MPICXX) -show 2>/dev/null || $(MPICXX) --showme 2>/dev/null)"; \
	echo "$$m" | cmp -s - $@ || { [ -f $@ ] && echo "· $(MPICXX) now compiles against another MPI: rebuilding what it compiled"; echo "$$m" > $@; }

# The oneDNN GEMM: its one source compiled with TP_HAVE_ONEDNN when found, rebuilt when that changes.
$(ONEDNN_STAMP): FORCE | deps
	@mkdir -p $(dir $@)
	@if [ "$(NO_ONEDNN)" = 1 ]; then d="no: NO_ONEDNN=1"; \
	elif echo '#include <dnnl.hpp>' | $(CXX) -E -x c++ - >/dev/null 2>&1 && \
	     $(CXX) -print-file-name=libdnnl.so | grep -q /; then d=yes; \
	else d="no: dnnl.hpp or libdnnl.so not found (libdnnl-dev)"; fi; \
	echo "$$d" | cmp -s - $@ || { echo "$$d" > $@; case "$$d" in \
	  yes) echo "✓ oneDNN found: the CPU's bf16 GEMM can use it";; \
	  *) echo "· $${d#no: }: CPU bf16 GEMMs run as sgemm on f32 stand-ins";; esac; }

$(BUILD)/obj/cpu_backend/onednn_gemm.o: cpu_backend/onednn_gemm.cpp $(ONEDNN_STAMP) | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(OPENMP) $(INC_CPU) $$($(ONEDNN_YES) && echo -DTP_HAVE_ONEDNN) -c $< -o $@

# ---- GPU backend objects: .cu through nvcc, .cpp (gpu_entry, the NCCL communicator) through mpicxx --
# The .cu files (gpu_backend/*.cu, gpu_backend/kernels/*.cu) see lib/ and their own folder only (no
# MPI: nothing there talks to other ranks). libtp_gpu.a is linked after libtp_launcher.a (which
# calls into it) and before libtp_mpi.a and libtp.a (which it calls).
CUDA_INC  := -isystem $(CUDA_HOME)/include $(if $(NCCL_HOME),-isystem $(NCCL_HOME)/include)
NVCCFLAGS  = -std=c++17 --expt-relaxed-constexpr -O2 $(CUDA_ARCH) $(INC_LIB) -Igpu_backend \
             -Xcompiler -Wall,-Wextra -MMD -MP $(NVCCFLAGS_EXTRA)

$(BUILD)/obj/gpu_backend/%.o: gpu_backend/%.cu | deps
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MF $(@:.o=.d) -c $< -o $@

$(BUILD)/obj/gpu_backend/%.o: gpu_backend/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) $(INC_GPU) $(CUDA_INC) -c $< -o $@

$(LIBTP_GPU): $(call obj,$(GPU_CPP_SRC)) $(patsubst %.cu,$(BUILD)/obj/%.o,$(GPU_CU_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTP): $(call obj,$(LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTP_CPU): $(call obj,$(CPU_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTP_MPI): $(call obj,$(MPI_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTP_LAUNCHER): $(call obj,$(LAUNCHER_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBTP_LESSON): $(call obj,$(LESSON_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/lesson_%: $(BUILD)/obj/lessons/%/main.o $(LIBTP_LESSON) $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) $(GPU_LDLIBS)

$(BUILD)/bin/test_serial: $(call obj,$(SERIAL_TEST) tests/test_util.cpp) $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) -lgtest_main -lgtest -pthread $(GPU_LDLIBS)

$(BUILD)/bin/test_mpi: $(call obj,$(MPI_TEST) tests/test_util.cpp) $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) -lgtest -pthread $(GPU_LDLIBS)

$(BUILD)/bin/test_gpu: $(call obj,$(GPU_TEST) tests/mpi_main.cpp tests/test_util.cpp) $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) -lgtest -pthread $(GPU_LDLIBS)

$(BUILD)/bin/fail_one_rank: $(BUILD)/obj/tests/fail_one_rank.o $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) $(GPU_LDLIBS)

$(BUILD)/bin/collective_mismatch: $(BUILD)/obj/tests/collective_mismatch.o $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) $(GPU_LDLIBS)

$(BUILD)/bin/tp_%: $(BUILD)/obj/tools/tp_%.o $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) $(GPU_LDLIBS)

$(BUILD)/bin/tp_bench: $(BENCH_OBJ) $(BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) $(GPU_LDLIBS)

# ---- Exercises: make exercise N=03 [REFERENCE=1], make exercises (exercises/README.md) ----------
# Exercise NN is exercises/NN_<name>.cpp, the body of one library function to write. Two of its
# lines say how it is graded: "// solution: lib/….cpp", the library file whose body it replaces
# (kept there inside #if TP_EXERCISE != NN: lib/core/exercise.h), and "// grader: PROGRAM NP
# [ARGS]", a lesson or test binary with its rank count and flags. $(BUILD)/exercises/NN/PROGRAM
# is that program linked again with two objects ahead of the archives, the solution file compiled
# without the body and the learner's file, so libtp.a's copy of the file is never pulled in:
# nothing else is rebuilt. scripts/exercise.sh builds, runs and grades it (REFERENCE=1: the
# program as built, the library's own body, which must pass).
EXERCISES := $(patsubst exercises/%.cpp,%,$(wildcard exercises/[0-9][0-9]_*.cpp))
ex_field = $(shell sed -n 's|^// $(2): *||p' exercises/$(1).cpp)
# What a grader links besides the two objects: a lesson's, or a test binary's.
ex_objs = $(if $(filter lesson_%,$(1)),$(BUILD)/obj/lessons/$(1:lesson_%=%)/main.o $(LIBTP_LESSON),$(call \
            obj,$(if $(filter test_serial,$(1)),$(SERIAL_TEST),$(MPI_TEST)) tests/test_util.cpp))
ex_libs = $(if $(filter test_serial,$(1)),-lgtest_main )$(if $(filter test_%,$(1)),-lgtest -pthread)
define EXERCISE_RULES
ex_dir_$(1)  := $(BUILD)/exercises/$(firstword $(subst _, ,$(1)))
ex_prog_$(1) := $(firstword $(call ex_field,$(1),grader))
$$(ex_dir_$(1))/solution.o: $(call ex_field,$(1),solution) | deps
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) $$(INC_LIB) -DTP_EXERCISE=$(patsubst 0%,%,$(firstword $(subst _, ,$(1)))) -c $$< -o $$@
$$(ex_dir_$(1))/exercise.o: exercises/$(1).cpp | deps
	@mkdir -p $$(@D)
	$$(CXX) $$(CXXFLAGS) -Wno-unused-parameter $$(INC_EXERCISE) -c $$< -o $$@
$$(ex_dir_$(1))/$$(ex_prog_$(1)): $$(ex_dir_$(1))/exercise.o $$(ex_dir_$(1))/solution.o \
    $$(call ex_objs,$$(ex_prog_$(1))) $$(BACKENDS)
	$$(LINK) $$(call ex_libs,$$(ex_prog_$(1))) $$(GPU_LDLIBS)
EXERCISE_BINS += $$(ex_dir_$(1))/$$(ex_prog_$(1))
endef
$(foreach e,$(EXERCISES),$(eval $(call EXERCISE_RULES,$(e))))

exercise:
	@scripts/exercise.sh $(if $(REFERENCE),--reference) $(N)
exercises:
	@scripts/exercise.sh $(if $(REFERENCE),--reference) --all
exercise-bins: $(EXERCISE_BINS)

# ---- The CUDA emulator build (tests/cuda_emu/include/cuda_emu.h says what it models) -------------
# The GPU backend compiled by g++ against CPU versions of the CUDA runtime, cuBLAS and NCCL (NCCL
# over MPI): every kernel runs on the CPU, one fiber per CUDA thread, with guarded device memory
# and lazily executed streams. It needs neither nvcc nor a GPU, so `make test` runs the GPU tests
# (build/emu/bin/test_gpu) on every machine; `make gpu-emu` also runs the correctness half of
# `make gpu-check` (lessons, loss curves) through it. No timing means anything there.
EMU         := $(BUILD)/emu
# -Igpu_backend: the translated sources live in $(EMU)/src, away from the headers beside them.
EMU_CXXFLAGS = $(CXXFLAGS) -O1 -g -ffp-contract=off -Wno-unknown-pragmas -Itests/cuda_emu/include \
               $(INC_GPU) -Igpu_backend
# The emulator itself: CUDA runtime, cuBLAS and NCCL on the CPU (tests/cuda_emu/*.cpp).
EMU_RT_OBJ  := $(patsubst tests/cuda_emu/%.cpp,$(BUILD)/obj/emu/%.o,$(wildcard tests/cuda_emu/*.cpp))
EMU_OBJ     := $(patsubst gpu_backend/%.cu,$(BUILD)/obj/emu/%.o,$(GPU_CU_SRC)) \
               $(patsubst gpu_backend/%.cpp,$(BUILD)/obj/emu/%.o,$(GPU_CPP_SRC)) $(EMU_RT_OBJ)
LIBTP_EMU   := $(EMU)/lib/libtp_gpu_emu.a
EMU_BINS    := $(EMU)/bin/tp_train $(EMU)/bin/tp_bench $(patsubst %,$(EMU)/bin/lesson_%,$(LESSONS))

$(EMU)/src/%.cpp: gpu_backend/%.cu scripts/cuda-emu-translate.pl
	@mkdir -p $(dir $@)
	perl scripts/cuda-emu-translate.pl $< > $@.tmp && mv $@.tmp $@

$(EMU)/src/selftest.cpp: tests/cuda_emu/selftest.cu scripts/cuda-emu-translate.pl
	@mkdir -p $(dir $@)
	perl scripts/cuda-emu-translate.pl $< > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/emu/%.o: $(EMU)/src/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(EMU_CXXFLAGS) -c $< -o $@

$(BUILD)/obj/emu/%.o: gpu_backend/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(EMU_CXXFLAGS) -c $< -o $@

$(BUILD)/obj/emu/%.o: tests/cuda_emu/%.cpp $(MPI_STAMP) | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(EMU_CXXFLAGS) -c $< -o $@

$(LIBTP_EMU): $(EMU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# The same programs with the emulated GPU backend in place of $(GPU_LINK).
EMU_BACKENDS = $(LIBTP_LAUNCHER) $(LIBTP_CPU) $(LIBTP_EMU) $(LIBTP_MPI) $(LIBTP)

$(EMU)/bin/test_gpu: $(call obj,$(GPU_TEST) tests/mpi_main.cpp tests/test_util.cpp) $(EMU_BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK) -lgtest -pthread

$(EMU)/bin/collective_mismatch: $(BUILD)/obj/tests/collective_mismatch.o $(EMU_BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK)

# The emulator's own tests (what it claims to catch, it catches).
$(EMU)/bin/emu_selftest: $(BUILD)/obj/emu/selftest.o $(EMU_RT_OBJ)
	@mkdir -p $(dir $@)
	$(LINK) -lgtest_main -lgtest -pthread

$(EMU)/bin/tp_%: $(BUILD)/obj/tools/tp_%.o $(EMU_BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK)

$(EMU)/bin/tp_bench: $(BENCH_OBJ) $(EMU_BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK)

$(EMU)/bin/lesson_%: $(BUILD)/obj/lessons/%/main.o $(LIBTP_LESSON) $(EMU_BACKENDS)
	@mkdir -p $(dir $@)
	$(LINK)

# The correctness steps of gpu-check (GPU tests, every lesson, loss curves) on the emulator.
gpu-emu: all $(EMU_BINS)
	@GPU_CHECK_EMU=1 scripts/gpu-check.sh

run: lessons
	@scripts/run-lessons.sh

# make run, and each lesson's output compared with its page (and the comparison's self-test).
lesson-check: lessons
	@scripts/run-lessons.sh --pages

# Each lesson page's "## Results" block, rewritten from a run of the lesson at its rank count, and
# the pictures it writes copied beside the page (scripts/lesson-pages.py; make test compares). A
# block that differs only in its timings and rounding is kept (its text quotes them) unless TIMINGS=1.
lesson-pages: lessons
	@. scripts/common.sh && MPI_FLAGS="$$MPI_FLAGS" python3 scripts/lesson-pages.py update $(if $(TIMINGS),--timings)

test: all
	@scripts/run-tests.sh

# The inner loop's tier (about 3 minutes on 2 cores): layers and format, the serial tests, the MPI
# tests at np 2 (NP="..." to choose), every lesson and its page; make test runs everything.
check: all
	@TIER=check NP="$(if $(filter command line environment,$(origin NP)),$(NP),2)" scripts/run-tests.sh

# On a machine with a GPU: build, GPU tests, every lesson with --backend gpu against the CPU, and
# the timings (GEMM, one block against PyTorch, memory-bound kernels); logs under $OUT when set.
# Without a GPU it prints one line and exits 0.
gpu-check:
	@scripts/gpu-check.sh

# scripts/bench.py: GEMM vs cblas_sgemm, threads, collectives vs bare MPI, overlap, training
# tokens/s vs PyTorch eager, strong scaling; every row a ratio over repeated, interleaved runs with
# its median, spread and goal, in $(BUILD)/bench/bench.md (BENCH_QUICK=1: 3 runs per row).
bench: $(BUILD)/bin/tp_bench $(BUILD)/bin/tp_train $(BUILD)/bin/lesson_11_overlap
	@. scripts/common.sh && MPI_FLAGS="$$MPI_FLAGS" python3 scripts/bench.py --build $(BUILD)

# ---- Fuzzing: make fuzz [FUZZ_SECONDS=600] -------------------------------------------------------
# libFuzzer targets (tests/fuzz/) for the parsers of untrusted input, the safetensors reader, a
# checkpoint's metadata against its tensors and the option parser, built with clang++ and
# AddressSanitizer + UBSan; scripts/fuzz.sh seeds them with
# real files and runs each for FUZZ_SECONDS.
FUZZ_CXX   ?= clang++
FUZZ_FLAGS := -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
              -Ilib
$(BUILD)/fuzz/fuzz_safetensors: tests/fuzz/fuzz_safetensors.cpp lib/io/safetensors.cpp lib/io/durable_write.cpp \
                                 lib/io/crc32c.cpp lib/core/output_file.cpp lib/core/error.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $^ -o $@
$(BUILD)/fuzz/fuzz_options: tests/fuzz/fuzz_options.cpp lib/core/options.cpp lib/core/error.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $^ -o $@
$(BUILD)/fuzz/fuzz_checkpoint_meta: tests/fuzz/fuzz_checkpoint_meta.cpp lib/model/checkpoint_meta.cpp lib/model/presets.cpp \
                                     lib/io/safetensors.cpp lib/io/durable_write.cpp lib/io/crc32c.cpp \
                                     lib/core/output_file.cpp lib/core/error.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) $^ -o $@
fuzz: $(BUILD)/fuzz/fuzz_safetensors $(BUILD)/fuzz/fuzz_options $(BUILD)/fuzz/fuzz_checkpoint_meta \
      $(BUILD)/bin/tp_train
	@BUILD=$(BUILD) scripts/fuzz.sh

# The pages are the textbook: scripts/doxygen-md-filter.py turns each lesson's README into
# introduction → results (with its pictures) → the commented program, with previous/next links.
# MathJax 2 (MATHJAX_DIR, Debian's libjs-mathjax) is copied beside the HTML: no network needed.
# Its SVG output needs only the TeX input, the SVG output and the extensions.
MATHJAX_DIR ?= /usr/share/javascript/mathjax
export MATHJAX_DIR

# ---- Sanitizers: CI's short run, make sanitize-quick ----------------------------------------------
# The serial tests, the MPI tests at np 2 and a 3-step tp_train that saves and resumes, built with
# SANITIZE (default address,undefined; see "Sanitizers" at the top) into build-san/, in a few
# minutes on 2 cores (scripts/sanitize-quick.sh). `make test SANITIZE=address,undefined` is the
# full run.
SAN_QUICK       := $(if $(SAN_FLAGS),$(SANITIZE),address$(comma)undefined)
SAN_QUICK_BUILD := $(if $(SAN_FLAGS),$(BUILD),build-san)
sanitize-quick:
	@$(MAKE) --no-print-directory SANITIZE=$(SAN_QUICK) BUILD=$(SAN_QUICK_BUILD) \
	  $(addprefix $(SAN_QUICK_BUILD)/bin/,test_serial test_mpi tp_train)
	@SANITIZE=$(SAN_QUICK) BUILD=$(SAN_QUICK_BUILD) scripts/sanitize-quick.sh

# ---- Open MPI: CI's short run under the other MPI, make openmpi-quick ------------------------------
# sanitize-quick's checks unsanitized under Open MPI (mpicxx.openmpi, mpirun.openmpi: Debian's
# names, which stay when mpicxx and mpirun lead to MPICH), in build-openmpi/, with the MPI tests at
# np 1 2 3 4: a few minutes on 2 cores (its build is most of it; without the GPU backend, which
# the MPI communicator does not touch: NO_CUDA=1). The objects no MPI header reaches (lib/,
# cpu_backend/, most tests) are taken from $(BUILD) when it has them up to date
# (scripts/seed-build.sh): only the rest is compiled against Open MPI. OMPI_MPICXX / OMPI_MPIEXEC
# name others. `make test MPICXX=mpicxx.openmpi MPIEXEC=mpirun.openmpi BUILD=build-openmpi` is the full
# run.
OMPI_MPICXX  ?= mpicxx.openmpi
OMPI_MPIEXEC ?= mpirun.openmpi
openmpi-quick:
	@command -v $(OMPI_MPICXX) >/dev/null && command -v $(OMPI_MPIEXEC) >/dev/null || \
	  { echo "make openmpi-quick needs Open MPI's $(OMPI_MPICXX) and $(OMPI_MPIEXEC): on Debian, scripts/install-deps.sh --openmpi installs it beside MPICH (and keeps MPICH the default); elsewhere pass OMPI_MPICXX= and OMPI_MPIEXEC="; exit 1; }
	@$(MAKE) --no-print-directory MPICXX=$(OMPI_MPICXX) BUILD=build-openmpi NO_CUDA=1 build-openmpi/mpi-impl
	@$(if $(SAN_FLAGS),:,scripts/seed-build.sh $(BUILD) build-openmpi)
	@$(MAKE) --no-print-directory MPICXX=$(OMPI_MPICXX) MPIEXEC=$(OMPI_MPIEXEC) BUILD=build-openmpi \
	  NO_CUDA=1 $(addprefix build-openmpi/bin/,test_serial test_mpi tp_train)
	@SANITIZE= QUICK_NP="1 2 3 4" MPIEXEC=$(OMPI_MPIEXEC) BUILD=build-openmpi scripts/sanitize-quick.sh

docs:
	@scripts/install-deps.sh --docs
	@mkdir -p $(BUILD)
	doxygen docs/Doxyfile 2> $(BUILD)/doxygen-warnings.txt
	@if [ -s $(BUILD)/doxygen-warnings.txt ]; then cat $(BUILD)/doxygen-warnings.txt; \
	  echo "✗ doxygen warnings (above)"; exit 1; fi
	@rm -rf docs/html/mathjax && mkdir -p docs/html/mathjax/jax/input docs/html/mathjax/jax/output \
	  docs/html/mathjax/localization && cd $(MATHJAX_DIR) && \
	  cp -RL MathJax.js config extensions $(CURDIR)/docs/html/mathjax/ && \
	  cp -RL jax/element $(CURDIR)/docs/html/mathjax/jax/ && \
	  cp -RL jax/input/TeX $(CURDIR)/docs/html/mathjax/jax/input/ && \
	  cp -RL jax/output/SVG $(CURDIR)/docs/html/mathjax/jax/output/ && \
	  cp -RL localization/en $(CURDIR)/docs/html/mathjax/localization/
	@echo "✓ docs/html/index.html (no warnings; MathJax from $(MATHJAX_DIR))"

# The targets and settings: the comment at the top of this file.
help:
	@sed -n '1,/^$$/{s/^# \{0,1\}//;p}' $(firstword $(MAKEFILE_LIST))

# Every C++ and CUDA source, formatted by .clang-format (scripts/check-format.sh is the check).
format:
	@scripts/check-format.sh --fix

# A full rebuild under bear, which records each compiler call.
compile_commands:
	@command -v bear >/dev/null 2>&1 || { echo "✗ bear not found: apt-get install bear"; exit 1; }
	@mkdir -p $(BUILD)
	bear --output $(BUILD)/compile_commands.json -- $(MAKE) -B all
	@echo "✓ $(BUILD)/compile_commands.json ($$(grep -c '"file"' $(BUILD)/compile_commands.json) files)"

clean:
	rm -rf $(BUILD) docs/html

-include $(shell find $(BUILD)/obj $(BUILD)/exercises -name '*.d' 2>/dev/null)
