# Tensor Parallelism from Scratch — build, run, test.
#
#   make run      install what is missing, build, run every lesson (each under mpirun)
#   make test     install what is missing, build, run every test and every lesson;
#                 the last line is "N passed, M failed"
#   make          build everything into build/ (build/bin, build/lib)
#   make lessons  build the lessons only
#   make bench    measure the GEMM and the collectives (ratios, with correctness columns)
#   make docs     Doxygen over lib/ and the lesson pages into docs/html
#   make clean    remove build/ and docs/html
#
# Overridable: MPICXX (the MPI C++ compiler wrapper), MPIEXEC (the launcher), NP (the rank counts
# the MPI tests run under), BUILD (the output folder), CXXFLAGS_EXTRA / LDFLAGS_EXTRA.
#   make test MPICXX=mpicxx.openmpi MPIEXEC=mpirun.openmpi BUILD=build-openmpi NP="1 2"

MPICXX  ?= mpicxx
MPIEXEC ?= mpirun
NP      ?= 1 2 3 4
BUILD   ?= build

# OMPI/MPICH_SKIP_MPICXX: we use the C API; Open MPI's deprecated C++ bindings header warns.
CXXFLAGS := -std=c++17 -O2 -Wall -Wextra -fopenmp -MMD -MP -Ilib \
            -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX $(CXXFLAGS_EXTRA)
LDFLAGS  := -fopenmp $(LDFLAGS_EXTRA)

export MPICXX MPIEXEC NP BUILD

LIB_SRC     := $(filter-out lib/lesson/%,$(wildcard lib/*/*.cpp))
LESSON_SRC  := $(wildcard lib/lesson/*.cpp)
CPU_SRC     := $(wildcard cpu_backend/*.cpp)
LESSONS     := $(patsubst lessons/%/main.cpp,%,$(wildcard lessons/*/main.cpp))
SERIAL_TEST := tests/test_gemm.cpp tests/test_rng.cpp tests/test_options.cpp tests/test_tensor.cpp \
               tests/test_kernels.cpp tests/test_safetensors.cpp
MPI_TEST    := $(filter-out $(SERIAL_TEST) tests/test_util.cpp,$(wildcard tests/test_*.cpp)) tests/mpi_main.cpp

obj = $(patsubst %.cpp,$(BUILD)/obj/%.o,$(1))

LIBTP     := $(BUILD)/lib/libtp.a
LIBTP_CPU := $(BUILD)/lib/libtp_cpu.a
# lib/lesson sits above the launcher (it calls tp::run_program), so it is its own archive, linked first.
LIBTP_LESSON := $(BUILD)/lib/libtp_lesson.a
LESSON_BINS := $(patsubst %,$(BUILD)/bin/lesson_%,$(LESSONS))
TOOL_BINS   := $(patsubst tools/%.cpp,$(BUILD)/bin/%,$(wildcard tools/tp_*.cpp))
TEST_BINS   := $(BUILD)/bin/test_serial $(BUILD)/bin/test_mpi $(BUILD)/bin/fail_one_rank

.PHONY: all lessons tests tools run test docs bench clean deps
.SECONDARY:
all: lessons tests tools

lessons: $(LESSON_BINS)
tools: $(TOOL_BINS)
tests: $(TEST_BINS)

# Checks for MPI, OpenMP and GoogleTest (installing what is missing) before anything compiles.
deps:
	@DEPS_CACHE=$(BUILD)/.deps scripts/install-deps.sh

$(BUILD)/obj/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(MPICXX) $(CXXFLAGS) -Icpu_backend -c $< -o $@

$(LIBTP): $(call obj,$(LIB_SRC))
	@mkdir -p $(dir $@)
	ar rcs $@ $^

$(LIBTP_CPU): $(call obj,$(CPU_SRC))
	@mkdir -p $(dir $@)
	ar rcs $@ $^

$(LIBTP_LESSON): $(call obj,$(LESSON_SRC))
	@mkdir -p $(dir $@)
	ar rcs $@ $^

$(BUILD)/bin/lesson_%: $(BUILD)/obj/lessons/%/main.o $(LIBTP_LESSON) $(LIBTP_CPU) $(LIBTP)
	@mkdir -p $(dir $@)
	$(MPICXX) $(LDFLAGS) $^ -o $@

$(BUILD)/bin/test_serial: $(call obj,$(SERIAL_TEST) tests/test_util.cpp) $(LIBTP_CPU) $(LIBTP)
	@mkdir -p $(dir $@)
	$(MPICXX) $(LDFLAGS) $^ -o $@ -lgtest_main -lgtest -pthread

$(BUILD)/bin/test_mpi: $(call obj,$(MPI_TEST) tests/test_util.cpp) $(LIBTP_CPU) $(LIBTP)
	@mkdir -p $(dir $@)
	$(MPICXX) $(LDFLAGS) $^ -o $@ -lgtest -pthread

$(BUILD)/bin/fail_one_rank: $(BUILD)/obj/tests/fail_one_rank.o $(LIBTP_CPU) $(LIBTP)
	@mkdir -p $(dir $@)
	$(MPICXX) $(LDFLAGS) $^ -o $@

$(BUILD)/bin/tp_%: $(BUILD)/obj/tools/tp_%.o $(LIBTP_CPU) $(LIBTP)
	@mkdir -p $(dir $@)
	$(MPICXX) $(LDFLAGS) $^ -o $@

run: lessons
	@scripts/run-lessons.sh

test: all
	@scripts/run-tests.sh

# GEMM (blocked vs naive) and collectives (algbw/busbw), each with a correctness column.
bench: $(BUILD)/bin/tp_bench
	$(MPIEXEC) -np 2 $(BUILD)/bin/tp_bench

docs:
	@scripts/install-deps.sh --docs
	@mkdir -p $(BUILD)
	doxygen docs/Doxyfile 2> $(BUILD)/doxygen-warnings.txt
	@if [ -s $(BUILD)/doxygen-warnings.txt ]; then cat $(BUILD)/doxygen-warnings.txt; \
	  echo "✗ doxygen warnings (above)"; exit 1; else echo "✓ docs/html/index.html (no warnings)"; fi

clean:
	rm -rf $(BUILD) docs/html

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
